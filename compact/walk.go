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

// rawWalker visits the same strings as walkStrings but hands over raw string literals (quotes
// and escapes included) without decoding them. gjson decodes every string it meets, which costs
// an allocation and a copy per escaped string; the estimator reads escapes on the fly instead,
// and this walker is what lets it run at memory speed over multi-megabyte histories. Malformed
// JSON ends the walk early; it never panics or loops.
type rawWalker struct {
	s          string
	i          int
	schemaKeys bool
	visit      func(lit string)
	special    func(tokens int)
}

func walkRawStrings(json string, schemaKeys bool, visit func(lit string), special func(int)) {
	w := rawWalker{s: json, schemaKeys: schemaKeys, visit: visit, special: special}
	w.value("", 0)
}

func (w *rawWalker) ws() {
	for w.i < len(w.s) {
		switch w.s[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// str consumes a string literal starting at w.i (a '"') and returns it with its quotes.
func (w *rawWalker) str() (string, bool) {
	start := w.i
	for j := w.i + 1; j < len(w.s); j++ {
		switch w.s[j] {
		case '\\':
			j++
		case '"':
			w.i = j + 1
			return w.s[start:w.i], true
		}
	}
	w.i = len(w.s)
	return "", false
}

// maxDepth bounds recursion on hostile nesting; deeper values are skipped, not visited.
const maxDepth = 64

func (w *rawWalker) value(key string, depth int) bool {
	w.ws()
	if w.i >= len(w.s) {
		return false
	}
	switch w.s[w.i] {
	case '"':
		lit, ok := w.str()
		if !ok {
			return false
		}
		switch {
		case key == "image_url" && isDataURL(lit):
			w.special(imageTokens)
		case key == "file_data":
			w.special(len(lit)/fileDataBytesPerToken + 1)
		default:
			w.visit(lit)
		}
		return true
	case '{':
		w.i++
		props := w.schemaKeys && key == "properties"
		for {
			w.ws()
			if w.i >= len(w.s) {
				return false
			}
			if w.s[w.i] == '}' {
				w.i++
				return true
			}
			if w.s[w.i] == ',' {
				w.i++
				continue
			}
			if w.s[w.i] != '"' {
				return false
			}
			klit, ok := w.str()
			if !ok {
				return false
			}
			k := klit[1 : len(klit)-1]
			w.ws()
			if w.i >= len(w.s) || w.s[w.i] != ':' {
				return false
			}
			w.i++
			if skipKeys[k] || depth >= maxDepth {
				if !w.skip() {
					return false
				}
				continue
			}
			if props {
				w.visit(klit)
			}
			if !w.value(k, depth+1) {
				return false
			}
		}
	case '[':
		w.i++
		for {
			w.ws()
			if w.i >= len(w.s) {
				return false
			}
			switch w.s[w.i] {
			case ']':
				w.i++
				return true
			case ',':
				w.i++
				continue
			}
			if depth >= maxDepth {
				if !w.skip() {
					return false
				}
				continue
			}
			if !w.value("", depth+1) {
				return false
			}
		}
	default:
		return w.skip()
	}
}

// skip consumes one value without visiting it.
func (w *rawWalker) skip() bool {
	w.ws()
	if w.i >= len(w.s) {
		return false
	}
	switch w.s[w.i] {
	case '"':
		_, ok := w.str()
		return ok
	case '{', '[':
		depth := 0
		for w.i < len(w.s) {
			switch w.s[w.i] {
			case '"':
				if _, ok := w.str(); !ok {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					w.i++
					return true
				}
			}
			w.i++
		}
		return false
	default:
		start := w.i
		for w.i < len(w.s) {
			switch w.s[w.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return w.i > start
			}
			w.i++
		}
		return w.i > start
	}
}
