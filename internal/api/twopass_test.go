package api

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/jsonx"
)

// The skim as it was before the one-pass walk (validate everything, then gjson over the top
// level, then jsonx.Elements/Members over every item): the oracle the one-pass skim must agree
// with on every body, refusals and their params included (FuzzParseResponsesRequest,
// TestOnePassSkimMatchesTwoPass).

func parseResponsesTwoPass(body []byte) (*ResponsesRequest, error) {
	if err := checkBody(body); err != nil {
		return nil, err
	}
	// gjson works on strings; view the body as one without copying. Body is never written to.
	s := unsafe.String(unsafe.SliceData(body), len(body))
	root := gjson.Parse(s)
	if !root.IsObject() {
		return nil, &BodyError{Kind: ErrInvalidJSON, Message: "The request body must be a JSON object."}
	}
	r := &ResponsesRequest{Body: body, Compaction: -1, Trigger: -1}
	var err error
	prevEnd := -1
	var seen uint16 // one bit per member compactd acts on; no allocation on the hot path
	root.ForEach(func(key, value gjson.Result) bool {
		if bit := memberBit([]byte(key.Str)); bit != 0 {
			// JSON parsers disagree on duplicate keys (first wins, last wins); the upstream must
			// not read a different input from the one compactd checked.
			if seen&bit != 0 {
				err = duplicateError(key.Str, key.Str)
				return false
			}
			seen |= bit
		}
		end := value.Index + len(value.Raw)
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
				r.Instructions = body[value.Index:end]
				err = checkInstructions(r.Instructions)
			}
		case "tools":
			r.Tools = body[value.Index:end]
			err = toolsTwoPass(r.Tools, openAINotation)
		case "tool_choice":
			r.ToolChoice = body[value.Index:end]
			err = toolChoiceTwoPass(r.ToolChoice)
		case "context_management":
			r.ContextManagement = body[value.Index:end]
			r.cmStart, r.cmEnd = memberSpan(body, prevEnd, key.Index, end)
		case "input":
			r.inputStart, r.inputEnd = value.Index, end
			err = scanInputTwoPass(r, value)
		}
		prevEnd = end
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func scanInputTwoPass(r *ResponsesRequest, value gjson.Result) error {
	switch {
	case value.Type == gjson.String:
		r.InputString = true
		r.Items = []Item{{Raw: UserMessage(value.Str), Type: "message", Role: "user"}}
		return nil
	case value.Type == gjson.Null:
		return nil
	case !value.IsArray():
		return shapeError("input", "input must be a string or an array of items.")
	}
	arr := r.Body[value.Index : value.Index+len(value.Raw)]
	var err error
	i := 0
	jsonx.Elements(arr, func(s, e int) bool {
		var item Item
		if item, err = scanItemTwoPass(arr[s:e], i); err != nil {
			return false
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

// scanItem reads input[i]: its type and role, with every member compactd reads checked for
// duplicates, and its content parts (content, output or summary arrays) checked the same way and
// for compaction items, which are only valid as items. One pass over the item's bytes; values
// are skipped, not decoded.
func scanItemTwoPass(raw []byte, i int) (Item, error) {
	item := Item{Raw: raw}
	if raw[0] != '{' {
		return item, shapeError(fmt.Sprintf("input[%d]", i), "each item of input must be an object.")
	}
	var seen uint16
	var typ, role, content, output, summary []byte
	var err error
	jsonx.Members(raw, func(k []byte, s, e int) bool {
		var buf [32]byte
		name := memberName(k, &buf)
		bit := itemBit(name)
		if bit == 0 {
			return true
		}
		if seen&bit != 0 {
			err = duplicateError(fmt.Sprintf("input[%d].%s", i, string(name)), string(name))
			return false
		}
		seen |= bit
		switch bit {
		case itemType:
			typ = raw[s:e]
		case itemRole:
			role = raw[s:e]
		case itemContent:
			content = raw[s:e]
		case itemOutput:
			output = raw[s:e]
		case itemSummary:
			summary = raw[s:e]
		}
		return true
	})
	if err != nil {
		return item, err
	}
	item.Type = str(typ)
	if typ == nil || item.Type == "message" {
		item.Role = str(role)
		if typ == nil && role != nil {
			item.Type = "message" // easy input message: {"role":"user","content":"…"}
		}
	}
	if err = scanPartsTwoPass(content, i, "content"); err == nil {
		if err = scanPartsTwoPass(output, i, "output"); err == nil {
			err = scanPartsTwoPass(summary, i, "summary")
		}
	}
	return item, err
}

// scanParts checks the parts of an item's content (or output, or summary) array: no duplicate
// member compactd reads, and no compaction item, which the upstream would read but compactd
// never opens there. Anything but an array is left alone.
func scanPartsTwoPass(arr []byte, i int, member string) error {
	if len(arr) == 0 || arr[0] != '[' {
		return nil
	}
	var err error
	j := 0
	jsonx.Elements(arr, func(s, e int) bool {
		part := arr[s:e]
		var seen uint16
		var typ []byte
		jsonx.Members(part, func(k []byte, vs, ve int) bool {
			var buf [32]byte
			name := memberName(k, &buf)
			bit := partBit(name)
			if bit == 0 {
				return true
			}
			if seen&bit != 0 {
				err = duplicateError(fmt.Sprintf("input[%d].%s[%d].%s", i, member, j, string(name)), string(name))
				return false
			}
			seen |= bit
			if bit == 1 {
				typ = part[vs:ve]
			}
			return true
		})
		if t := str(typ); err == nil && isCompactionType(t) {
			err = misplacedItem(fmt.Sprintf("input[%d].%s[%d]", i, member, j), t, fmt.Sprintf("the %s of input[%d]", member, i))
		}
		j++
		return err == nil
	})
	return err
}

// uniqueTwoPass refuses an object raw (at) that repeats one of the members names; fn is called
// with the index in names and the value of each member named, and may refuse it.
func uniqueTwoPass(raw []byte, names []string, at string, fn func(m int, v []byte) error) error {
	if len(raw) == 0 || raw[0] != '{' {
		return nil
	}
	seen := map[string]bool{}
	var err error
	jsonx.Members(raw, func(k []byte, s, e int) bool {
		name := string(jsonx.AppendUnquoted(nil, k))
		m := -1
		for i, n := range names {
			if n == name {
				m = i
			}
		}
		if m < 0 {
			return true
		}
		if seen[name] {
			err = duplicateError(at+"."+name, name)
			return false
		}
		seen[name] = true
		if fn != nil {
			err = fn(m, raw[s:e])
		}
		return err == nil
	})
	return err
}

func toolChoiceTwoPass(raw []byte) error {
	return uniqueTwoPass(raw, []string{"type", "name"}, "tool_choice", nil)
}

func toolsTwoPass(raw []byte, n notation) error {
	if len(raw) == 0 || raw[0] != '[' {
		return nil
	}
	var err error
	i := 0
	jsonx.Elements(raw, func(s, e int) bool {
		at := n.at("tools", i)
		err = uniqueTwoPass(raw[s:e], []string{"name", "function"}, at, func(m int, v []byte) error {
			if m != 1 {
				return nil
			}
			return uniqueTwoPass(v, []string{"name"}, at+".function", nil)
		})
		i++
		return err == nil
	})
	return err
}

// strictTwoPass refuses a repeated member of context_management's (or compaction's) schema in
// any object of raw (at), at any depth.
func strictTwoPass(raw []byte, at string) error {
	names := []string{"edits", "type", "trigger", "keep", "value", "pause_after_compaction",
		"instructions", "clear_at_least", "exclude_tools", "clear_tool_inputs"}
	switch {
	case len(raw) == 0:
		return nil
	case raw[0] == '{':
		return uniqueTwoPass(raw, names, at, func(m int, v []byte) error {
			return strictTwoPass(v, at+"."+names[m])
		})
	case raw[0] == '[':
		var err error
		i := 0
		jsonx.Elements(raw, func(s, e int) bool {
			err = strictTwoPass(raw[s:e], fmt.Sprintf("%s.%d", at, i))
			i++
			return err == nil
		})
		return err
	}
	return nil
}

// sameRefusal fails unless the one-pass and two-pass skims both accepted body or both refused
// it with the same BodyError (kind, param, message); it reports whether they refused.
func sameRefusal(t *testing.T, body []byte, err, err0 error) bool {
	t.Helper()
	if (err == nil) != (err0 == nil) {
		t.Fatalf("%.300q: one pass: %v; two passes: %v", body, err, err0)
	}
	if err == nil {
		return false
	}
	var be, be0 *BodyError
	errors.As(err, &be)
	errors.As(err0, &be0)
	if be == nil || be0 == nil || *be != *be0 {
		t.Fatalf("%.300q: one pass refused with %#v; two passes with %#v", body, be, be0)
	}
	return true
}

// sameAsTwoPass fails unless the one-pass skim decided exactly what the two-pass one does: the
// same refusal (kind, param, message) or the same request (fields, item spans, types, roles).
func sameAsTwoPass(t *testing.T, body []byte, r *ResponsesRequest, err error) {
	t.Helper()
	r0, err0 := parseResponsesTwoPass(body)
	if sameRefusal(t, body, err, err0) {
		return
	}
	if r.Model != r0.Model || r.Stream != r0.Stream || r.PreviousResponseID != r0.PreviousResponseID ||
		r.PromptCacheKey != r0.PromptCacheKey || !bytes.Equal(r.Instructions, r0.Instructions) ||
		!bytes.Equal(r.Tools, r0.Tools) || !bytes.Equal(r.ContextManagement, r0.ContextManagement) ||
		!sameRaw(r.ToolChoice, r0.ToolChoice) ||
		r.InputString != r0.InputString || r.Compaction != r0.Compaction || r.Trigger != r0.Trigger ||
		r.inputStart != r0.inputStart || r.inputEnd != r0.inputEnd || r.cmStart != r0.cmStart ||
		r.cmEnd != r0.cmEnd || len(r.Items) != len(r0.Items) {
		t.Fatalf("%.300q: one pass read %+v; two passes %+v", body, *r, *r0)
	}
	for i := range r.Items {
		a, b := r.Items[i], r0.Items[i]
		if !bytes.Equal(a.Raw, b.Raw) || a.Type != b.Type || a.Role != b.Role {
			t.Fatalf("%.300q: item %d: one pass %+v; two passes %+v", body, i, a, b)
		}
	}
}

// TestOnePassSkimMatchesTwoPass: on the refusals the hostile suites care about, and where
// several apply at once (which one wins is part of the contract), the one-pass skim answers
// as the two-pass one did.
func TestOnePassSkimMatchesTwoPass(t *testing.T) {
	item := `{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}`
	cases := []string{
		`{"model":"m","input":[` + item + `]}`,
		` {"input":"just text","model":"m\u00e9"} `,
		`{"input":null}`, `{"input":5}`, `{"input":{}}`, `[]`, `"x"`, ``, `{`, `{"a":1}x`,
		`{"input":[` + item + `,1]}`,
		`{"input":[` + item + `],"model":"a","model":"b"}`,
		`{"model":"a","inp\u0075t":[],"input":[]}`,
		`{"input":[{"type":"message","content":[{"type":"compaction"}],"type":"x"}]}`,
		// a duplicate in the item wins over an earlier misplaced part
		`{"input":[{"content":[{"type":"compaction"}],"role":"user","role":"developer"}]}`,
		// content's refusal wins over an earlier summary's
		`{"input":[{"type":"reasoning","summary":[{"type":"compaction_trigger"}],"content":[{"type":"compaction"}]}]}`,
		`{"input":[{"type":"message","content":[{"type":"input_text","text":"a","text":"b"},{"type":"compaction"}]}]}`,
		`{"input":[{"type":"message","content":[{"type":"input_text"},{"type":"compaction_summary"}]}]}`,
		// JSON errors anywhere win over any refusal before them
		`{"input":[{"role":"a","role":"b"}],"x":[tru]}`,
		`{"input":[{"role":"a","role":"b"}],"x":"` + "\xff" + `"}`,
		`{"input":[{"role":"a","role":"b"}],"x":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`,
		`{"input":[{"type":"compaction","encrypted_content":"e"},{"type":"compaction_trigger"}]}`,
		`{"instructions":[{"type":"compaction"}],"input":[]}`,
		`{"context_management":[{"type":"compaction","compact_threshold":1}],"input":[],"tools":[{"type":"function"}]}`,
		`{"input":[],"context_management":null}`,
		`{"input":[{"typ\u0065":"compaction","encrypted_content":"x"}]}`,
		`{"input":[{"type":"message","content":"plain"}],"stream":true}`,
		`{"input":[` + item + `]} {}`,
		// tool_choice and the tools' names: what recall decides from
		`{"tool_choice":"none","input":[],"tool_choice":"auto"}`,
		`{"tool_choice":{"type":"none","type":"auto"},"input":[{"role":"a","role":"b"}]}`,
		`{"input":[{"role":"a","role":"b"}],"tool_choice":{"type":"none","type":"auto"}}`,
		`{"tools":[{"name":"a"},{"name":"b","function":{"name":"c","name":"d"},"name":"e"}]}`,
		`{"tools":[{"name":"a","name":"b","function":{"name":"c","name":"d"}}]}`,
		`{"tools":[1,"x",null,{"function":[]},{"function":{"x":1,"x":2}}],"tool_choice":5}`,
		`{"tools":{"name":"a","name":"b"},"tool_choice":[{"type":1,"type":2}]}`,
		`{"tools":[{"name":"a","name":"b"}],"x":[tru]}`,
		`{"tool_choice":{"name":"a","name":"b"},"x":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`,
		`{"instructions":[{"type":"message","type":"compaction"}],"input":[{"role":"a","role":"b"}]}`,
		`{"instructions":[{"type":"compaction"},{"type":"x","type":"y"}]}`,
	}
	for _, c := range cases {
		r, err := ParseResponsesRequest([]byte(c))
		sameAsTwoPass(t, []byte(c), r, err)
	}
}
