package api

import (
	"bytes"
	"errors"
	"fmt"
	"unsafe"

	"github.com/tidwall/gjson"
)

// Item types compactd treats specially in a Responses input array.
const (
	TypeCompaction        = "compaction"
	TypeCompactionSummary = "compaction_summary" // legacy alias Codex still accepts on input
	TypeCompactionTrigger = "compaction_trigger"
)

// ResponsesRequest is a skim of a POST /v1/responses (or /v1/responses/compact) body: the few
// top-level fields compactd acts on, and the input items as sub-slices of Body. Nothing else is
// decoded, so a 2 MB body costs a few milliseconds and one allocation per item, and every field
// compactd does not know is forwarded byte for byte.
type ResponsesRequest struct {
	Body []byte // the body as received; Items and the Raw fields below alias it

	Model              string
	Stream             bool
	PreviousResponseID string
	PromptCacheKey     string

	// Instructions and Tools are the raw JSON values of those fields, nil when absent.
	Instructions []byte
	Tools        []byte
	// ContextManagement is the raw JSON value of context_management, nil when absent.
	ContextManagement []byte

	// InputString is set when input was a bare string rather than an item array; Items then holds
	// one synthesised user message (not a sub-slice of Body).
	InputString bool
	Items       []Item

	// Compaction is the index of the latest compaction (or compaction_summary) item, -1 if none.
	Compaction int
	// Trigger is the index of the first compaction_trigger item, -1 if none.
	Trigger int

	inputStart, inputEnd int // byte span of the input value in Body; 0,0 when absent
	cmStart, cmEnd       int // byte span of the context_management member (key to value) in Body
}

// ErrInvalidJSON is returned when the body is not a JSON object.
var ErrInvalidJSON = errors.New("request body is not a valid JSON object")

