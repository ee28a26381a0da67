package api

import "sync"

// A skim resumed from a Prefix still fills one entry per remembered item (Items, Messages and
// their Blocks) so that adapters walk one slice whatever the skim did; for a long conversation
// that is hundreds of entries, tens of KB, on every turn. tablePool keeps those tables between
// requests: a request's Release hands them back, and the next resumed skim fills one instead of
// allocating (and zeroing) a new one.

// tablePool is a pool of tables of T. A pooled table is all zeros, so it keeps no body alive.
type tablePool[T any] struct{ p sync.Pool }

// maxPooledTable bounds the tables kept: a conversation of more entries allocates its own.
const maxPooledTable = 1 << 16

var (
	itemTables    tablePool[Item]
	messageTables tablePool[Message]
	blockTables   tablePool[Block]
	chatTables    tablePool[ChatMessage]
)

// get is an empty table with room for n entries: a pooled one, or a new one with room to grow.
// A pooled table too small for n is let go.
func (tp *tablePool[T]) get(n int) []T {
	if v, ok := tp.p.Get().(*[]T); ok && cap(*v) >= n {
		return (*v)[:0]
	}
	return make([]T, 0, n+n/8+16)
}

// put keeps t's backing array for a later get, cleared first. The caller vouches that nothing
// refers to any part of it any more.
func (tp *tablePool[T]) put(t []T) {
	if cap(t) == 0 || cap(t) > maxPooledTable {
		return
	}
	t = t[:cap(t)]
	clear(t)
	t = t[:0]
	tp.p.Put(&t)
}

// Release hands r's tables back for the next request's skim. After it, r and everything taken
// from it (its Items) must not be used: the caller vouches that nothing refers to them, as when
// it reuses the body's buffer. The Prefix made from r (Prefix) holds none of them and stays good.
func (r *ResponsesRequest) Release() {
	if cap(r.table) > len(r.itemBuf) {
		itemTables.put(r.table)
	}
	*r = ResponsesRequest{}
}

// Release hands r's tables back, as ResponsesRequest.Release does.
func (r *MessagesRequest) Release() {
	messageTables.put(r.Messages)
	blockTables.put(r.blockBuf)
	*r = MessagesRequest{}
}

// Release hands r's tables back, as ResponsesRequest.Release does.
func (r *ChatRequest) Release() {
	chatTables.put(r.Messages)
	*r = ChatRequest{}
}
