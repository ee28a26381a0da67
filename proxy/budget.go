package proxy

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/internal/fault"
)

// The in-flight body budget. compactd buffers the whole body of the requests it parses (the
// Responses, compact, Messages, count_tokens and Chat Completions routes): a few dozen
// concurrent multi-megabyte agent bodies would otherwise take the process past its container's
// memory limit, with nothing to stop the next one. The budget bounds the bytes such requests
// hold at once, across all requests: a request that would go past it is answered at once, in its
// route's dialect, with nothing read or forwarded, and the client retries it a moment later.
// Bodies compactd does not parse (pass-through routes, GET) are streamed to the upstream through
// a fixed-size copy buffer and are not counted: they hold no more than that buffer whatever their
// size.
//
// A request reserves what it holds, not only its body: when it is read, the body and what the
// skim allocates beside it (reserved); one body more before compactd builds a body-sized one
// beside it (a handoff expanded, context_management taken out, a recall round's request:
// holdRebuild); two more before a compaction, whose transcript and summariser requests are the
// conversation's text again (holdCompaction; the compact route reserves them with its body).
// TestBudgetCoversWhatARouteHolds measures it.

// DefaultInflightBodyFraction is the share of the runtime's memory limit the in-flight body
// budget gets by default. A buffered body is held more than once while a turn is rewritten (the
// body, the skim's items, the rewritten body on its way out), so a quarter keeps the worst case
// inside the limit with room for everything else.
const DefaultInflightBodyFraction = 4

// DefaultInflightBodyBytes is the budget when the runtime has no memory limit (no GOMEMLIMIT,
// --memory-limit or cgroup limit): 1 GiB, about thirty 32 MiB bodies.
const DefaultInflightBodyBytes = 1 << 30

// budgetRetryAfter is the Retry-After of a refusal: bodies in flight are turns on their way
// upstream, which free their share within a second or two.
const budgetRetryAfter = 2 * time.Second

// InflightBodyBytesFor is the default budget under a memory limit (math.MaxInt64 or <= 0: none):
// a quarter of it, but never less than maxBody (one body of the largest allowed size always
// fits) .
func InflightBodyBytesFor(memLimit, maxBody int64) int64 {
	if memLimit <= 0 || memLimit == math.MaxInt64 {
		return max(DefaultInflightBodyBytes, maxBody)
	}
	return max(memLimit/DefaultInflightBodyFraction, maxBody)
}

// defaultInflightBodyBytes is the budget for the runtime's current memory limit.
func defaultInflightBodyBytes(maxBody int64) int64 {
	return InflightBodyBytesFor(debug.SetMemoryLimit(-1), maxBody)
}

// bodyBudget counts the bytes of buffered request bodies in flight. A nil *bodyBudget is no
// budget: every reservation succeeds.
type bodyBudget struct {
	limit int64
	used  atomic.Int64
}

func newBodyBudget(limit int64) *bodyBudget {
	if limit <= 0 {
		return nil
	}
	return &bodyBudget{limit: limit}
}

