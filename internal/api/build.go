package api

import (
	"bytes"
	"encoding/json"

	"github.com/tidwall/gjson"
)

// AppendString appends s as a JSON string. HTML characters are not escaped, so prompts that
// contain "<conversation>" or "a < b" read naturally in logs and stay byte-stable.
func AppendString(dst []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(dst, bytes.TrimRight(buf.Bytes(), "\n")...)
}

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
