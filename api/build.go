package api

import (
	"bytes"
	"encoding/json"
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
