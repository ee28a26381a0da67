package api

import (
	"bytes"
	"errors"
	"fmt"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/jsonx"
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
	// ToolChoice is the raw JSON value of tool_choice, nil when absent: the recall tool reads it,
	// and looking it up again would walk the whole body.
	ToolChoice []byte

	// InputString is set when input was a bare string rather than an item array; Items then holds
	// one synthesised user message (not a sub-slice of Body).
	InputString bool
	Items       []Item

	// Compaction is the index of the latest compaction (or compaction_summary) item, -1 if none.
	Compaction int
	// Trigger is the index of the first compaction_trigger item, -1 if none.
	Trigger int

	// itemBuf backs Items while the input has at most len(itemBuf) items (a short session, the
	// first turns of any): the skim of a small body then makes one allocation, the request, not
	// one more per doubling of Items.
	itemBuf [8]Item
	// table is Items before its capacity was clipped: the backing Release hands back.
	table []Item
	from  *Prefix // the prefix the skim resumed from, nil when it read the whole body

	inputStart, inputEnd int // byte span of the input value in Body; 0,0 when absent
	cmStart, cmEnd       int // byte span of the context_management member (key to value) in Body
	toolsStart, toolsEnd int // byte span of the tools value in Body; 0,0 when absent
}

// ErrInvalidJSON is returned when the body is not a JSON object.
var ErrInvalidJSON = errors.New("request body is not a valid JSON object")

// ParseResponsesRequest skims body. It fails (with a *BodyError) on bodies that are not JSON
// objects or nest deeper than jsonx.MaxDepth, whose input is neither a string nor an array of
// objects, that repeat a member compactd acts on (at the top level, in tool_choice, a tool or an
// instructions item, in an input item or in one of its content parts), or that carry a
// compaction item anywhere but as an item of input.
// Everything else is left to the parts of compactd that act on a field, and to the upstream.
func ParseResponsesRequest(body []byte) (*ResponsesRequest, error) { return parseResponses(body, nil) }

func parseResponses(body []byte, from *Prefix) (*ResponsesRequest, error) {
	// One pass: the walk validates every byte it passes (jsonx.Iter checks what jsonx.Valid
	// checks), and descends only where the skim reads: the top-level members, the items of input,
	// their members, and the parts of their content, output and summary arrays.
	it := jsonx.NewIter(body)
	err := skimObject(it, body)
	if err != nil {
		return nil, err
	}
	r := &ResponsesRequest{Body: body, Compaction: -1, Trigger: -1}
	prevEnd := -1
	var seen uint16 // one bit per member compactd acts on; no allocation on the hot path
	it.Object(func(k []byte, keyStart, vs int) bool {
		var buf [32]byte
		name := memberName(k, &buf)
		if bit := memberBit(name); bit != 0 {
			// JSON parsers disagree on duplicate keys (first wins, last wins); the upstream must
			// not read a different input from the one compactd checked.
			if seen&bit != 0 {
				err = duplicateError(string(name), string(name))
				return false
			}
			seen |= bit
		}
		var end int
		switch {
		case string(name) == "input" && it.Peek() == '[':
			err = r.scanItems(it, from)
			r.inputStart, r.inputEnd = vs, it.Pos()
			prevEnd = it.Pos()
			return err == nil
		default:
			var ok bool
			if end, ok, err = scanMember(it, name, openAINotation); !ok {
				return false
			}
		}
		if err != nil || it.Err() != nil {
			return false
		}
		raw := body[vs:end]
		switch string(name) {
		case "model":
			r.Model = strValue(raw)
		case "stream":
			r.Stream = string(raw) == "true"
		case "previous_response_id":
			r.PreviousResponseID = strValue(raw)
		case "prompt_cache_key":
			r.PromptCacheKey = strValue(raw)
		case "instructions":
			if string(raw) != "null" {
				r.Instructions = raw
				err = checkInstructions(r.Instructions)
			}
		case "tools":
			r.Tools = raw
			r.toolsStart, r.toolsEnd = vs, end
		case "tool_choice":
			r.ToolChoice = raw
		case "context_management":
			r.ContextManagement = raw
			r.cmStart, r.cmEnd = memberSpan(body, prevEnd, keyStart, end)
		case "input":
			r.inputStart, r.inputEnd = vs, end
			switch raw[0] {
			case '"':
				r.InputString = true
				r.Items = []Item{{Raw: UserMessage(strValue(raw)), Type: "message", Role: "user"}}
			case 'n':
			default:
				err = shapeError("input", "input must be a string or an array of items.")
			}
		}
		prevEnd = end
		return err == nil
	})
	if e := skimEnd(body, it, err); e != nil {
		return nil, e
	}
	return r, nil
}

