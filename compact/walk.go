package compact

import (
	"unsafe"

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

// walkStrings calls visit for every string value in the JSON value json, at any depth, except
// those under skipKeys. key is the string's object key ("" inside arrays). schemaKeys reports
// object keys under a "properties" object (JSON-schema property names in tool definitions), which
// the model reads although they are keys, not values. Inline image data URLs and file_data are
// reported to special instead of visit.
func walkStrings(json string, schemaKeys bool, visit func(key string, v gjson.Result), special func(tokens int)) {
	walkValue(gjson.Parse(json), "", schemaKeys, visit, special)
}

func walkValue(v gjson.Result, key string, schemaKeys bool, visit func(string, gjson.Result), special func(int)) {
	switch {
	case v.Type == gjson.String:
		switch {
		case key == "image_url" && isDataURL(v.Raw):
			special(imageTokens)
		case key == "file_data":
			special(len(v.Raw)/fileDataBytesPerToken + 1)
		default:
			visit(key, v)
		}
	case v.IsObject():
		props := schemaKeys && key == "properties"
		v.ForEach(func(k, val gjson.Result) bool {
			if skipKeys[k.Str] {
				return true
			}
			if props {
				visit("", k)
			}
			walkValue(val, k.Str, schemaKeys, visit, special)
			return true
		})
	case v.IsArray():
		v.ForEach(func(_, val gjson.Result) bool {
			walkValue(val, "", schemaKeys, visit, special)
			return true
		})
	}
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
