package api

import (
	"fmt"
	"net/http"
	"strings"
	"unsafe"

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
	from    *Prefix // the prefix the skim resumed from, nil when it read the whole body
	// blockBuf backs the Blocks of every message, so the skim of a long history allocates a few
	// times as blockBuf doubles rather than once or twice per message.
	blockBuf []Block
}

// Message is one element of `messages`.
type Message struct {
	Raw  []byte
	Role string
	// Blocks is the content's blocks; nil for a string content (StringContent), which stands for
	// one text block that ContentBlocks makes when asked. Code that reads a message's text walks
	// ContentBlocks; code that looks for tool, thinking or compaction blocks may walk Blocks, as a
	// string content holds none.
	Blocks        []Block
	StringContent bool
	// Handoff marks the user message compactd rendered from a compaction summary.
	Handoff bool

	text []byte // a string content as the client spelt it (quotes included), aliasing Raw
}

// ContentBlocks is the content as blocks: Blocks, or for a string content the one text block it
// stands for ({"type":"text","text":<the string>}, textBlockOf), made here rather than by the
// skim: a conversation of string messages would otherwise pay a copy of every string on every
// turn, for a block only a compaction, a recall or an agent's summary request reads.
func (m Message) ContentBlocks() []Block {
	if m.Blocks == nil && m.StringContent && m.text != nil {
		return []Block{{Raw: textBlockOf(m.text), Type: BlockText}}
	}
	return m.Blocks
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
// object blocks, that repeat a member compactd acts on (at the top level, in tool_choice or a
// tool, anywhere in context_management or compaction, in a message, in a content block or in a
// block nested in one), or that carry a compaction block anywhere but
// directly in a message's content. Everything else is left to the parts of compactd that act on
// a field, and to the upstream.
func ParseMessagesRequest(body []byte) (*MessagesRequest, error) { return parseMessages(body, nil) }

func parseMessages(body []byte, from *Prefix) (*MessagesRequest, error) {
	// One pass: the walk validates every byte it passes (jsonx.Iter checks what jsonx.Valid
	// checks), and descends only where the skim reads: the top-level members, the messages,
	// their members, their content blocks and the blocks nested in those, and system blocks.
	// Validating first, then walking the top level, then each message again read a body three
	// times (see messages_twopass_test.go, the oracle this walk must agree with).
	it := jsonx.NewIter(body)
	err := skimObject(it, body)
	if err != nil {
		return nil, err
	}
	r := &MessagesRequest{Body: body}
	var seen uint8 // one bit per member compactd acts on; no allocation on the hot path
	it.Object(func(k []byte, keyStart, vs int) bool {
		var buf [32]byte
		name := memberName(k, &buf)
		if bit := messagesMemberBit(name); bit != 0 {
			if seen&bit != 0 {
				err = duplicateError(string(name), string(name))
				return false
			}
			seen |= bit
		}
		var end int
		switch {
		case string(name) == "messages" && it.Peek() == '[':
			err = r.scanMessages(it, from)
			end = it.Pos()
		case string(name) == "system" && it.Peek() == '[':
			err = checkSystem(it, body)
			end = it.Pos()
		case string(name) == "context_management" || string(name) == "compaction":
			member := string(name)
			err = scanStrict(it, func() string { return member })
			end = it.Pos()
		default:
			var ok bool
			if end, ok, err = scanMember(it, name, anthropicNotation); !ok {
				return false
			}
		}
		if err != nil || it.Err() != nil {
			return false
		}
		r.members = append(r.members, member{key: keyString(k, name), start: keyStart, end: end})
		raw := body[vs:end]
		switch string(name) {
		case "model":
			r.Model = strValue(raw)
		case "stream":
			r.Stream = string(raw) == "true"
		case "system":
			r.System = raw
		case "tools":
			r.Tools = raw
		case "context_management":
			r.ContextManagement = raw
		case "compaction":
			r.Compaction = raw
		case "messages":
			if raw[0] != '[' && string(raw) != "null" {
				err = shapeError("messages", "Input should be a valid list")
			}
		}
		return err == nil
	})
	if e := skimEnd(body, it, err); e != nil {
		return nil, e
	}
	return r, nil
}

// keyString is the member name of the raw key k as a string, aliasing the body (never written
// to) when the key has no escapes, so recording the members for Rewrite allocates nothing more.
func keyString(k, name []byte) string {
	if len(name) > 0 && len(k) > 0 && &name[0] == &k[0] {
		return unsafe.String(unsafe.SliceData(k), len(k))
	}
	return string(name)
}

// messagesMemberBit numbers the top-level members whose duplicates ParseMessagesRequest refuses:
// every member compactd reads or rewrites. A body with two messages members would otherwise be
// checked as one conversation and forwarded as another; one with two tool_choice members would
// be offered the recall tool on the first and answered by the upstream on the other.
func messagesMemberBit(key []byte) uint8 {
	switch string(key) {
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
	case "tool_choice":
		return 128
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

// scanMessages walks the messages array at it, message by message; the first refusal stops it.
func (r *MessagesRequest) scanMessages(it *jsonx.Iter, from *Prefix) error {
	var err error
	it.Array(func(_, s int) bool {
		if len(r.Messages) == 0 && from.resumeAt(prefixMessages, s, r.Body) {
			return r.resumeMessages(it, from)
		}
		i := len(r.Messages)
		var msg Message
		if msg, err = r.scanMessage(it, i, s); err != nil {
			return false
		}
		r.Messages = append(r.Messages, msg)
		return true
	})
	return err
}

// scanMessage reads messages[i], which starts at Body[s]: role and content, each at most once,
// and its blocks. A duplicate role or content anywhere in the message is refused before what is
// wrong with its content, as when the message's members were checked before its content was
// read; so a refusal in the content is kept while the rest of the message is walked.
func (r *MessagesRequest) scanMessage(it *jsonx.Iter, i, s int) (Message, error) {
	body := r.Body
	if it.Peek() != '{' {
		return Message{}, shapeError(fmt.Sprintf("messages.%d", i), "Input should be a valid dictionary")
	}
	var msg Message
	var seen uint16
	var role, content []byte
	var err, contentErr error
	nblocks := len(r.Blocks)
	ok := it.Object(func(k []byte, _, vs int) bool {
		var buf [32]byte
		var bit uint16
		switch name := memberName(k, &buf); string(name) {
		case "role":
			bit = blockRole
		case "content":
			bit = blockContent
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
		if bit == blockContent && it.Peek() == '[' {
			contentErr = r.scanContent(it, &msg, i)
		} else if _, _, ok := it.Value(); !ok {
			return false
		}
		if bit == blockRole {
			role = body[vs:it.Pos()]
		} else {
			content = body[vs:it.Pos()]
		}
		return true
	})
	if err != nil {
		return msg, err
	}
	if !ok {
		return msg, it.Err()
	}
	msg.Raw = body[s:it.Pos()]
	msg.Role = str(role)
	switch {
	case content == nil:
	case content[0] == '"':
		msg.StringContent, msg.text = true, content
	case content[0] == '[':
		err = contentErr
	default:
		err = shapeError(fmt.Sprintf("messages.%d.content", i), "Input should be a valid string or a valid list of content blocks")
	}
	if err != nil {
		r.Blocks = r.Blocks[:nblocks]
	}
	return msg, err
}

// scanContent walks the content array of messages[i] at it into msg.Blocks, recording its
// compaction blocks. It returns the first block's refusal and walks (validates) the rest of the
// array without reading it.
func (r *MessagesRequest) scanContent(it *jsonx.Iter, msg *Message, i int) error {
	var err error
	first := len(r.blockBuf)
	defer func() {
		// Each message's blocks are its own window of blockBuf, capacity capped so an append
		// to one copies rather than writing over the next message's.
		if n := len(r.blockBuf); n > first {
			msg.Blocks = r.blockBuf[first:n:n]
		}
	}()
	it.Array(func(j, s int) bool {
		if err != nil {
			return true
		}
		var blk Block
		if blk, err = scanBlock(it, r.Body, s, false); err != nil {
			err = within(err, fmt.Sprintf("messages.%d.content.%d", i, j))
			return true
		}
		if blk.Type == BlockCompaction {
			r.Blocks = append(r.Blocks, BlockRef{i, j})
		}
		r.blockBuf = append(r.blockBuf, blk)
		return true
	})
	return err
}

// scanBlock reads one content block, which starts at body[s]: its type, every member compactd
// reads at most once, and the blocks nested in its content (tool_result, search_result, server
// tool results), which must not hold a compaction block: compactd finds and opens compaction
// blocks only directly in a message's content, so one nested deeper would reach the upstream
// unopened. Nesting is bounded by jsonx.MaxDepth, which the walk counts. Errors carry a Param
// relative to the block (".content.0.type"); the caller prefixes where the block is, so no path
// is built on the hot path.
//
// A refusal does not stop the walk: the caller may still have a refusal of its own to find
// further on (a duplicate role after a bad block), which wins. A duplicate member wins over
// what is wrong with the block's nested content, which is only read when the block is not a
// compaction block (its type may come after its content).
func scanBlock(it *jsonx.Iter, body []byte, s int, nested bool) (Block, error) {
	if it.Peek() != '{' {
		if nested {
			return Block{}, nil // tool_result content may mix in strings; nothing to smuggle there
		}
		return Block{}, shapeError("", "Input should be a valid dictionary")
	}
	var seen uint16
	var typ []byte
	var err, contentErr error
	var contentList bool
	it.Object(func(k []byte, _, vs int) bool {
		if err != nil {
			return true
		}
		var buf [32]byte
		name := memberName(k, &buf)
		bit := blockBit(name)
		if bit == 0 {
			return true
		}
		if seen&bit != 0 {
			err = duplicateError("."+string(name), string(name))
			return true
		}
		seen |= bit
		switch {
		case bit == blockType:
			_, e, ok := it.Value()
			typ = body[vs:e]
			return ok
		case bit == blockContent && it.Peek() == '[':
			contentList = true
			n := 0
			it.Array(func(_, s int) bool {
				if contentErr == nil {
					if _, contentErr = scanBlock(it, body, s, true); contentErr != nil {
						contentErr = within(contentErr, fmt.Sprintf(".content.%d", n))
					}
				}
				n++
				return true
			})
		}
		return true
	})
	blk := Block{Raw: body[s:it.Pos()], Type: str(typ)}
	switch {
	case err != nil:
		return blk, err
	case blk.Type == BlockCompaction && nested:
		return blk, misplacedBlock()
	case blk.Type == BlockCompaction || !contentList:
		return blk, nil
	}
	return blk, contentErr
}

func misplacedBlock() *BodyError {
	return &BodyError{Kind: ErrMisplacedCompaction, Message: "a compaction block is only valid directly in a message's content, where compactd opens it; compactd does not read one here and will not forward it. Send compaction blocks back where the response put them."}
}

// checkSystem walks the system blocks at it and refuses compaction blocks (and duplicate members
// compactd reads) among them: compactd does not look for compaction blocks there.
func checkSystem(it *jsonx.Iter, body []byte) error {
	var err error
	it.Array(func(i, s int) bool {
		// A system block is never opened: treat it as nested, so a compaction block is refused.
		if _, err = scanBlock(it, body, s, true); err != nil {
			err = within(err, fmt.Sprintf("system.%d", i))
		}
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

// textBlockOf is the text block a string content stands for: {"type":"text","text":<raw>}, raw
// (quotes included) being the validated string as the client spelt it. Its text is str(raw), as
// in TextBlock(str(raw)), but its bytes are raw's, escapes and all: no decode and encode of every
// byte (ContentBlocks).
func textBlockOf(raw []byte) []byte {
	b := make([]byte, 0, len(raw)+len(`{"type":"text","text":}`))
	b = append(b, `{"type":"text","text":`...)
	b = append(b, raw...)
	return append(b, '}')
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