func notAnObject() *BodyError {
	return &BodyError{Kind: ErrInvalidJSON, Message: "The request body must be a JSON object."}
}

// strValue is the decoded JSON string raw, "" for any other value, decoded by gjson as the
// skim always has (so a model name reads as it did).
func strValue(raw []byte) string {
	if len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	if in := raw[1 : len(raw)-1]; bytes.IndexByte(in, '\\') < 0 {
		return unsafe.String(unsafe.SliceData(in), len(in)) // aliases Body, never written to
	}
	return gjson.Parse(unsafe.String(unsafe.SliceData(raw), len(raw))).Str
}

// memberBit numbers the top-level members whose duplicates ParseResponsesRequest refuses: every
// member compactd reads, rewrites or strips.
func memberBit(key []byte) uint16 {
	switch string(key) {
	case "input":
		return 1
	case "context_management":
		return 1 << 1
	case "model":
		return 1 << 2
	case "stream":
		return 1 << 3
	case "instructions":
		return 1 << 4
	case "tools":
		return 1 << 5
	case "previous_response_id":
		return 1 << 6
	case "prompt_cache_key":
		return 1 << 7
	case "client_metadata":
		return 1 << 8
	case "tool_choice":
		return 1 << 9
	}
	return 0
}

// Members of an input item that compactd reads (to classify, open, count, summarise or strip the
// item), one bit each: a duplicate of any of them is refused.
const (
	itemType uint16 = 1 << iota
	itemRole
	itemContent
	itemID
	itemEncryptedContent
	itemCallID
	itemName
	itemArguments
	itemOutput
	itemSummary
	itemStatus
	itemInput
	itemAction
	itemPassthrough
)

func itemBit(name []byte) uint16 {
	switch string(name) {
	case "type":
		return itemType
	case "role":
		return itemRole
	case "content":
		return itemContent
	case "id":
		return itemID
	case "encrypted_content":
		return itemEncryptedContent
	case "call_id":
		return itemCallID
	case "name":
		return itemName
	case "arguments":
		return itemArguments
	case "output":
		return itemOutput
	case "summary":
		return itemSummary
	case "status":
		return itemStatus
	case "input":
		return itemInput
	case "action":
		return itemAction
	case "internal_chat_message_metadata_passthrough":
		return itemPassthrough
	}
	return 0
}

// partBit numbers the members of a content part compactd reads when it renders a transcript.
func partBit(name []byte) uint16 {
	switch string(name) {
	case "type":
		return 1
	case "text":
		return 2
	case "refusal":
		return 4
	case "image_url":
		return 8
	case "file_id":
		return 16
	case "file_url":
		return 32
	case "filename":
		return 64
	case "file_data":
		return 128
	}
	return 0
}

// isCompactionType reports whether an item type is one compactd handles only as an item of input.
func isCompactionType(t string) bool {
	return t == TypeCompaction || t == TypeCompactionSummary || t == TypeCompactionTrigger
}

// checkInstructions refuses a compaction item among array instructions: compactd opens
// compaction items only in input, so one here would reach the upstream sealed. An item whose
// type comes twice is refused too: compactd would read the first, a last-wins upstream the other.
func checkInstructions(raw []byte) error {
	var err error
	i := 0
	jsonx.Elements(raw, func(s, e int) bool {
		typ, dup := objectType(raw[s:e])
		switch {
		case dup:
			err = duplicateError(fmt.Sprintf("instructions[%d].type", i), "type")
		case isCompactionType(typ):
			err = misplacedItem(fmt.Sprintf("instructions[%d]", i), typ, "instructions")
		}
		i++
		return err == nil
	})
	return err
}

func misplacedItem(param, typ, where string) *BodyError {
	return &BodyError{Param: param, Kind: ErrMisplacedCompaction, Message: fmt.Sprintf(
		"A %s item is only valid as an item of input, not inside %s; compactd does not read it there and will not forward it. Move it to input.", typ, where)}
}