// ParseResponsesRequest skims body. It fails only on bodies that are not JSON objects or whose
// input is neither a string nor an array of objects; field-level validation is left to the parts
// of compactd that act on a field (and to the upstream, for everything else).
func ParseResponsesRequest(body []byte) (*ResponsesRequest, error) {
	if len(body) == 0 || !gjson.ValidBytes(body) {
		return nil, ErrInvalidJSON
	}
	// gjson works on strings; view the body as one without copying. Body is never written to.
	s := unsafe.String(unsafe.SliceData(body), len(body))
	root := gjson.Parse(s)
	if !root.IsObject() {
		return nil, ErrInvalidJSON
	}
	r := &ResponsesRequest{Body: body, Compaction: -1, Trigger: -1}
	var err error
	prevEnd := -1
	var seen uint8 // one bit per member compactd acts on; no allocation on the hot path
	root.ForEach(func(key, value gjson.Result) bool {
		if bit := memberBit(key.Str); bit != 0 {
			// JSON parsers disagree on duplicate keys (first wins, last wins); the upstream must
			// not read a different input from the one compactd checked.
			if seen&bit != 0 {
				err = fmt.Errorf("duplicate %q member", key.Str)
				return false
			}
			seen |= bit
		}
		switch key.Str {
		case "model":
			r.Model = value.Str
		case "stream":
			r.Stream = value.Type == gjson.True
		case "previous_response_id":
			r.PreviousResponseID = value.Str
		case "prompt_cache_key":
			r.PromptCacheKey = value.Str
		case "instructions":
			if value.Type != gjson.Null {
				r.Instructions = body[value.Index : value.Index+len(value.Raw)]
			}
		case "tools":
			r.Tools = body[value.Index : value.Index+len(value.Raw)]
		case "context_management":
			r.ContextManagement = body[value.Index : value.Index+len(value.Raw)]
			r.cmStart, r.cmEnd = memberSpan(body, prevEnd, key.Index, value.Index+len(value.Raw))
		case "input":
			r.inputStart, r.inputEnd = value.Index, value.Index+len(value.Raw)
			err = r.scanInput(value)
		}
		prevEnd = value.Index + len(value.Raw)
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// memberBit numbers the top-level members whose duplicates ParseResponsesRequest refuses.
func memberBit(key string) uint8 {
	switch key {
	case "input":
		return 1
	case "context_management":
		return 2
	case "model":
		return 4
	case "stream":
		return 8
	case "instructions":
		return 16
	case "tools":
		return 32
	}
	return 0
}

// memberSpan returns the bytes to cut to remove one object member whose key starts at keyStart and
// whose value ends at valueEnd: from the end of the previous member (taking the separating comma
// with it), or, for the first member, through the comma that follows it.
func memberSpan(body []byte, prevEnd, keyStart, valueEnd int) (int, int) {
	if prevEnd >= 0 {
		return prevEnd, valueEnd
	}
	for i := valueEnd; i < len(body); i++ {
		switch body[i] {
		case ' ', '\t', '\n', '\r':
			continue
		case ',':
			return keyStart, i + 1
		}
		break
	}
	return keyStart, valueEnd
}

func (r *ResponsesRequest) scanInput(value gjson.Result) error {
	switch {
	case value.Type == gjson.String:
		r.InputString = true
		r.Items = []Item{{Raw: UserMessage(value.Str), Type: "message", Role: "user"}}
		return nil
	case value.Type == gjson.Null:
		return nil
	case !value.IsArray():
		return fmt.Errorf("input must be a string or an array of items")
	}
	var err error
	i := 0
	value.ForEach(func(_, it gjson.Result) bool {
		if !it.IsObject() {
			err = fmt.Errorf("input[%d] must be an object", i)
			return false
		}
		item := Item{Raw: r.Body[it.Index : it.Index+len(it.Raw)]}
		// Only messages have a role; looking it up on a tool output would scan the whole item.
		typ := it.Get("type")
		item.Type = typ.Str
		if !typ.Exists() || typ.Str == "message" {
			role := it.Get("role")
			item.Role = role.Str
			if !typ.Exists() && role.Exists() {
				item.Type = "message" // easy input message: {"role":"user","content":"…"}
			}
		}
		switch item.Type {
		case TypeCompaction, TypeCompactionSummary:
			r.Compaction = i
		case TypeCompactionTrigger:
			if r.Trigger < 0 {
				r.Trigger = i
			}
		}
		r.Items = append(r.Items, item)
		i++
		return true
	})
	return err
}

// HasInput reports whether the body carried an input field.
func (r *ResponsesRequest) HasInput() bool { return r.inputEnd > r.inputStart }

// WithInput returns a new body: Body with its input replaced by items (in order) and, when
// dropContextManagement is set, the context_management member removed. Every other byte of the
// body is kept as received, so unknown fields and cache-relevant prefixes survive.
func (r *ResponsesRequest) WithInput(items [][]byte, dropContextManagement bool) []byte {
	// Everything but the old input, plus the new one: one allocation of the final size.
	size := len(r.Body) - (r.inputEnd - r.inputStart) + len(`"input":`) + 2
	for _, it := range items {
		size += len(it) + 1
	}
	out := make([]byte, 0, size)
	appendInput := func(out []byte) []byte {
		out = append(out, '[')
		for i, it := range items {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, it...)
		}
		return append(out, ']')
	}
	// cut appends Body[from:to] to dst, minus the context_management span when dropping it.
	cut := func(dst []byte, from, to int) []byte {
		if !dropContextManagement || r.ContextManagement == nil || r.cmEnd <= from || r.cmStart >= to {
			return append(dst, r.Body[from:to]...)
		}
		dst = append(dst, r.Body[from:r.cmStart]...)
		return append(dst, r.Body[r.cmEnd:to]...)
	}
	if !r.HasInput() {
		// No input member: add one just after the opening brace.
		open := bytes.IndexByte(r.Body, '{') + 1
		rest := cut(nil, open, len(r.Body))
		out = append(out, r.Body[:open]...)
		out = append(out, `"input":`...)
		out = appendInput(out)
		if t := bytes.TrimLeft(rest, " \t\r\n"); len(t) > 0 && t[0] != '}' {
			out = append(out, ',')
		}
		return append(out, rest...)
	}
	out = cut(out, 0, r.inputStart)
	out = appendInput(out)
	return cut(out, r.inputEnd, len(r.Body))
}

// RawItems returns the raw bytes of items[idx...] in order, for WithInput.
func RawItems(items []Item, idx []int) [][]byte {
	out := make([][]byte, len(idx))
	for i, j := range idx {
		out[i] = items[j].Raw
	}
	return out
}
