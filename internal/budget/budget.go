// Package budget is the in-flight body budget: a bound on the bytes of buffered request bodies
// compactd holds at once, across all requests.
//
// compactd buffers the whole body of the requests it parses (the Responses, compact, Messages,
// count_tokens and Chat Completions routes): a few dozen concurrent multi-megabyte agent bodies
// would otherwise take the process past its container's memory limit, with nothing to stop the
// next one. The budget bounds the bytes such requests hold at once: a request that would go past
// it is answered at once, in its route's dialect, with nothing read or forwarded, and the client
// retries it a moment later (the answer is the caller's: this package only says no). Bodies
// compactd does not parse (pass-through routes, GET) are streamed to the upstream through a
// fixed-size copy buffer and are not counted: they hold no more than that buffer whatever their
// size.
//
// A request reserves what it holds, not only its body: when it is read, the body and what the
// skim allocates beside it (Reserved); one body more before compactd builds a body-sized one
// beside it (a handoff expanded, context_management taken out, a recall round's request:
// Hold.Rebuild); two more before a compaction, whose transcript and summariser requests are the
// conversation's text again (Hold.Compaction; the compact route reserves them with its body).
// proxy's TestBudgetCoversWhatARouteHolds measures it.
package budget

import (
	"errors"
	"io"
	"math"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultFraction is the share of the runtime's memory limit the budget gets by default: one
// DefaultFraction-th, a quarter. A buffered body is held more than once while a turn is rewritten (the
// body, the skim's items, the rewritten body on its way out), so a quarter keeps the worst case
// inside the limit with room for everything else.
const DefaultFraction = 4

// DefaultBytes is the budget when the runtime has no memory limit (no GOMEMLIMIT,
// --memory-limit or cgroup limit): 1 GiB, about thirty 32 MiB bodies.
const DefaultBytes = 1 << 30

// RetryAfter is the Retry-After of a refusal: bodies in flight are turns on their way upstream,
// which free their share within a second or two.
const RetryAfter = 2 * time.Second

// BytesFor is the default budget under a memory limit (math.MaxInt64 or <= 0: none): a quarter
// of it, but never less than maxBody (one body of the largest allowed size always fits) .
func BytesFor(memLimit, maxBody int64) int64 {
	if memLimit <= 0 || memLimit == math.MaxInt64 {
		return max(DefaultBytes, maxBody)
	}
	return max(memLimit/DefaultFraction, maxBody)
}

// Default is the default budget for the runtime's current memory limit (BytesFor).
func Default(maxBody int64) int64 {
	return BytesFor(debug.SetMemoryLimit(-1), maxBody)
}

// ErrExceeded is what reading a chunked body (Budget.Reserve wraps it) returns once its bytes no
// longer fit in the budget; the bytes of that read are dropped with it. The handler answers it
// as it answers a refused Reserve.
var ErrExceeded = errors.New("compactd: too many request bytes in flight")

// Budget counts the bytes of buffered request bodies in flight. It is safe for concurrent use.
// A nil *Budget is no budget: every reservation succeeds.
type Budget struct {
	limit int64
	used  atomic.Int64
}

// New is a budget of limit bytes; nil (no budget) when limit <= 0.
func New(limit int64) *Budget {
	if limit <= 0 {
		return nil
	}
	return &Budget{limit: limit}
}

// Limit is the budget's size in bytes (0 for no budget).
func (b *Budget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// InUse is the bytes reserved now (0 for no budget).
func (b *Budget) InUse() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// reserve takes n bytes of the budget, or nothing and false when they do not fit.
func (b *Budget) reserve(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	for {
		u := b.used.Load()
		if u+n > b.limit || u+n < u {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (b *Budget) release(n int64) {
	if b != nil && n > 0 {
		b.used.Add(-n)
	}
}

// Buffers reports whether compactd reads the whole body of r, whose canonical path is canon,
// before forwarding it: the POST routes it parses. Everything else is streamed.
func Buffers(r *http.Request, canon string) bool {
	if r.Method != http.MethodPost {
		return false
	}
	switch canon {
	case "/v1/responses", "/v1/responses/compact", "/v1/messages", "/v1/messages/count_tokens", "/v1/chat/completions":
		return true
	}
	return false
}

// compactionBodies is what a compaction holds beside the request's body, in bodies: the
// transcript rendered for the summariser and the request carrying a chunk of it.
const compactionBodies = 2

// Reserved is what a request on canon reserves for a body of n bytes when it is read: the body,
// and what its skim allocates beside it as it runs (the item, message and block slices, and the
// strings it keeps: measured, 0.15–0.18 of a Responses or Chat Completions agent session and
// 0.32 of a Messages one, proxy's TestBudgetCoversWhatARouteHolds), which arrives with the body
// and which the collector has to find room for while every other body is held; the compact route
// compacts, and reserves the compaction's bodies too. It saturates at math.MaxInt64.
func Reserved(canon string, n int64) int64 {
	share := n / 4 // the skim's
	if strings.HasPrefix(canon, "/v1/messages") {
		share = n / 2
	}
	if canon == "/v1/responses/compact" {
		share += compactionBodies * n
	}
	if n+share < n {
		return math.MaxInt64
	}
	return n + share
}

// Hold is one request's share of the budget: its body (declared, or as it is read) and what the
// handler reserved beside it. It is safe for concurrent use. A nil *Hold is a request outside
// the budget: every reservation fits.
type Hold struct {
	b    *Budget
	body int64 // the body's bytes: declared, else read so far

	mu    sync.Mutex
	held  int64
	extra map[string]bool // the reservations made beside the body (Compaction, Rebuild)
}

// Reserve takes the share of r, whose canonical path is canon, before anything reads its body:
// its declared length (Reserved), or, for a chunked body, the bytes as they are read (r.Body is
// replaced by a reader that reserves them, and fails with ErrExceeded past the budget). A request
// that would reserve more than the whole budget (a compact body over a third of it) reserves all
// of it, to run alone rather than never.
//
// ok is false, with nothing reserved, when the declared body does not fit: the caller answers
// the request (503 with RetryAfter) and reads nothing of it. Otherwise h is the request's share,
// nil when the request is outside the budget (no budget, no body, or a route that streams its
// body: Buffers); h.Release must be called once nothing of the request is held.
func (b *Budget) Reserve(r *http.Request, canon string) (h *Hold, ok bool) {
	if b == nil || r.Body == nil || r.Body == http.NoBody || !Buffers(r, canon) {
		return nil, true
	}
	h = &Hold{b: b}
	if r.ContentLength >= 0 {
		// Past the whole budget (a compact body over a third of it): all of it, to run alone.
		n := min(Reserved(canon, r.ContentLength), max(b.limit, r.ContentLength))
		if !b.reserve(n) {
			return nil, false
		}
		h.body, h.held = r.ContentLength, n
		if canon == "/v1/responses/compact" {
			h.extra = map[string]bool{"compaction": true} // reserved with the body
		}
		return h, true
	}
	if canon == "/v1/responses/compact" {
		h.extra = map[string]bool{"compaction": true} // reserved as the body is read
	}
	r.Body = &body{rc: r.Body, h: h, canon: canon}
	return h, true
}

// Compaction reserves what a compaction holds beside the body, before it starts; false (with
// nothing reserved) when it does not fit, and the turn is to be refused. Once per request: the
// compact route's was reserved with its body.
func (h *Hold) Compaction() bool {
	return h.beside("compaction", compactionBodies)
}

// Rebuild reserves one body more before compactd builds a body-sized one beside the client's
// (not needed after a compaction, whose rebuilt body is small and whose reservation is larger);
// false (with nothing reserved) when it does not fit, and the caller refuses the turn before
// anything is sent. Once per request.
func (h *Hold) Rebuild() bool {
	return h.beside("rebuild", 1)
}

// beside reserves, once per kind, bodies times the request's body beside it.
func (h *Hold) beside(kind string, bodies int64) bool {
	if h == nil {
		return true
	}
	h.mu.Lock()
	n := h.body * bodies
	h.mu.Unlock()
	return h.more(kind, n)
}

// more reserves n bytes more once per kind; false when they do not fit. One request never holds
// more than the whole budget: one that would reserves all of it, and runs alone rather than never.
func (h *Hold) more(kind string, n int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.extra[kind] {
		return true
	}
	n = max(0, min(n, h.b.limit-h.held))
	if !h.b.reserve(n) {
		return false
	}
	if h.extra == nil {
		h.extra = map[string]bool{}
	}
	h.extra[kind], h.held = true, h.held+n
	return true
}

// Release gives back everything the request holds. Safe to call on a nil *Hold.
func (h *Hold) Release() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.b.release(h.held)
	h.held = 0
}

// body reserves a chunked body's bytes (and what its route reserves beside them) as they are
// read. A read that would go past the budget fails with ErrExceeded (the bytes it read are
// dropped with it).
type body struct {
	rc    io.ReadCloser
	h     *Hold
	canon string

	exceeded bool // Read is not called concurrently
}

func (c *body) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	if n > 0 {
		h := c.h
		h.mu.Lock()
		defer h.mu.Unlock()
		// Past the whole budget (a compact body over a third of it): all of it, to run alone.
		body := h.body + int64(n)
		add := max(0, min(Reserved(c.canon, body), max(h.b.limit, body))-h.held)
		if c.exceeded || !h.b.reserve(add) {
			c.exceeded = true
			return 0, ErrExceeded
		}
		h.body += int64(n)
		h.held += add
	}
	return n, err
}

func (c *body) Close() error { return c.rc.Close() }