// reserve takes n bytes of the budget, or nothing and false when they do not fit.
func (b *bodyBudget) reserve(n int64) bool {
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

func (b *bodyBudget) release(n int64) {
	if b != nil && n > 0 {
		b.used.Add(-n)
	}
}

// inUse is the bytes reserved now (Server.Stats, for the console; tests).
func (b *bodyBudget) inUse() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// errBudgetExceeded is what reading a chunked body returns once its bytes no longer fit in the
// budget; the handler answers it with budgetExceeded.
var errBudgetExceeded = errors.New("compactd: too many request bytes in flight")

// budgetExceeded is the answer past the budget: 503 with Retry-After, not 429. The condition is
// compactd's own load, not anything this client did (429 says "you are sending too much", and
// with tenants on it is the per-tenant rate limit's answer); both SDKs retry a 503 and honour its
// Retry-After. Anthropic's envelope says overloaded_error, the type its own API uses for load.
func (s *Server) budgetExceeded() *fault.Fault {
	return &fault.Fault{Kind: fault.Overloaded, Code: fault.CodeServerOverloaded, RetryAfter: budgetRetryAfter, Close: true,
		Message: fmt.Sprintf("compactd is holding its limit of %d bytes of request bodies in flight; retry shortly, or raise --max-inflight-body-bytes (COMPACTD_MAX_INFLIGHT_BODY_BYTES).", s.budget.limit)}
}

// buffersBody reports whether compactd reads the whole body of r before forwarding it: the
// POST routes it parses. Everything else is streamed.
func buffersBody(r *http.Request, canon string) bool {
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

// reserved is what a request on canon reserves for a body of n bytes when it is read: the body,
// and what its skim allocates beside it as it runs (the item, message and block slices, and the
// strings it keeps: measured, 0.15–0.18 of a Responses or Chat Completions agent session and
// 0.32 of a Messages one, TestBudgetCoversWhatARouteHolds), which arrives with the body and which
// the collector has to find room for while every other body is held; the compact route compacts,
// and reserves the compaction's bodies too.
func reserved(canon string, n int64) int64 {
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

// hold is one request's share of the budget: its body (declared, or as it is read) and what the
// handler reserved beside it. The gate releases it all when the handler returns.
type hold struct {
	b    *bodyBudget
	body int64 // the body's bytes: declared, else read so far

	mu    sync.Mutex
	held  int64
	extra map[string]bool // the reservations made beside the body (holdCompaction, holdRebuild)
}

// more reserves n bytes more once per kind; false when they do not fit. One request never holds
// more than the whole budget: one that would reserves all of it, and runs alone rather than never.
func (h *hold) more(kind string, n int64) bool {
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

func (h *hold) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.b.release(h.held)
	h.held = 0
}

// reserveBody takes r's share of the budget before anything reads its body: its declared length
// (times bodiesHeld), or, for a chunked body, the bytes as they are read (r.Body is wrapped). ok
// is false when the request has been answered (503 in dialect d). release must be called when
// the handler returns, once nothing of the request is held.
func (s *Server) reserveBody(w http.ResponseWriter, r *http.Request, canon string, d dialect) (release func(), ok bool) {
	if s.budget == nil || r.Body == nil || r.Body == http.NoBody || !buffersBody(r, canon) {
		return func() {}, true
	}
	h := &hold{b: s.budget}
	if st := stateFrom(r.Context()); st != nil {
		st.hold = h
	}
	if r.ContentLength >= 0 {
		// Past the whole budget (a compact body over a third of it): all of it, to run alone.
		n := min(reserved(canon, r.ContentLength), max(s.budget.limit, r.ContentLength))
		if !s.budget.reserve(n) {
			s.budgetRefused(w, d)
			return nil, false
		}
		h.body, h.held = r.ContentLength, n
		if canon == "/v1/responses/compact" {
			h.extra = map[string]bool{"compaction": true} // reserved with the body
		}
		return h.release, true
	}
	if canon == "/v1/responses/compact" {
		h.extra = map[string]bool{"compaction": true} // reserved as the body is read
	}
	r.Body = &budgetBody{rc: r.Body, h: h, canon: canon}
	return h.release, true
}

// holdMore reserves, once per kind, bodies times the request's body beside it; false (with
// nothing reserved) when that does not fit. A request outside the budget always fits.
func (s *Server) holdMore(r *http.Request, kind string, bodies int64) bool {
	st := stateFrom(r.Context())
	if s.budget == nil || st == nil || st.hold == nil {
		return true
	}
	h := st.hold
	h.mu.Lock()
	n := h.body * bodies
	h.mu.Unlock()
	return h.more(kind, n)
}

// holdCompaction reserves what a compaction holds beside the body, before it starts; false when
// it does not fit, and the turn is to be refused (budgetExceeded).
func (s *Server) holdCompaction(r *http.Request) bool {
	return s.holdMore(r, "compaction", compactionBodies)
}

// holdRebuild reserves one body more before compactd builds a body-sized one beside the client's
// (not needed after a compaction, whose rebuilt body is small and whose reservation is larger);
// false when it does not fit, and nothing has been sent: the caller answers budgetExceeded in
// its dialect.
func (s *Server) holdRebuild(r *http.Request) bool {
	return s.holdMore(r, "rebuild", 1)
}

func (s *Server) budgetRefused(w http.ResponseWriter, d dialect) {
	s.metrics.BudgetRefused()
	writeFault(w, d, s.budgetExceeded())
}

// budgetBody reserves a chunked body's bytes (and what its route reserves beside them) as they are read. A
// read that would go past the budget fails with errBudgetExceeded (the bytes it read are dropped
// with it).
type budgetBody struct {
	rc    io.ReadCloser
	h     *hold
	canon string

	exceeded bool // Read is not called concurrently
}

func (c *budgetBody) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	if n > 0 {
		h := c.h
		h.mu.Lock()
		defer h.mu.Unlock()
		// Past the whole budget (a compact body over a third of it): all of it, to run alone.
		body := h.body + int64(n)
		add := max(0, min(reserved(c.canon, body), max(h.b.limit, body))-h.held)
		if c.exceeded || !h.b.reserve(add) {
			c.exceeded = true
			return 0, errBudgetExceeded
		}
		h.body += int64(n)
		h.held += add
	}
	return n, err
}

func (c *budgetBody) Close() error { return c.rc.Close() }
