package api

import (
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/compactd/compactd/internal/jsonx"
)

// Prefix is what a skim learnt about the beginning of a body: the spans, kinds and roles of the
// items of its conversation array (Responses input items, Messages or Chat messages) up to the
// end of the last of them, End. Agents resend the previous request plus a few new items, so the
// next body usually begins with those same End bytes; skimmed from a Prefix (ParseResponsesFrom,
// ParseMessagesFrom, ParseChatFrom) it walks only what follows: the top-level members before the
// array again (a few KB), the new items, and the members after the array.
//
// A Prefix holds offsets and interned names, never the body's bytes, so keeping one keeps no
// body alive. It is immutable once made and safe to share between goroutines. The next turn's
// Prefix takes over the spare capacity past its tables (extend), so a conversation's Prefixes
// share one growing table rather than each copying the last.
//
// Whoever resumes a skim from a Prefix vouches that the body begins with the exact End bytes of
// the body the Prefix was taken from: the skim trusts them as checked (valid JSON at the right
// depth, strict UTF-8, no repeated member compactd reads, no misplaced compaction). compactd's
// proof is a keyed MAC over those bytes (internal/skimcache); FuzzPrefixResume holds every
// resumed skim to the full skim's result.
type Prefix struct {
	kind  prefixKind
	first int // offset of the array's first element
	end   int // offset just past its last remembered element
	items []prefixItem
	// names are the item types and roles that are not knownNames, by index past them.
	names   []string
	tooMany bool // more than maxPrefixNames names of its own: not worth remembering
	// blocks holds the content blocks of every Messages message in order; a message's are
	// blocks[its bstart : its bstart+its nblocks].
	blocks []prefixBlock
	// nameBytes is what names hold (counted in Size).
	nameBytes int
	size      int
	// handedOn is set by the one successor (extend) that took over the capacity past items,
	// blocks and names: it appends there, where p never reads. Any other successor copies.
	handedOn atomic.Bool
}

type prefixKind uint8

const (
	prefixResponses prefixKind = iota + 1
	prefixMessages
	prefixChat
)

type prefixItem struct {
	start, end int32
	typ, role  uint16 // nameID
	// Messages only: the string content's span (stringContent), or the message's blocks.
	cstart, cend    int32
	bstart, nblocks int32
	stringContent   bool
}

type prefixBlock struct {
	start, end int32
	typ        uint16 // nameID
}

// End is the length of the body prefix p describes; 0 for a nil Prefix.
func (p *Prefix) End() int {
	if p == nil {
		return 0
	}
	return p.end
}

// Size is the memory p holds, in bytes, for a cache's budget.
func (p *Prefix) Size() int {
	if p == nil {
		return 0
	}
	return p.size
}

// Len is the number of items (or messages) p remembers.
func (p *Prefix) Len() int {
	if p == nil {
		return 0
	}
	return len(p.items)
}

// maxPrefixBody bounds the bodies a Prefix describes: offsets are int32.
const maxPrefixBody = 1<<31 - 1

// resumeAt reports whether a skim of body at the array's first element s may jump to p.end:
// p is of the kind, begins its array at s, and fits the body.
func (p *Prefix) resumeAt(kind prefixKind, s int, body []byte) bool {
	return p != nil && p.kind == kind && p.first == s && p.end <= len(body) && len(p.items) > 0
}

// offset is where sub, a sub-slice of body, begins in body.
func offset(body, sub []byte) int {
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(sub))) - uintptr(unsafe.Pointer(unsafe.SliceData(body))))
}

// sizeOfPrefixItem and sizeOfPrefixBlock are what one remembered item or block costs.
const (
	sizeOfPrefixItem  = int(unsafe.Sizeof(prefixItem{}))
	sizeOfPrefixBlock = int(unsafe.Sizeof(prefixBlock{}))
	sizeOfPrefix      = int(unsafe.Sizeof(Prefix{}))
)

// knownNames are the item and block types and the roles the APIs define: a Prefix names them by
// index, so its tables hold no pointer (the collector never scans them) and alias no body.
var knownNames = []string{"", "message", "function_call", "function_call_output", "reasoning", "custom_tool_call",
	"custom_tool_call_output", "local_shell_call", "local_shell_call_output", "web_search_call",
	"file_search_call", "computer_call", "computer_call_output", "mcp_call", "mcp_list_tools",
	"compaction", "compaction_summary", "compaction_trigger", "item_reference",
	"user", "assistant", "system", "developer", "tool", "function",
	"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking",
	"server_tool_use", "web_search_tool_result", "search_result", "container_upload"}

