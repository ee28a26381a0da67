package api

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// AppendString appends s as a JSON string. HTML characters are not escaped, so prompts that
// contain "<conversation>" or "a < b" read naturally in logs and stay byte-stable. The bytes are
// encoding/json's (Encoder with SetEscapeHTML(false)): invalid UTF-8 becomes \ufffd, U+2028 and
// U+2029 are escaped. It appends in place rather than through an Encoder and a buffer, which
// cost two allocations and a copy on every string a request renders (TestAppendString).
func AppendString(dst []byte, s string) []byte {
	dst = slices.Grow(dst, len(s)+2)
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// UserMessage renders a Responses input message from the user holding one input_text part.
func UserMessage(text string) []byte {
	b := make([]byte, 0, len(text)+96)
	b = append(b, `{"type":"message","role":"user","content":[{"type":"input_text","text":`...)
	b = AppendString(b, text)
	return append(b, `}]}`...)
}

// CompactionItem renders a Responses compaction output item. encrypted_content is empty in the
// streaming `added` event and final everywhere else.
func CompactionItem(id, encryptedContent string) []byte {
	b := make([]byte, 0, len(id)+len(encryptedContent)+64)
	b = append(b, `{"id":`...)
	b = AppendString(b, id)
	b = append(b, `,"type":"compaction","encrypted_content":`...)
	b = AppendString(b, encryptedContent)
	return append(b, '}')
}

// PrependToArray returns doc with elem inserted as the first element of the JSON array at path
// (a gjson path), or doc unchanged and false when there is no array there. Only the bytes around
// the insertion point are touched.
func PrependToArray(doc []byte, path string, elem []byte) ([]byte, bool) {
	arr := gjson.GetBytes(doc, path)
	if !arr.IsArray() || arr.Index <= 0 {
		return doc, false
	}
	open := arr.Index // the '[' of the array
	empty := len(arr.Array()) == 0
	out := make([]byte, 0, len(doc)+len(elem)+1)
	out = append(out, doc[:open+1]...)
	out = append(out, elem...)
	if !empty {
		out = append(out, ',')
	}
	return append(out, doc[open+1:]...), true
}

// CompactdPrefix starts every encrypted_content compactd issues ("cmp_<id>.<sealed>").
const CompactdPrefix = "cmp_"

// IsForeign reports whether encrypted_content ec marks its item or block as sealed by someone
// other than compactd (OpenAI's or Anthropic's own compaction, replayed after a provider
// switch): a non-empty JSON string that does not start with CompactdPrefix. One that starts
// with it claims to be compactd's, and a failure to open it is a 400, never a silent drop.
// Nothing in ec is decoded.
func IsForeign(ec gjson.Result) bool {
	return ec.Type == gjson.String && ec.Str != "" && !strings.HasPrefix(ec.Str, CompactdPrefix)
}
