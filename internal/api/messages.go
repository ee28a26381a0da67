package api

import (
	"fmt"
	"net/http"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/jsonx"
)

// Block types compactd treats specially in Anthropic Messages content.
const (
	BlockCompaction = "compaction"
	BlockText       = "text"
)

// MessagesRequest is a skim of a POST /v1/messages (or /v1/messages/count_tokens) body: the
// top-level fields compactd acts on and the messages as sub-slices of Body. As with
// ResponsesRequest nothing else is decoded, and every field compactd does not know is forwarded
// byte for byte.
type MessagesRequest struct {
	Body []byte // the body as received; everything below aliases it

	Model  string
	Stream bool
	// System, Tools, ContextManagement and Compaction are the raw JSON values of those fields,
	// nil when absent (Compaction is the on-demand `compaction` request, not a block).
	System, Tools, ContextManagement, Compaction []byte

	Messages []Message
	// Blocks lists every compaction content block in messages, in order.
	Blocks []BlockRef

	members []member
}

// Message is one element of `messages`.
type Message struct {
	Raw  []byte
	Role string
	// Blocks is the content as blocks; a string content is one synthesised text block, so code
	// that walks blocks needs no second case. StringContent records that it was a string.
	Blocks        []Block
	StringContent bool
	// Handoff marks the user message compactd rendered from a compaction summary.
	Handoff bool
}

// Block is one content block of a message.
type Block struct {
	Raw  []byte
	Type string
}

// BlockRef locates a content block: messages[Message].content[Block].
type BlockRef struct{ Message, Block int }

// Path is the block's location in Anthropic's error-message notation.
func (b BlockRef) Path() string {
	return fmt.Sprintf("messages.%d.content.%d", b.Message, b.Block)
}

type member struct {
	key        string
	start, end int // the member's bytes, key through value
}

