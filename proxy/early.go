package proxy

import (
	"context"
	"errors"
	"hash/maphash"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// Early forwarding. compactd decides a turn from the whole body, so a bare store-and-forward
// proxy would make the upstream wait for compactd to read all of a 2 MB history before its
// first byte moves on: the client's upload and compactd's upload one after the other, where a
// streaming proxy overlaps them. When the same client's last turn on the route was forwarded as
// it came (the steady state of an agent's conversation), a large body is instead sent upstream
// while it arrives, and everything but its last byte goes ahead of the decision:
//
//   - the upstream cannot act on a request it has not received in full, so what it acts on is
//     still what compactd decided from the whole body: the last byte is sent only once the
//     pipeline decides to forward the body exactly as it came (commit);
//   - any other decision (the body rebuilt, refused, answered by compactd, a rewriting answer)
//     aborts the request: its context is cancelled, the transport closes the connection, and
//     the upstream has an incomplete request, which no HTTP server acts on; the turn then goes
//     on as if nothing had been sent;
//   - the response of the early request reaches the client only after a commit: until then its
//     writes wait, and after an abort they go nowhere (gateWriter), so the turn's own answer is
//     the only one the client ever sees.
//
// The bytes sent are the buffer the pipeline reads and decides on, so nothing but the timing
// differs from a forward after the decision.

// SuggestedEarlyForwardBytes is the threshold to turn early forwarding on with: below it a body
// arrives in well under a millisecond on a LAN, and the early request's goroutine and wake-ups
// cost more than the overlap saves. It is off by default: measured side by side on loopback
// (BENCHMARKS.md, issue 27) it took 0.1–0.4 ms off a 2 MB turn's latency and cost 0.1–0.8 ms of
// CPU, where the upload it overlaps is short; over a slow client link the overlap is worth more.
const SuggestedEarlyForwardBytes = 256 << 10

// earlyBatch is how far the client's bytes get ahead of the early request before they are
// written upstream: one write per 128 KiB rather than one per arriving segment.
const earlyBatch = 128 << 10

var errEarlyAborted = errors.New("compactd: the early forward of this body was withdrawn")

// early is the early forward of one request body.
type early struct {
	mu       sync.Mutex
	cond     sync.Cond
	buf      []byte // the body's buffer, len = declared length; filled up to avail
	avail    int
	release  bool // the decision: the body goes as it came; its last byte may go
	aborted  bool
	inflight int // writes of buf to a connection in progress (outside mu)
	// wake is how much of the body must have arrived for a waiting reader of it to go on: the
	// client's reads signal only then (a 2 MB body arrives in dozens of reads, and a wake-up of
	// the transport's writer per read cost more CPU than the batching saved).
	wake int

	decided chan struct{} // closed at commit or abort
	done    chan struct{} // closed when the early request's handler has returned
	cancel  context.CancelFunc
	first   *earlyBody // the reader the transport was given first (done, for the body pool)
	flight  atomic.Pointer[flight]
	gw      *gateWriter
}

// earlyCtx is the early request's context: the client's, cancelled by an abort, answering
// flightKey with the turn's flight once committed (rewriteTo asks before the decision, and gets
// nil: a turn that commits never rewrites its answer, so the Accept-Encoding it keeps is right).
type earlyCtx struct {
	context.Context
	e *early
}

type earlyKey struct{}

func (c earlyCtx) Value(key any) any {
	switch key {
	case earlyKey{}:
		return c.e
	case flightKey{}:
		if f := c.e.flight.Load(); f != nil {
			return f
		}
		return nil
	}
	return c.Context.Value(key)
}

// earlyOf is the early forward whose request ctx belongs to, nil for any other request.
func earlyOf(ctx context.Context) *early {
	e, _ := ctx.Value(earlyKey{}).(*early)
	return e
}

// startEarly begins the early forward of r's body, to be read into buf, through rp.
func startEarly(w http.ResponseWriter, r *http.Request, buf []byte, rp http.Handler) *early {
	e := &early{buf: buf, decided: make(chan struct{}), done: make(chan struct{})}
	e.cond.L = &e.mu
	ctx, cancel := context.WithCancel(r.Context())
	e.cancel = cancel
	out := r.WithContext(earlyCtx{ctx, e})
	e.first = &earlyBody{e: e}
	out.Body, out.ContentLength = e.first, int64(len(buf))
	out.GetBody = func() (io.ReadCloser, error) {
		// A retry on a fresh connection reads the same bytes from the start, as they arrive.
		e.first.replayed.Store(true)
		return &earlyBody{e: e}, nil
	}
	e.gw = &gateWriter{w: w, e: e, h: http.Header{}}
	if st := stateFrom(r.Context()); st != nil {
		st.outBody, st.outLen = e.first, int64(len(buf)) // the transport writes it in batches (bulkConn)
	}
	go func() {
		defer close(e.done)
		rp.ServeHTTP(e.gw, out)
	}()
	return e
}

// filled says the first n bytes of the buffer have arrived.
func (e *early) filled(n int) {
	e.mu.Lock()
	e.avail = n
	signal := n >= e.wake || n == len(e.buf)
	e.mu.Unlock()
	if signal {
		e.cond.Broadcast()
	}
}

// commit lets the body's last byte go, with f the turn's flight (nil: none), and waits until the
// early request has been answered to the client. It reports false, and does nothing, once the
// early request was withdrawn.
func (e *early) commit(f *flight) bool {
	if f != nil {
		e.flight.Store(f)
	}
	e.mu.Lock()
	if e.aborted {
		e.mu.Unlock()
		return false
	}
	e.release = true
	e.mu.Unlock()
	e.gw.pass = true
	close(e.decided)
	e.cond.Broadcast()
	<-e.done
	return true
}

// abort withdraws the early request and returns once nothing of it reads the buffer any more.
// It is safe to call more than once, and after a commit (then it does nothing).
func (e *early) abort() {
	if e == nil {
		return
	}
	e.mu.Lock()
	if e.release || e.aborted {
		e.mu.Unlock()
		return
	}
	e.aborted = true
	e.mu.Unlock()
	close(e.decided)
	e.cond.Broadcast()
	e.cancel()
	<-e.done
	e.mu.Lock()
	for e.inflight > 0 {
		e.cond.Wait() // a write of the buffer still in the kernel; the cancelled connection ends it
	}
	e.mu.Unlock()
}

// wasAborted reports whether the early request was withdrawn.
func (e *early) wasAborted() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.aborted
}

