package proxy

import "sync"

// bodyPool keeps the buffers of large request bodies for the next ones. Agents resend a growing
// history of megabytes every turn; a fresh buffer per request is a multi-megabyte allocation the
// runtime must zero, and the collector runs every few requests because of it (the profile of a
// 2 MB pass-through turn: 14% of compactd's CPU in memclr, 10% in the collector's marking).
//
// A buffer comes back only from a turn whose body nothing can still read: one forwarded as the
// client sent it (pass-through), whose upstream request body the transport has closed and never
// replayed. Every other turn leaves its buffer to the collector: the engine, the archive and the
// speculative summaries may hold sub-slices of a body long after its request. Idle buffers are
// bounded in count and bytes, and a buffer handed out has nothing of its last body past the new
// body's length (the body itself is overwritten by the read; of the slack, what the last body
// reached is cleared: a conversation's next body is longer than its last, so usually nothing).
type bodyPool struct {
	mu    sync.Mutex
	free  []idleBuf
	bytes int
}

// idleBuf is a kept buffer: buf[:cap] is its memory; past used it holds only zeros (a new buffer
// is zeroed by the runtime, and get clears what a body left past a shorter one's end).
type idleBuf struct {
	buf  []byte
	used int
}

const (
	// poolMinBody is the smallest body whose buffer is pooled: below it an allocation is cheap.
	poolMinBody = 64 << 10
	// poolMaxIdle and poolMaxIdleBytes bound what the pool keeps between requests.
	poolMaxIdle      = 16
	poolMaxIdleBytes = 48 << 20
	// poolSlack is the most room a new buffer gets past its body, for the conversation's next
	// request (a few KB to a few tens of KB longer); it counts in what the in-flight budget
	// reserves for a body (TestBudgetCoversWhatARouteHolds), so it stays small.
	poolSlack = 256 << 10
)

// get returns a buffer of length n (n >= poolMinBody) whose contents the caller overwrites: a
// kept one that fits without wasting more than half of it, else a new one with room to grow
// (the conversation's next request is a few KB longer).
func (p *bodyPool) get(n int) []byte {
	p.mu.Lock()
	for i := len(p.free) - 1; i >= 0; i-- {
		ib := p.free[i]
		if c := cap(ib.buf); c > n && c <= 2*n {
			p.free = append(p.free[:i], p.free[i+1:]...)
			p.bytes -= c
			p.mu.Unlock()
			b := ib.buf[:n]
			if ib.used > n {
				clear(b[n:ib.used]) // nothing of the last body past this one's end
			}
			return b
		}
	}
	p.mu.Unlock()
	return make([]byte, n, n+min(n/8, poolSlack))
}

// put keeps b for a later body, or drops it when the pool is full. b's length is how far its
// body reached: nothing may have written b's memory past len(b) (nothing reslices a body
// beyond its length; an append past it returns the longer slice, and that is what comes back).
func (p *bodyPool) put(b []byte) {
	if cap(b) < poolMinBody {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) == poolMaxIdle || p.bytes+cap(b) > poolMaxIdleBytes {
		return
	}
	p.free = append(p.free, idleBuf{buf: b[:0], used: len(b)})
	p.bytes += cap(b)
}