var knownIndex = func() map[string]uint16 {
	m := make(map[string]uint16, len(knownNames))
	for i, s := range knownNames {
		m[s] = uint16(i)
	}
	return m
}()

// maxPrefixNames bounds the names of a Prefix's own, so that looking one up stays a short scan
// whatever a body holds; a body with more distinct unknown types gets no Prefix.
const maxPrefixNames = 64

// done is p once complete, nil when it could not be made. Its size counts its tables' capacity:
// the memory the next turn's Prefix takes over (extend) is held from now on.
func (p *Prefix) done() *Prefix {
	if p.tooMany || len(p.items) == 0 {
		return nil
	}
	p.end = int(p.items[len(p.items)-1].end)
	p.size = sizeOfPrefix + cap(p.items)*sizeOfPrefixItem + cap(p.blocks)*sizeOfPrefixBlock + p.nameBytes
	return p
}

// nameID is s's index: a known name's, else one of p's own names (copied, and counted in Size).
func (p *Prefix) nameID(s string) uint16 {
	if i, ok := knownIndex[s]; ok {
		return i
	}
	for i, n := range p.names {
		if n == s {
			return uint16(len(knownNames) + i)
		}
	}
	if len(p.names) == maxPrefixNames {
		p.tooMany = true // the Prefix is not made (see done): bounded work per name
		return 0
	}
	p.names = append(p.names, strings.Clone(s))
	p.nameBytes += len(s) + 16
	return uint16(len(knownNames) + len(p.names) - 1)
}

// name is the name of id.
func (p *Prefix) name(id uint16) string {
	if int(id) < len(knownNames) {
		return knownNames[id]
	}
	return p.names[int(id)-len(knownNames)]
}

// extend begins the Prefix of n items whose array begins at first: when the skim resumed from
// from (the receiver), its items are the new Prefix's first ones, not looked at again; known is
// how many. The first successor of from takes over its tables and appends past their ends, which
// from never reads, so a conversation's turn costs what it adds (amortised: the tables grow as
// append grows them); a second successor (a conversation forked, a request retried) copies them.
func (from *Prefix) extend(kind prefixKind, first, n int) (p *Prefix, known int) {
	p = &Prefix{kind: kind, first: first}
	if from != nil && from.kind == kind && from.first == first && len(from.items) <= n {
		known = len(from.items)
		p.nameBytes = from.nameBytes
		if from.handedOn.CompareAndSwap(false, true) {
			p.items, p.blocks, p.names = from.items, from.blocks, from.names
		} else {
			p.items = slices.Clone(from.items)
			p.blocks = slices.Clone(from.blocks)
			p.names = slices.Clone(from.names)
		}
	}
	p.items = slices.Grow(p.items, n-known)
	return p, known
}

// ParseResponsesFrom is ParseResponsesRequest resumed from from (nil: from the start): input's
// first len(from) items are taken from from, unread, when input begins where from's began. The
// result is the one ParseResponsesRequest gives for body whenever body begins with from's bytes.
func ParseResponsesFrom(body []byte, from *Prefix) (*ResponsesRequest, error) {
	return parseResponses(body, from)
}

// Prefix is what the skim learnt of Body up to the end of input's last item, for the next turn's
// skim; nil when input is not an array of items (or the body is too large to describe).
func (r *ResponsesRequest) Prefix() *Prefix {
	if r.InputString || len(r.Items) == 0 || len(r.Body) > maxPrefixBody {
		return nil
	}
	first := offset(r.Body, r.Items[0].Raw)
	p, known := r.from.extend(prefixResponses, first, len(r.Items))
	for _, it := range r.Items[known:] {
		s := offset(r.Body, it.Raw)
		p.items = append(p.items, prefixItem{start: int32(s), end: int32(s + len(it.Raw)),
			typ: p.nameID(it.Type), role: p.nameID(it.Role)})
	}
	return p.done()
}

// resumeItems appends from's items, re-pointed into r.Body, and moves it past them.
func (r *ResponsesRequest) resumeItems(it *jsonx.Iter, from *Prefix) bool {
	if !it.Resume(from.end) {
		return false
	}
	r.from = from
	if len(from.items) <= len(r.itemBuf) {
		r.Items = r.itemBuf[:0]
	} else {
		r.Items = itemTables.get(len(from.items) + 8)
	}
	for i, p := range from.items {
		typ := from.name(p.typ)
		r.Items = append(r.Items, Item{Raw: r.Body[p.start:p.end], Type: typ, Role: from.name(p.role)})
		switch typ {
		case TypeCompaction, TypeCompactionSummary:
			r.Compaction = i
		case TypeCompactionTrigger:
			if r.Trigger < 0 {
				r.Trigger = i
			}
		}
	}
	return true
}