// limit is how much of the buffer may go upstream now (mu held).
func (e *early) limit() int {
	if e.release {
		return len(e.buf)
	}
	return min(e.avail, len(e.buf)-1)
}

// earlyBody is the early request's body: the buffer as it fills, up to its last byte before the
// decision.
type earlyBody struct {
	e                 *early
	off               int
	drained, replayed atomic.Bool
}

func (b *earlyBody) done() bool { return b.drained.Load() && !b.replayed.Load() }

func (*earlyBody) Close() error { return nil }

// next waits for bytes past b.off that may go (at least min(want, what is left) of them unless
// the client's body is complete or the decision taken), and returns their span (mu held on
// return); ok is false after an abort.
func (b *earlyBody) next(want int) (from, to int, ok bool) {
	e := b.e
	for {
		if e.aborted {
			return 0, 0, false
		}
		lim := e.limit()
		if n := lim - b.off; n > 0 && (n >= want || e.avail == len(e.buf) || e.release) {
			return b.off, lim, true
		}
		if b.off == len(e.buf) {
			return b.off, b.off, true
		}
		e.wake = b.off + want // commit and abort broadcast whatever wake says
		e.cond.Wait()
	}
}

func (b *earlyBody) Read(p []byte) (int, error) {
	e := b.e
	e.mu.Lock()
	from, to, ok := b.next(1)
	if !ok {
		e.mu.Unlock()
		return 0, errEarlyAborted
	}
	n := copy(p, e.buf[from:to])
	b.off += n
	e.mu.Unlock()
	if b.off == len(e.buf) {
		b.drained.Store(true)
		if n == 0 {
			return 0, io.EOF
		}
	}
	return n, nil
}

// WriteBodyTo writes up to n bytes straight from the buffer as they may go, in batches
// (bulkConn).
func (b *earlyBody) WriteBodyTo(w io.Writer, n int64) (int64, error) {
	e := b.e
	var total int64
	for total < n {
		e.mu.Lock()
		from, to, ok := b.next(earlyBatch)
		if !ok {
			e.mu.Unlock()
			return total, errEarlyAborted
		}
		if from == to { // all of it sent
			e.mu.Unlock()
			break
		}
		to = from + int(min(int64(to-from), n-total))
		e.inflight++
		e.mu.Unlock()
		m, err := w.Write(e.buf[from:to])
		e.mu.Lock()
		e.inflight--
		b.off += m
		e.mu.Unlock()
		e.cond.Broadcast()
		total += int64(m)
		if err != nil {
			return total, err
		}
	}
	if b.off == len(e.buf) {
		b.drained.Store(true)
	}
	return total, nil
}

// gateWriter is the early request's ResponseWriter: its writes wait for the decision, then go
// to the client's writer after a commit and nowhere after an abort. Until the decision its
// headers are its own (the client's writer may be answering the turn meanwhile); after a commit
// they are the client writer's, so trailers the ReverseProxy sets late reach it too.
type gateWriter struct {
	w       http.ResponseWriter
	e       *early
	h       http.Header
	pass    bool // set before e.decided is closed
	started bool // WriteHeader has been passed on
}

// wait blocks until the decision and reports whether the writes pass.
func (g *gateWriter) wait() bool {
	<-g.e.decided
	return g.pass
}

func (g *gateWriter) Header() http.Header {
	select {
	case <-g.e.decided:
		if g.pass {
			if !g.started {
				g.merge()
			}
			return g.w.Header()
		}
	default:
	}
	return g.h
}

// merge moves what was set on the gate's own headers to the client writer's.
func (g *gateWriter) merge() {
	if len(g.h) == 0 {
		return
	}
	dst := g.w.Header()
	for k, v := range g.h {
		dst[k] = v
	}
	clear(g.h)
}

func (g *gateWriter) WriteHeader(code int) {
	if !g.wait() {
		return
	}
	g.merge()
	if code >= 200 {
		g.started = true
	}
	g.w.WriteHeader(code)
}

func (g *gateWriter) Write(p []byte) (int, error) {
	if !g.wait() {
		return 0, errEarlyAborted
	}
	if !g.started {
		g.merge()
		g.started = true
	}
	return g.w.Write(p)
}

// FlushError is what http.ResponseController finds: the ReverseProxy flushes event streams.
func (g *gateWriter) FlushError() error {
	if !g.wait() {
		return errEarlyAborted
	}
	return http.NewResponseController(g.w).Flush()
}

// asSentTable remembers, per API and client (the skim scope, hashed into a fixed table), whether
// the client's last turn was forwarded exactly as it came: the prediction that starts an early
// forward. A collision costs only a wrong guess (an aborted early request, or none).
type asSentTable struct {
	seed  maphash.Seed
	slots [4096]atomic.Bool
}

func newAsSentTable() *asSentTable { return &asSentTable{seed: maphash.MakeSeed()} }

func (t *asSentTable) slot(scope string) *atomic.Bool {
	return &t.slots[maphash.String(t.seed, scope)%uint64(len(t.slots))]
}
