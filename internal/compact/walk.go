package compact

import (
	"strings"
	"unsafe"

	"github.com/compactd/compactd/internal/jsonx"
	"github.com/tidwall/gjson"
)

// skipKeys are object keys whose values carry no model-visible text: identifiers and statuses the
// model never reads as prose, opaque ciphertext (reasoning and compaction blobs) and Codex's
// client-side bookkeeping. Counting them would inflate the total by whole kilobytes per item.
var skipKeys = map[string]bool{
	"id":                true,
	"call_id":           true,
	"status":            true,
	"encrypted_content": true,
	"internal_chat_message_metadata_passthrough": true,
}

// Images and inline files are billed by the provider per image tile or per extracted page, not
// by the bytes of their base64 data; counting a data URL as text would make one screenshot weigh
// hundreds of thousands of tokens and trigger compaction at once.
const (
	// imageTokens is the cost charged for an inline image: OpenAI's figure for a 1024x1024
	// high-detail image (85 base + 4 tiles x 170).
	imageTokens = 765
	// fileDataBytesPerToken prices inline file data (base64) at one token per this many bytes.
	fileDataBytesPerToken = 16
)

// walkStrings calls visit for every string value in the JSON value json, decoded, at any depth,
// in document order, except those under skipKeys. schemaKeys also reports the object keys of a
// "properties" object (JSON-schema property names in tool definitions), which the model reads
// although they are keys, not values. Inline image data URLs and file_data are reported to
// special instead of visit. It is walkRawStrings with each literal decoded.
func walkStrings(json string, schemaKeys bool, visit func(s string), special func(tokens int)) {
	walkRawStrings(json, schemaKeys, func(lit string) { visit(unquote(lit)) }, special)
}

// unquote decodes a JSON string literal (quotes included). Literals without escapes, the common
// case, are sliced, not copied.
func unquote(lit string) string {
	if len(lit) < 2 {
		return ""
	}
	if strings.IndexByte(lit, '\\') < 0 {
		return lit[1 : len(lit)-1]
	}
	return gjson.Parse(lit).Str // a string literal: gjson decodes it without recursing
}

// isDataURL reports whether a raw JSON string literal starts with a data: URL.
func isDataURL(raw string) bool {
	return len(raw) > 6 && raw[1:6] == "data:"
}

// bytesToString views b as a string without copying. The caller must not modify b while the
// string is in use and must not retain the string: it is used only to let gjson read the bytes.
func bytesToString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// stringBytes views s as bytes without copying, for read-only checks such as jsonx.Valid on a
// string that may be megabytes long. The caller must not modify the bytes.
func stringBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// Open containers on the walker's stack.
const (
	inArray  = 'a'
	inObject = 'o'
	inProps  = 'p' // an object under a "properties" key, when schema keys are counted
)

// walkRawStrings visits the string values of the first JSON value in json as raw literals
// (quotes and escapes included), without decoding them: the estimator reads escapes on the fly,
// and not copying strings is what lets it run at memory speed over multi-megabyte histories.
//
// It is one forward pass over the bytes with an explicit stack of open containers (one byte per
// level), so its cost is linear in len(json) whatever the nesting: a recursive walk over gjson
// results re-scans every sub-value once per enclosing level (quadratic in depth) and grows the
// goroutine stack by a frame per level. Malformed JSON ends the walk early; it never panics or
// loops.
func walkRawStrings(json string, schemaKeys bool, visit func(lit string), special func(int)) {
	var buf [64]byte
	stack := buf[:0]
	key := ""        // the key of the value about to be read ("" in arrays and at the top)
	wantKey := false // the next string is an object key
	for i := 0; i < len(json); {
		switch c := json[i]; c {
		case ' ', '\t', '\n', '\r', ':':
			i++
		case ',':
			wantKey = len(stack) > 0 && stack[len(stack)-1] != inArray
			key = ""
			i++
		case '{':
			kind := byte(inObject)
			if schemaKeys && key == "properties" {
				kind = inProps
			}
			stack = append(stack, kind)
			key, wantKey = "", true
			i++
		case '[':
			stack = append(stack, inArray)
			key, wantKey = "", false
			i++
		case '}', ']':
			if len(stack) == 0 {
				return
			}
			stack = stack[:len(stack)-1]
			key, wantKey = "", false
			i++
			if len(stack) == 0 {
				return // the first value is complete; gjson ignores what follows too
			}
		case '"':
			end, ok := jsonx.StringEnd(json, i)
			if !ok {
				return
			}
			lit := json[i:end]
			i = end
			if wantKey {
				wantKey = false
				k := unquote(lit)
				if skipKeys[k] {
					if i, ok = jsonx.SkipMember(json, i); !ok {
						return
					}
					continue
				}
				if stack[len(stack)-1] == inProps {
					visit(lit)
				}
				key = k
				continue
			}
			switch {
			case key == "image_url" && isDataURL(lit):
				special(imageTokens)
			case key == "file_data":
				special(len(lit)/fileDataBytesPerToken + 1)
			default:
				visit(lit)
			}
			if len(stack) == 0 {
				return
			}
		default:
			if wantKey {
				return // malformed: an object key must be a string
			}
			i = jsonx.ScalarEnd(json, i)
			if len(stack) == 0 {
				return
			}
		}
	}
}
