package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
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

// ParseMessagesRequest skims body. It fails only on bodies that are not JSON objects or whose
// messages are not an array of objects with array or string content; everything else is left to
// the parts of compactd that act on a field, and to the upstream.
func ParseMessagesRequest(body []byte) (*MessagesRequest, error) {
	if len(body) == 0 || !gjson.ValidBytes(body) {
		return nil, ErrInvalidJSON
	}
	s := unsafe.String(unsafe.SliceData(body), len(body)) // read-only view, no copy
	root := gjson.Parse(s)
	if !root.IsObject() {
		return nil, ErrInvalidJSON
	}
	r := &MessagesRequest{Body: body}
	var err error
	root.ForEach(func(key, value gjson.Result) bool {
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
		case "tools":
			r.Tools = raw
		case "context_management":
			r.ContextManagement = raw
		case "compaction":
			r.Compaction = raw
		case "messages":
			err = r.scanMessages(value)
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (r *MessagesRequest) scanMessages(v gjson.Result) error {
	if v.Type == gjson.Null {
		return nil
	}
	if !v.IsArray() {
		return errors.New("messages: Input should be a valid list")
	}
	var err error
	i := 0
	v.ForEach(func(_, m gjson.Result) bool {
		if !m.IsObject() {
			err = fmt.Errorf("messages.%d: Input should be a valid dictionary", i)
			return false
		}
		msg := Message{Raw: r.Body[m.Index : m.Index+len(m.Raw)], Role: m.Get("role").Str}
		c := m.Get("content")
		switch {
		case c.Type == gjson.String:
			msg.StringContent = true
			msg.Blocks = []Block{{Raw: TextBlock(c.Str), Type: BlockText}}
		case c.IsArray():
			j := 0
			c.ForEach(func(_, b gjson.Result) bool {
				blk := Block{Raw: r.Body[b.Index : b.Index+len(b.Raw)], Type: b.Get("type").Str}
				if blk.Type == BlockCompaction {
					r.Blocks = append(r.Blocks, BlockRef{i, j})
				}
				msg.Blocks = append(msg.Blocks, blk)
				j++
				return true
			})
		}
		r.Messages = append(r.Messages, msg)
		i++
		return true
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