// ParseMessagesRequest skims body. It fails (with a *BodyError whose Param is in Anthropic's
// "messages.0.content.1" notation) on bodies that are not JSON objects or nest deeper than
// jsonx.MaxDepth, whose messages are not an array of objects with string or list content and
// object blocks, that repeat a member compactd acts on (at the top level, in a message, in a
// content block or in a block nested in one), or that carry a compaction block anywhere but
// directly in a message's content. Everything else is left to the parts of compactd that act on
// a field, and to the upstream.
func ParseMessagesRequest(body []byte) (*MessagesRequest, error) {
	if err := checkBody(body); err != nil {
		return nil, err
	}
	s := unsafe.String(unsafe.SliceData(body), len(body)) // read-only view, no copy
	root := gjson.Parse(s)
	if !root.IsObject() {
		return nil, &BodyError{Kind: ErrInvalidJSON, Message: "The request body must be a JSON object."}
	}
	r := &MessagesRequest{Body: body}
	var err error
	var seen uint8 // one bit per member compactd acts on; no allocation on the hot path
	root.ForEach(func(key, value gjson.Result) bool {
		if bit := messagesMemberBit(key.Str); bit != 0 {
			if seen&bit != 0 {
				err = duplicateError(key.Str, key.Str)
				return false
			}
			seen |= bit
		}
		end := value.Index + len(value.Raw)
		r.members = append(r.members, member{key: key.Str, start: key.Index, end: end})
		raw := body[value.Index:end]
		switch key.Str {
		case "model":
			r.Model = value.Str
		case "stream":
			r.Stream = value.Type == gjson.True
		case "system":
			r.System = raw
			err = checkSystem(raw)
		case "tools":
			r.Tools = raw
		case "context_management":
			r.ContextManagement = raw
		case "compaction":
			r.Compaction = raw
		case "messages":
			err = r.scanMessages(raw)
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// messagesMemberBit numbers the top-level members whose duplicates ParseMessagesRequest refuses:
// every member compactd reads or rewrites. A body with two messages members would otherwise be
// checked as one conversation and forwarded as another.
func messagesMemberBit(key string) uint8 {
	switch key {
	case "messages":
		return 1
	case "model":
		return 2
	case "stream":
		return 4
	case "system":
		return 8
	case "tools":
		return 16
	case "context_management":
		return 32
	case "compaction":
		return 64
	}
	return 0
}

// Members of a message and of a content block that compactd reads (to find, open, apply edits to
// or summarise blocks), one bit each: a duplicate of any of them is refused.
const (
	blockType uint16 = 1 << iota
	blockContent
	blockEncryptedContent
	blockSignature
	blockText
	blockID
	blockName
	blockInput
	blockToolUseID
	blockThinking
	blockRole // messages only
)

func blockBit(name []byte) uint16 {
	switch string(name) {
	case "type":
		return blockType
	case "content":
		return blockContent
	case "encrypted_content":
		return blockEncryptedContent
	case "signature":
		return blockSignature
	case "text":
		return blockText
	case "id":
		return blockID
	case "name":
		return blockName
	case "input":
		return blockInput
	case "tool_use_id":
		return blockToolUseID
	case "thinking":
		return blockThinking
	}
	return 0
}

func (r *MessagesRequest) scanMessages(arr []byte) error {
	if string(arr) == "null" {
		return nil
	}
	if arr[0] != '[' {
		return shapeError("messages", "Input should be a valid list")
	}
	var err error
	i := 0
	jsonx.Elements(arr, func(s, e int) bool {
		var msg Message
		if msg, err = r.scanMessage(arr[s:e], i); err != nil {
			return false
		}
		r.Messages = append(r.Messages, msg)
		i++
		return true
	})
	return err
}

// scanMessage reads messages[i]: role and content, each at most once, and its blocks.
func (r *MessagesRequest) scanMessage(raw []byte, i int) (Message, error) {
	msg := Message{Raw: raw}
	if raw[0] != '{' {
		return msg, shapeError(fmt.Sprintf("messages.%d", i), "Input should be a valid dictionary")
	}
	var seen uint16
	var role, content []byte
	var err error
	jsonx.Members(raw, func(k []byte, s, e int) bool {
		var buf [32]byte
		var bit uint16
		switch name := memberName(k, &buf); string(name) {
		case "role":
			bit, role = blockRole, raw[s:e]
		case "content":
			bit, content = blockContent, raw[s:e]
		default:
			return true
		}
		if seen&bit != 0 {
			name := "role"
			if bit == blockContent {
				name = "content"
			}
			err = duplicateError(fmt.Sprintf("messages.%d.%s", i, name), name)
			return false
		}
		seen |= bit
		return true
	})
	if err != nil {
		return msg, err
	}
	msg.Role = str(role)
	switch {
	case content == nil:
	case content[0] == '"':
		msg.StringContent = true
		msg.Blocks = []Block{{Raw: TextBlock(str(content)), Type: BlockText}}
	case content[0] == '[':
		j := 0
		jsonx.Elements(content, func(s, e int) bool {
			var blk Block
			if blk, err = scanBlock(content[s:e], false); err != nil {
				err = within(err, fmt.Sprintf("messages.%d.content.%d", i, j))
				return false
			}
			if blk.Type == BlockCompaction {
				r.Blocks = append(r.Blocks, BlockRef{i, j})
			}
			msg.Blocks = append(msg.Blocks, blk)
			j++
			return true
		})
	default:
		err = shapeError(fmt.Sprintf("messages.%d.content", i), "Input should be a valid string or a valid list of content blocks")
	}
	return msg, err
}

// scanBlock reads one content block: its type, every member compactd reads at most once, and
// the blocks nested in its content (tool_result, search_result, server tool results), which
// must not hold a compaction block: compactd finds and opens compaction blocks only directly in
// a message's content, so one nested deeper would reach the upstream unopened. Nesting is
// bounded by jsonx.MaxDepth, which the body has passed. Errors carry a Param relative to the
// block (".content.0.type"); the caller prefixes where the block is, so no path is built on the
// hot path.
func scanBlock(raw []byte, nested bool) (Block, error) {
	blk := Block{Raw: raw}
	if raw[0] != '{' {
		if nested {
			return blk, nil // tool_result content may mix in strings; nothing to smuggle there
		}
		return blk, shapeError("", "Input should be a valid dictionary")
	}
	var seen uint16
	var typ, content []byte
	var err error
	jsonx.Members(raw, func(k []byte, s, e int) bool {
		var buf [32]byte
		name := memberName(k, &buf)
		bit := blockBit(name)
		if bit == 0 {
			return true
		}
		if seen&bit != 0 {
			err = duplicateError("."+string(name), string(name))
			return false
		}
		seen |= bit
		switch bit {
		case blockType:
			typ = raw[s:e]
		case blockContent:
			content = raw[s:e]
		}
		return true
	})
	if err != nil {
		return blk, err
	}
	blk.Type = str(typ)
	if blk.Type == BlockCompaction && nested {
		return blk, &BodyError{Kind: ErrMisplacedCompaction, Message: "a compaction block is only valid directly in a message's content, where compactd opens it; compactd does not read one here and will not forward it. Send compaction blocks back where the response put them."}
	}
	if blk.Type == BlockCompaction || len(content) == 0 || content[0] != '[' {
		return blk, nil
	}
	n := 0
	jsonx.Elements(content, func(s, e int) bool {
		if _, err = scanBlock(content[s:e], true); err != nil {
			err = within(err, fmt.Sprintf(".content.%d", n))
		}
		n++
		return err == nil
	})
	return blk, err
}

// checkSystem refuses compaction blocks (and duplicate members compactd reads) among system
// blocks: compactd does not look for compaction blocks there.
func checkSystem(raw []byte) error {
	if len(raw) == 0 || raw[0] != '[' {
		return nil
	}
	var err error
	i := 0
	jsonx.Elements(raw, func(s, e int) bool {
		// A system block is never opened: treat it as nested, so a compaction block is refused.
		if _, err = scanBlock(raw[s:e], true); err != nil {
			err = within(err, fmt.Sprintf("system.%d", i))
		}
		i++
		return err == nil
	})
	return err
}

// Member is one top-level change for Rewrite: Value replaces the member's value, or adds the
// member at the end when absent; a nil Value removes the member.
type Member struct {
	Key   string
	Value []byte
}

// Rewrite returns a new body with the given members replaced, added or removed. Every other
// member is copied byte for byte, in its original order.
func (r *MessagesRequest) Rewrite(changes ...Member) []byte {
	out := make([]byte, 0, len(r.Body)+256)
	out = append(out, '{')
	done := make([]bool, len(changes))
	first := true
	sep := func() {
		if !first {
			out = append(out, ',')
		}
		first = false
	}
	for _, m := range r.members {
		k := indexOf(changes, m.key)
		if k < 0 {
			sep()
			out = append(out, r.Body[m.start:m.end]...)
			continue
		}
		done[k] = true
		if changes[k].Value == nil {
			continue
		}
		sep()
		out = appendMember(out, m.key, changes[k].Value)
	}
	for k, c := range changes {
		if !done[k] && c.Value != nil {
			sep()
			out = appendMember(out, c.Key, c.Value)
		}
	}
	return append(out, '}')
}

func indexOf(changes []Member, key string) int {
	for i, c := range changes {
		if c.Key == key {
			return i
		}
	}
	return -1
}

func appendMember(out []byte, key string, value []byte) []byte {
	out = AppendString(out, key)
	out = append(out, ':')
	return append(out, value...)
}

// JSONArray joins raw JSON values into an array.
func JSONArray(elems [][]byte) []byte {
	n := 2
	for _, e := range elems {
		n += len(e) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	for i, e := range elems {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, e...)
	}
	return append(out, ']')
}

// TextBlock renders a text content block.
func TextBlock(text string) []byte {
	b := make([]byte, 0, len(text)+32)
	b = append(b, `{"type":"text","text":`...)
	b = AppendString(b, text)
	return append(b, '}')
}

// AnthropicMessage renders a message with the given role and content blocks.
func AnthropicMessage(role string, blocks [][]byte) []byte {
	b := make([]byte, 0, 64)
	b = append(b, `{"role":`...)
	b = AppendString(b, role)
	b = append(b, `,"content":`...)
	b = append(b, JSONArray(blocks)...)
	return append(b, '}')
}

// NewMessage builds a Message from a role and blocks, with Raw rendered.
func NewMessage(role string, blocks []Block) Message {
	raws := make([][]byte, len(blocks))
	for i, b := range blocks {
		raws[i] = b.Raw
	}
	return Message{Raw: AnthropicMessage(role, raws), Role: role, Blocks: blocks}
}

// CompactionBlockStart is the compaction block as content_block_start announces it.
const CompactionBlockStart = `{"type":"compaction","content":null,"encrypted_content":null}`

// CompactionBlock renders a compaction content block; signature is omitted when "".
func CompactionBlock(content, encryptedContent, signature string) []byte {
	b := make([]byte, 0, len(content)+len(encryptedContent)+len(signature)+80)
	b = append(b, `{"type":"compaction","content":`...)
	b = AppendString(b, content)
	b = append(b, `,"encrypted_content":`...)
	b = AppendString(b, encryptedContent)
	if signature != "" {
		b = append(b, `,"signature":`...)
		b = AppendString(b, signature)
	}
	return append(b, '}')
}

// RawMessages returns the Raw of each message, for JSONArray.
func RawMessages(msgs []Message) [][]byte {
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		out[i] = m.Raw
	}
	return out
}

// Betas returns the anthropic-beta values of h: every header line, split on commas, trimmed,
// empty entries dropped. Clients send both forms (several lines, or one comma-joined line).
func Betas(h http.Header) []string {
	var out []string
	for _, line := range h.Values("Anthropic-Beta") {
		for _, v := range strings.Split(line, ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

// DropBetas removes the named betas from h's anthropic-beta header, leaving the rest as one
// comma-joined line (or no header when none is left). It reports whether anything was removed.
func DropBetas(h http.Header, drop ...string) bool {
	all := Betas(h)
	keep := all[:0:0]
	for _, b := range all {
		found := false
		for _, d := range drop {
			if b == d {
				found = true
			}
		}
		if !found {
			keep = append(keep, b)
		}
	}
	if len(keep) == len(all) {
		return false
	}
	h.Del("Anthropic-Beta")
	if len(keep) > 0 {
		h.Set("Anthropic-Beta", strings.Join(keep, ","))
	}
	return true
}
