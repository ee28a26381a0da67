package proxy

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// The in-flight body budget. compactd buffers the whole body of the requests it parses (the
// Responses and Messages routes): a few dozen concurrent multi-megabyte agent bodies would
// otherwise take the process past its container's memory limit, with nothing to stop the next
// one. The budget bounds the bytes of such bodies held at once, across all requests: a request
// that would go past it is answered at once, in its route's dialect, with nothing read or
// forwarded, and the client retries it a moment later. Bodies compactd does not parse
// (pass-through routes, GET) are streamed to the upstream through a fixed-size copy buffer and
// are not counted: they hold no more than that buffer whatever their size.

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

// inUse is the bytes reserved now (tests, metrics).
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
func (s *Server) budgetExceeded() *routeError {
	return &routeError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "server_overloaded",
		AnthropicType: "overloaded_error", AnthropicCode: "-", RetryAfter: budgetRetryAfter, Close: true,
		Message: fmt.Sprintf("compactd is holding its limit of %d bytes of request bodies in flight; retry shortly, or raise --max-inflight-body-bytes (COMPACTD_MAX_INFLIGHT_BODY_BYTES).", s.budget.limit)}
}

// buffersBody reports whether compactd reads the whole body of r before forwarding it: the
// POST routes it parses. Everything else is streamed.
func buffersBody(r *http.Request, canon string) bool {
	if r.Method != http.MethodPost {
		return false
	}
	switch canon {
	case "/v1/responses", "/v1/responses/compact", "/v1/messages", "/v1/messages/count_tokens":
		return true
	}
	return false
}

// reserveBody takes r's share of the budget before anything reads its body: its declared length,
// or, for a chunked body, the bytes as they are read (r.Body is wrapped). ok is false when the
// request has been answered (503 in dialect d). release must be called when the handler returns,
// once the body is no longer held.
func (s *Server) reserveBody(w http.ResponseWriter, r *http.Request, canon string, d dialect) (release func(), ok bool) {
	if s.budget == nil || r.Body == nil || r.Body == http.NoBody || !buffersBody(r, canon) {
		return func() {}, true
	}
	if r.ContentLength >= 0 {
		if !s.budget.reserve(r.ContentLength) {
			s.budgetRefused(w, d)
			return nil, false
		}
		n := r.ContentLength
		return func() { s.budget.release(n) }, true
	}
	cb := &budgetBody{rc: r.Body, b: s.budget}
	r.Body = cb
	return cb.releaseAll, true
}

func (s *Server) budgetRefused(w http.ResponseWriter, d dialect) {
	s.metrics.budgetRefused()
	s.budgetExceeded().write(w, d)
}

// budgetBody reserves a chunked body's bytes as they are read. A read that would go past the
// budget fails with errBudgetExceeded (the bytes it read are dropped with it).
type budgetBody struct {
	rc io.ReadCloser
	b  *bodyBudget

	mu       sync.Mutex
	held     int64
	exceeded bool
}

func (c *budgetBody) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	if n > 0 {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.exceeded || !c.b.reserve(int64(n)) {
			c.exceeded = true
			return 0, errBudgetExceeded
		}
		c.held += int64(n)
	}
	return n, err
}

func (c *budgetBody) Close() error { return c.rc.Close() }

func (c *budgetBody) releaseAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.b.release(c.held)
	c.held = 0
}
