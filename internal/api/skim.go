package api

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"github.com/compactd/compactd/internal/jsonx"
)

// What the two skims refuse, beyond bodies that are not JSON objects (ErrInvalidJSON). Each comes
// wrapped in a *BodyError that says where.
var (
	// ErrTooDeep: the body nests JSON deeper than jsonx.MaxDepth. It matches jsonx.ErrTooDeep.
	ErrTooDeep = fmt.Errorf("request body nests JSON more than %d levels deep: %w", jsonx.MaxDepth, jsonx.ErrTooDeep)
	// ErrDuplicateMember: an object compactd reads repeats a member compactd acts on. JSON parsers
	// disagree on duplicates (encoding/json and most proxies take the last, gjson the first), so
	// the upstream could read a different request from the one compactd checked: a message to
	// compactd and a compaction item to a last-key-wins upstream.
	ErrDuplicateMember = errors.New("duplicate JSON member")
	// ErrMisplacedCompaction: a compaction item or block where compactd does not handle one
	// (inside a message's content, inside tool_result content, in instructions or system).
	// compactd would forward it unopened, and the upstream must never see one.
	ErrMisplacedCompaction = errors.New("compaction item where compactd does not read one")
	// ErrShape: the body is JSON but not the shape compactd needs to act on it (input not an
	// array, a message that is not an object, …).
	ErrShape = errors.New("request body has the wrong shape")
)

// BodyError is a request body a skim refuses, with where and why; answer it as a 400 in the
// route's dialect. errors.Is(err, ErrInvalidJSON / ErrTooDeep / ErrDuplicateMember /
// ErrMisplacedCompaction / ErrShape) tells the kinds apart.
type BodyError struct {
	// Param is the location in the route's notation: "input[3].content[1]" on the Responses
	// routes, "messages.0.content.1" on the Messages routes; "" for the body as a whole.
	Param string
	// Message says what is wrong and what to do; Error prefixes it with Param.
	Message string
	Kind    error
}

func (e *BodyError) Error() string {
	if e.Param == "" {
		return e.Message
	}
	return e.Param + ": " + e.Message
}

func (e *BodyError) Unwrap() error { return e.Kind }

// checkBody is the validation every skim's refusals rest on: valid JSON, bounded depth, strict
// UTF-8, as a *BodyError. The skims validate in their own walk (jsonx.Iter) and run it only once
// they have something to refuse, so that a body that is not valid JSON is refused as such, with
// these messages, wherever the walk stopped.
func checkBody(body []byte) error {
	switch err := jsonx.Valid(body); {
	case err == nil:
		return nil
	case errors.Is(err, jsonx.ErrTooDeep):
		return &BodyError{Kind: ErrTooDeep, Message: fmt.Sprintf(
			"The request body nests JSON more than %d levels deep; compactd refuses deeper documents (no API accepts them, and walking them would exhaust the stack).", jsonx.MaxDepth)}
	case errors.Is(err, jsonx.ErrInvalidUTF8):
		return &BodyError{Kind: ErrInvalidJSON, Message: "The request body is not valid JSON: a string in it is not valid UTF-8. JSON must be UTF-8; send text through a JSON encoder (it escapes or replaces invalid bytes)."}
	}
	return &BodyError{Kind: ErrInvalidJSON, Message: "The request body is not valid JSON."}
}

// duplicateError is the refusal of an object that repeats the member name; param ends in name.
func duplicateError(param, name string) *BodyError {
	return &BodyError{Param: param, Kind: ErrDuplicateMember, Message: fmt.Sprintf(
		"the member %q appears more than once in this object. JSON parsers disagree on which copy counts, so compactd refuses objects that repeat a member it acts on; send each member once.", name)}
}

// within prefixes the location of a *BodyError coming up from a nested value with at.
func within(err error, at string) error {
	var be *BodyError
	if errors.As(err, &be) {
		be.Param = at + be.Param
	}
	return err
}

func shapeError(param, msg string) *BodyError {
	return &BodyError{Param: param, Kind: ErrShape, Message: msg}
}

// memberName returns the member name of a raw key (between its quotes), decoding escapes into
// buf when there are any: a client may spell "type" as "typ\u0065", and the upstream will read
// it as "type".
func memberName(k []byte, buf *[32]byte) []byte {
	if bytes.IndexByte(k, '\\') < 0 {
		return k
	}
	return jsonx.AppendUnquoted(buf[:0], k)
}

// str returns the JSON string raw (quotes included) decoded, or "" when raw is not a string. A
// string without escapes aliases the body, which is never written to: no copy on the hot path.
func str(raw []byte) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') < 0 {
		return unsafe.String(unsafe.SliceData(in), len(in))
	}
	return string(jsonx.AppendUnquoted(nil, in))
}

// skimObject begins a one-pass skim: nil when the body is a JSON object (it, a fresh jsonx.Iter
// over body, is at its opening brace), else the refusal — invalid JSON when the body is not
// valid, else not an object. The caller makes the Iter, so that it stays on the caller's stack.
func skimObject(it *jsonx.Iter, body []byte) error {
	if it.Peek() == '{' {
		return nil
	}
	if err := checkBody(body); err != nil {
		return err
	}
	return notAnObject()
}