// objectType returns the "type" of the object raw, "" when raw is not an object or has none,
// and whether the object has more than one.
func objectType(raw []byte) (typ string, dup bool) {
	seen := false
	jsonx.Members(raw, func(k []byte, s, e int) bool {
		var buf [32]byte
		if string(memberName(k, &buf)) != "type" {
			return true
		}
		if seen {
			dup = true
			return false
		}
		seen, typ = true, str(raw[s:e])
		return true
	})
	return typ, dup
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

// scanItems walks the input array at it, item by item (see scanItem); from's items, when input
// begins where from's did, are taken unread.
func (r *ResponsesRequest) scanItems(it *jsonx.Iter, from *Prefix) error {
	var err error
	it.Array(func(_, s int) bool {
		if len(r.Items) == 0 && from.resumeAt(prefixResponses, s, r.Body) {
			return r.resumeItems(it, from)
		}
		i := len(r.Items)
		var item Item
		if item, err = scanItem(it, r.Body, i, s); err != nil {
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
		if r.Items == nil {
			r.Items = r.itemBuf[:0]
		}
		r.Items = append(r.Items, item)
		return true
	})
	// No spare capacity: an append to Items elsewhere copies rather than writing into itemBuf
	// behind a slice someone else holds.
	r.table = r.Items
	r.Items = r.Items[:len(r.Items):len(r.Items)]
	return err
}

// scanItem reads input[i], which starts at body[s]: its type and role, with every member
// compactd reads checked for duplicates, and its content parts (content, output or summary
// arrays) checked the same way and for compaction items, which are only valid as items. The
// walk validates the item as it goes; values are skipped, not decoded. A duplicate member is
// refused first, then the parts of content, output and summary in that order (as the two-pass
// skim did: see twopass_test.go).
func scanItem(it *jsonx.Iter, body []byte, i, s int) (Item, error) {
	if it.Peek() != '{' {
		return Item{}, shapeError(fmt.Sprintf("input[%d]", i), "each item of input must be an object.")
	}
	var seen uint16
	var typ, role []byte
	var err error
	var parts [3]error // content, output, summary
	ok := it.Object(func(k []byte, _, vs int) bool {
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
		case itemType, itemRole:
			_, e, ok := it.Value()
			if bit == itemType {
				typ = body[vs:e]
			} else {
				role = body[vs:e]
			}
			return ok
		case itemContent:
			parts[0] = scanParts(it, body, i, "content")
		case itemOutput:
			parts[1] = scanParts(it, body, i, "output")
		case itemSummary:
			parts[2] = scanParts(it, body, i, "summary")
		}
		return true
	})
	if err != nil {
		return Item{}, err
	}
	if !ok {
		return Item{}, it.Err()
	}
	item := Item{Raw: body[s:it.Pos()], Type: str(typ)}
	if typ == nil || item.Type == "message" {
		item.Role = str(role)
		if typ == nil && role != nil {
			item.Type = "message" // easy input message: {"role":"user","content":"…"}
		}
	}
	for _, e := range parts {
		if e != nil {
			return item, e
		}
	}
	return item, nil
}

// scanParts walks an item's content (or output, or summary) value at it. When it is an array,
// each part is checked: no duplicate member compactd reads, and no compaction item, which the
// upstream would read but compactd never opens there. It returns the first refusal, and walks
// (validates) the rest of the array regardless, so the item's own members are still checked.
func scanParts(it *jsonx.Iter, body []byte, i int, member string) error {
	if it.Peek() != '[' {
		return nil // anything else is left alone (and validated by the caller's walk)
	}
	var err error
	it.Array(func(j, _ int) bool {
		if err != nil || it.Peek() != '{' {
			return true
		}
		var seen uint16
		var typ []byte
		it.Object(func(k []byte, _, vs int) bool {
			if err != nil {
				return true
			}
			var buf [32]byte
			name := memberName(k, &buf)
			bit := partBit(name)
			if bit == 0 {
				return true
			}
			if seen&bit != 0 {
				err = duplicateError(fmt.Sprintf("input[%d].%s[%d].%s", i, member, j, string(name)), string(name))
				return true
			}
			seen |= bit
			if bit == 1 {
				_, e, ok := it.Value()
				typ = body[vs:e]
				return ok
			}
			return true
		})
		if t := str(typ); err == nil && isCompactionType(t) {
			err = misplacedItem(fmt.Sprintf("input[%d].%s[%d]", i, member, j), t, fmt.Sprintf("the %s of input[%d]", member, i))
		}
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
	return r.Rebuild(items, dropContextManagement, nil)
}

// Rebuild is WithInput that also appends tool (raw JSON, when not nil) to the tools array, in the
// same single copy of the body: a recall turn offers its tool on a multi-megabyte history, and
// appending it afterwards (sjson "tools.-1") re-parsed and copied the whole body again. When the
// body has no tools member, the tool is added as sjson adds it; "tools":null becomes the list of
// the one tool.
func (r *ResponsesRequest) Rebuild(items [][]byte, dropContextManagement bool, tool []byte) []byte {
	if sp := r.RebuildSplice(items, dropContextManagement, tool); sp != nil {
		return sp.Bytes()
	}
	return r.rebuild(items, dropContextManagement, tool)
}

// RebuildSplice is Rebuild as a Splice: the client's bytes that stay are pieces of Body, not
// copies, and the items that were Body's and follow one another there stay one piece with their
// separators. nil when the body has no input member, or a tool to add and no tools array to add
// it to (Rebuild then writes the body whole).
func (r *ResponsesRequest) RebuildSplice(items [][]byte, dropContextManagement bool, tool []byte) Splice {
	spliceTool := tool != nil && len(r.Tools) >= 2 && (r.Tools[0] == '[' || string(r.Tools) == "null")
	if !r.HasInput() || (tool != nil && !spliceTool) {
		return nil
	}
	edits, n := r.edits(dropContextManagement, tool, spliceTool)
	s := newSplicer(r.Body, 8)
	cut := func(from, to int) {
		for _, e := range edits[:n] {
			if e.at < from || e.at >= to {
				continue
			}
			s.raw(from, e.at)
			if e.comma {
				s.lit(comma)
			}
			s.lit(e.ins)
			from = e.end
		}
		s.raw(from, to)
	}
	cut(0, r.inputStart)
	if len(items) == 0 {
		if in := r.Body[r.inputStart:r.inputEnd]; len(in) >= 2 && in[0] == '[' && isClosing(in[1:]) {
			s.raw(r.inputStart, r.inputEnd)
		} else {
			s.lit([]byte("[]"))
		}
	} else {
		s.openArray(r.inputStart, items[0])
		for _, it := range items[1:] {
			s.element(it, false)
		}
		s.closeArray(r.inputEnd)
	}
	cut(r.inputEnd, len(r.Body))
	return s.parts
}

// rebuildEdit is one edit of Rebuild inside the kept bytes: Body[at:end] replaced by ins, with a
// comma before it when comma is set.
type rebuildEdit struct {
	at, end int
	ins     []byte
	comma   bool
}

// edits are Rebuild's edits inside the kept bytes, in body order: the context_management member
// to cut, the tool to insert before the tools array's closing bracket. Both are top-level members
// other than input, so neither overlaps input's span or the other.
func (r *ResponsesRequest) edits(dropContextManagement bool, tool []byte, spliceTool bool) ([2]rebuildEdit, int) {
	var edits [2]rebuildEdit
	n := 0
	if dropContextManagement && r.ContextManagement != nil {
		edits[n] = rebuildEdit{at: r.cmStart, end: r.cmEnd}
		n++
	}
	if spliceTool {
		if r.Tools[0] == '[' {
			at := r.toolsEnd - 1 // the ']'
			inner := bytes.TrimLeft(r.Body[r.toolsStart+1:at], " \t\r\n")
			edits[n] = rebuildEdit{at: at, end: at, ins: tool, comma: len(inner) > 0}
		} else {
			// "tools":null: a list of the one tool (sjson would write {"-1":tool}, which no
			// upstream reads as a tool list).
			edits[n] = rebuildEdit{at: r.toolsStart, end: r.toolsEnd, ins: append(append([]byte{'['}, tool...), ']')}
		}
		n++
		if n == 2 && edits[1].at < edits[0].at {
			edits[0], edits[1] = edits[1], edits[0]
		}
	}
	return edits, n
}

// rebuild is Rebuild writing the body whole: for a body without input, or a tool with no tools
// array to splice it into.
func (r *ResponsesRequest) rebuild(items [][]byte, dropContextManagement bool, tool []byte) []byte {
	spliceTool := tool != nil && len(r.Tools) >= 2 && (r.Tools[0] == '[' || string(r.Tools) == "null")
	edits, n := r.edits(dropContextManagement, tool, spliceTool)
	// Everything but the old input, plus the new one: one allocation of the final size.
	size := len(r.Body) - (r.inputEnd - r.inputStart) + len(`"input":`) + 2 + len(tool) + 1
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
	// cut appends Body[from:to] to dst with the edits that fall in it applied.
	cut := func(dst []byte, from, to int) []byte {
		for _, e := range edits[:n] {
			if e.at < from || e.at >= to {
				continue
			}
			dst = append(dst, r.Body[from:e.at]...)
			if e.comma {
				dst = append(dst, ',')
			}
			dst = append(dst, e.ins...)
			from = e.end
		}
		return append(dst, r.Body[from:to]...)
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
		out = append(out, rest...)
	} else {
		out = cut(out, 0, r.inputStart)
		out = appendInput(out)
		out = cut(out, r.inputEnd, len(r.Body))
	}
	if tool != nil && !spliceTool {
		out, _ = sjson.SetRawBytes(out, "tools.-1", tool)
	}
	return out
}