// ParseChatFrom is ParseChatRequest resumed from from (nil: from the start), as
// ParseResponsesFrom is for Responses.
func ParseChatFrom(body []byte, from *Prefix) (*ChatRequest, error) { return parseChat(body, from) }

// Prefix is what the skim learnt of Body up to the end of the last message, for the next turn's
// skim; nil when there are no messages.
func (r *ChatRequest) Prefix() *Prefix {
	if len(r.Messages) == 0 || len(r.Body) > maxPrefixBody {
		return nil
	}
	p, known := r.from.extend(prefixChat, offset(r.Body, r.Messages[0].Raw), len(r.Messages))
	for _, m := range r.Messages[known:] {
		s := offset(r.Body, m.Raw)
		p.items = append(p.items, prefixItem{start: int32(s), end: int32(s + len(m.Raw)), role: p.nameID(m.Role)})
	}
	return p.done()
}

func (r *ChatRequest) resumeMessages(it *jsonx.Iter, from *Prefix) bool {
	if !it.Resume(from.end) {
		return false
	}
	r.from = from
	r.Messages = chatTables.get(len(from.items) + 8)
	for _, p := range from.items {
		r.Messages = append(r.Messages, ChatMessage{Raw: r.Body[p.start:p.end], Role: from.name(p.role)})
	}
	return true
}

// ParseMessagesFrom is ParseMessagesRequest resumed from from (nil: from the start), as
// ParseResponsesFrom is for Responses.
func ParseMessagesFrom(body []byte, from *Prefix) (*MessagesRequest, error) {
	return parseMessages(body, from)
}

// Prefix is what the skim learnt of Body up to the end of the last message (its role, its
// content's blocks or string), for the next turn's skim; nil when there are no messages.
func (r *MessagesRequest) Prefix() *Prefix {
	if len(r.Messages) == 0 || len(r.Body) > maxPrefixBody {
		return nil
	}
	p, known := r.from.extend(prefixMessages, offset(r.Body, r.Messages[0].Raw), len(r.Messages))
	for _, m := range r.Messages[known:] {
		s := offset(r.Body, m.Raw)
		pi := prefixItem{start: int32(s), end: int32(s + len(m.Raw)), role: p.nameID(m.Role),
			stringContent: m.StringContent}
		if m.StringContent {
			cs := offset(r.Body, m.text) // the content string's span (ContentBlocks)
			pi.cstart, pi.cend = int32(cs), int32(cs+len(m.text))
		} else {
			pi.bstart, pi.nblocks = int32(len(p.blocks)), int32(len(m.Blocks))
			for _, b := range m.Blocks {
				bs := offset(r.Body, b.Raw)
				p.blocks = append(p.blocks, prefixBlock{start: int32(bs), end: int32(bs + len(b.Raw)), typ: p.nameID(b.Type)})
			}
		}
		p.items = append(p.items, pi)
	}
	return p.done()
}

func (r *MessagesRequest) resumeMessages(it *jsonx.Iter, from *Prefix) bool {
	if !it.Resume(from.end) {
		return false
	}
	r.from = from
	r.Messages = messageTables.get(len(from.items) + 8)
	r.blockBuf = blockTables.get(len(from.blocks) + 16)
	for i, p := range from.items {
		m := Message{Raw: r.Body[p.start:p.end], Role: from.name(p.role), StringContent: p.stringContent}
		if p.stringContent {
			m.text = r.Body[p.cstart:p.cend]
		} else if p.nblocks > 0 {
			first := len(r.blockBuf)
			for j, b := range from.blocks[p.bstart : p.bstart+p.nblocks] {
				typ := from.name(b.typ)
				r.blockBuf = append(r.blockBuf, Block{Raw: r.Body[b.start:b.end], Type: typ})
				if typ == BlockCompaction {
					r.Blocks = append(r.Blocks, BlockRef{i, j})
				}
			}
			n := len(r.blockBuf)
			m.Blocks = r.blockBuf[first:n:n]
		}
		r.Messages = append(r.Messages, m)
	}
	return true
}