// skimEnd is how a one-pass skim (jsonx.Iter) ends: nil when the walk reached the end of a valid
// body with no refusal, else the error to answer. The whole body's validity comes first, as when
// it was checked before the skim: a body that is not valid JSON is refused as such (checkBody's
// kind and message) wherever the skim stopped, before any refusal the skim made on the way.
func skimEnd(body []byte, it *jsonx.Iter, err error) error {
	if it.Err() == nil && err == nil && it.End() {
		return nil
	}
	if e := checkBody(body); e != nil {
		return e
	}
	var be *BodyError
	if it.Err() == nil && errors.As(err, &be) {
		return err
	}
	// The walk refused what Valid accepts: cannot happen (FuzzIter), but never forward it.
	return &BodyError{Kind: ErrInvalidJSON, Message: "The request body is not valid JSON."}
}

// notation is how a route spells a location in its errors: OpenAI's "tools[3].name" or
// Anthropic's "tools.3.name".
type notation bool

const (
	openAINotation    notation = false
	anthropicNotation notation = true
)

// at is base indexed by i in the notation.
func (n notation) at(base string, i int) string {
	if n == anthropicNotation {
		return base + "." + strconv.Itoa(i)
	}
	return base + "[" + strconv.Itoa(i) + "]"
}

// uniqueMembers walks the object at it and refuses a second copy of any of the members names
// (the others are members compactd does not read, left alone); at locates the object, and is only
// called to build a refusal. fn, when not nil, is called with the index in names of each member
// named and may walk its value (exactly one value); its refusal stops the walk, as the first
// duplicate does. names holds at most 16.
func uniqueMembers(it *jsonx.Iter, names []string, at func() string, fn func(i int) error) error {
	var seen uint16
	var err error
	it.Object(func(k []byte, _, _ int) bool {
		var buf [32]byte
		i := nameIndex(names, memberName(k, &buf))
		if i < 0 {
			return true
		}
		if seen&(1<<i) != 0 {
			err = duplicateError(at()+"."+names[i], names[i])
			return false
		}
		seen |= 1 << i
		if fn != nil {
			err = fn(i)
		}
		return err == nil
	})
	return err
}

// nameIndex is the index of name in names, -1 when it is not there.
func nameIndex(names []string, name []byte) int {
	for i, n := range names {
		if string(name) == n {
			return i
		}
	}
	return -1
}

// The members of tool_choice compactd reads (toolChoiceAllows in proxy/recall.go, the agent
// compaction's forced-tool check): its type, and the name of the one tool it forces.
var toolChoiceNames = []string{"type", "name"}

// The members of a tool compactd reads to tell whether the client brings a tool of the recall
// tool's name: "name" (Responses, Messages) and "function" with its "name" (Chat Completions).
var (
	toolNames     = []string{"name", "function"}
	functionNames = []string{"name"}
)

const toolFunction = 1 // toolNames[toolFunction]

// scanMember walks the value of a top-level member whose rule every dialect's skim shares —
// tools and tool_choice, walked for repeated members compactd reads; any other member's value is
// skipped — and returns where the value ends. ok is false when the iterator failed (its Err
// says why); err is a refusal.
func scanMember(it *jsonx.Iter, name []byte, n notation) (end int, ok bool, err error) {
	switch string(name) {
	case "tools":
		err = scanTools(it, n)
	case "tool_choice":
		err = scanToolChoice(it)
	default:
		_, end, ok = it.Value()
		return end, ok, nil
	}
	return it.Pos(), true, err
}

// scanToolChoice walks the tool_choice value at it (one value): when it is an object, its type
// and name at most once each. A string or anything else is the upstream's to validate.
func scanToolChoice(it *jsonx.Iter) error {
	if it.Peek() != '{' {
		it.Value()
		return nil
	}
	return uniqueMembers(it, toolChoiceNames, func() string { return "tool_choice" }, nil)
}

// scanTools walks the tools value at it (one value): when it is an array, each tool that is an
// object names itself at most once, and so does its function. The first refusal stops the walk.
func scanTools(it *jsonx.Iter, n notation) error {
	if it.Peek() != '[' {
		it.Value()
		return nil
	}
	var err error
	it.Array(func(i, _ int) bool {
		if it.Peek() != '{' {
			return true
		}
		at := func() string { return n.at("tools", i) }
		err = uniqueMembers(it, toolNames, at, func(m int) error {
			if m != toolFunction || it.Peek() != '{' {
				return nil
			}
			return uniqueMembers(it, functionNames, func() string { return at() + ".function" }, nil)
		})
		return err == nil
	})
	return err
}

// strictNames are the members Messages' context_management and compaction values may hold, at
// any depth: compactd validates both strictly (an unknown member is a 400), so every member in
// them is one it reads, and none may come twice.
var strictNames = []string{"edits", "type", "trigger", "keep", "value", "pause_after_compaction",
	"instructions", "clear_at_least", "exclude_tools", "clear_tool_inputs"}

// scanStrict walks the value at it (one value), refusing a repeated member (strictNames) in every
// object in it, at any depth: at locates the value. The nesting is bounded by jsonx.MaxDepth,
// which the walk counts.
func scanStrict(it *jsonx.Iter, at func() string) error {
	switch it.Peek() {
	case '{':
		return uniqueMembers(it, strictNames, at, func(m int) error {
			return scanStrict(it, func() string { return at() + "." + strictNames[m] })
		})
	case '[':
		var err error
		it.Array(func(i, _ int) bool {
			err = scanStrict(it, func() string { return anthropicNotation.at(at(), i) })
			return err == nil
		})
		return err
	}
	it.Value()
	return nil
}
