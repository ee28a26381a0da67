// Package h1 is compactd's client for plain-HTTP upstreams: an http.RoundTripper that does a
// round trip on the caller's goroutine, over a pool of HTTP/1.1 connections.
//
// Why not net/http's Transport: it gives every connection a reading and a writing goroutine,
// and a round trip is handed between them and the caller over channels: the request to the
// writer, the response from the reader, the end of the body back to the reader. Each hand-off
// that wakes an idle thread is a futex wake and a context switch, and on a proxy's small turns
// those are most of what it costs. Here the caller writes the request and reads the answer itself
// (BENCHMARKS.md, issue 27: a tenth to a fifth of compactd's CPU a 2 KB turn).
//
// What it keeps of net/http: the request is written as (*http.Request).Write writes it, with the
// checks the Transport makes first (method, header names and values, Host, no control bytes in
// the request target), and answers are read by http.ReadResponse, with the Transport's bound on
// response headers. What the reader goroutine did besides reading, it does otherwise:
//
//   - a connection the upstream closed while it sat idle is found before reuse by a
//     non-blocking peek (peek_unix.go), not by a goroutine blocked on it;
//   - cancellation (the request's context) closes the connection, which ends a write or read
//     in progress;
//   - the wait for response headers is a read deadline (ResponseHeaderTimeout).
//
// What it does not do, it leaves to the fallback, the http.Transport it was made from, whose
// settings it reads: https (TLS, and HTTP/2 where the upstream offers it), requests that go
// through a proxy (the Transport's Proxy), protocol upgrades, bodies that stream from
// elsewhere rather than sit in memory, and everything when the Transport caps its connections
// a host (MaxConnsPerHost), which this pool does not (see Direct).
package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Transport is the round tripper. Make it with New; it is safe for concurrent use.
type Transport struct {
	std *http.Transport // the fallback, and the settings (dial, proxy, idle pool, timeouts)

	mu     sync.Mutex
	hosts  map[string]*hostPool // idle connections by "host:port"
	nidle  int
	sweep  *time.Timer // closes connections idle past IdleConnTimeout; nil when none is set
	closed bool        // CloseIdleConnections was called: nothing more is pooled until the next dial
}

// New returns a Transport that serves plain-HTTP requests itself and passes every other request
// to std, whose settings it reads on every request: DialContext (or the older Dial), Proxy,
// MaxConnsPerHost, MaxIdleConns, MaxIdleConnsPerHost, IdleConnTimeout, ResponseHeaderTimeout,
// MaxResponseHeaderBytes and DisableKeepAlives.
func New(std *http.Transport) *Transport {
	return &Transport{std: std, hosts: map[string]*hostPool{}}
}

// Fallback is the http.Transport that serves what this Transport does not.
func (t *Transport) Fallback() *http.Transport { return t.std }

// hostPool is the idle connections to one address, the most recently used last.
type hostPool struct{ idle []*conn }

// conn is one upstream connection.
type conn struct {
	t    *Transport
	key  string
	nc   net.Conn
	peek *peeker     // the liveness peek; nil where there is none
	lr   limitReader // nc, read under the response header limit while headers are read
	br   *bufio.Reader
	cw   countWriter // nc, counting what it took of a request
	// reused: the connection served a request before this one (a failure before any answer
	// may then be the upstream having closed it while idle, and the request may be retried).
	reused bool
	idleAt time.Time
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.Direct(req) {
		return t.std.RoundTrip(req)
	}
	tg, err := validate(req)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	ctx := req.Context()
	key := canonicalAddr(req)
	for attempt := 0; ; attempt++ {
		c, err := t.getConn(ctx, key)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, retry, err := c.roundTrip(req, tg)
		if err == nil {
			return resp, nil
		}
		if retry && attempt == 0 && ctx.Err() == nil {
			if next, ok := rewind(req); ok {
				req = next
				continue
			}
		}
		closeBody(req)
		return nil, err
	}
}

// Direct reports whether RoundTrip serves req itself rather than through the fallback: a plain
// http:// request with no body or one held in memory (a BodyWriter), going straight to its host.
//
// A body that streams from elsewhere (a client's upload passed through) goes to the fallback:
// this Transport writes a request whole before it reads the answer, and an upstream may answer
// while such a body still streams, to a client that sends the rest only once it has the
// answer's headers (full duplex; golang/go#40747). net/http's Transport reads and writes at once.
func (t *Transport) Direct(req *http.Request) bool {
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		return false
	}
	if t.std.MaxConnsPerHost > 0 {
		return false // a cap on connections a host is the fallback's: this pool keeps no count
	}
	if req.Body != nil && req.Body != http.NoBody {
		if _, ok := req.Body.(BodyWriter); !ok {
			return false
		}
	}
	if req.Method == http.MethodConnect || req.Header.Get("Upgrade") != "" {
		return false // a protocol switch: the Transport hands back the connection itself
	}
	if t.std.Proxy != nil {
		if u, err := t.std.Proxy(req); err != nil || u != nil {
			return false // through a proxy, or the proxy setting fails: the Transport's to say
		}
	}
	return true
}

// CloseIdleConnections closes the idle connections, here and in the fallback.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	var idle []*conn
	for k, p := range t.hosts {
		idle = append(idle, p.idle...)
		delete(t.hosts, k)
	}
	t.nidle = 0
	t.closed = true
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
	t.std.CloseIdleConnections()
}

// getConn returns an idle connection to key that is still open, or dials one.
func (t *Transport) getConn(ctx context.Context, key string) (*conn, error) {
	now := time.Now()
	for {
		c := t.popIdle(key)
		if c == nil {
			break
		}
		if d := t.std.IdleConnTimeout; d > 0 && now.Sub(c.idleAt) >= d || !c.peek.alive() {
			c.nc.Close()
			continue
		}
		c.reused = true
		return c, nil
	}
	dial := t.std.DialContext
	//lint:ignore SA1019 the older Dial is honoured, as net/http's Transport honours it
	if old := t.std.Dial; dial == nil && old != nil {
		dial = func(_ context.Context, network, addr string) (net.Conn, error) { return old(network, addr) }
	}
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	nc, err := dial(ctx, "tcp", key)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	c := &conn{t: t, key: key, nc: nc, peek: newPeeker(nc)}
	c.lr.r, c.cw.w = nc, nc
	c.lr.n = math.MaxInt64
	c.br = bufio.NewReaderSize(&c.lr, readBufferSize)
	t.mu.Lock()
	t.closed = false
	t.mu.Unlock()
	return c, nil
}

// readBufferSize is the buffer an answer is read through, as net/http's Transport has it.
const readBufferSize = 4 << 10

func (t *Transport) popIdle(key string) *conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.hosts[key]
	if p == nil || len(p.idle) == 0 {
		return nil
	}
	c := p.idle[len(p.idle)-1]
	p.idle[len(p.idle)-1] = nil
	p.idle = p.idle[:len(p.idle)-1]
	t.nidle--
	return c
}

// put returns c to the idle pool, or closes it when the pool is full or closed.
func (t *Transport) put(c *conn) {
	c.idleAt = time.Now()
	perHost := t.std.MaxIdleConnsPerHost
	if perHost == 0 {
		perHost = http.DefaultMaxIdleConnsPerHost
	}
	t.mu.Lock()
	p := t.hosts[c.key]
	if p == nil {
		p = &hostPool{}
		t.hosts[c.key] = p
	}
	if t.closed || perHost < 0 || len(p.idle) >= perHost || t.std.MaxIdleConns > 0 && t.nidle >= t.std.MaxIdleConns {
		t.mu.Unlock()
		c.nc.Close()
		return
	}
	p.idle = append(p.idle, c)
	t.nidle++
	if d := t.std.IdleConnTimeout; d > 0 && t.sweep == nil {
		t.sweep = time.AfterFunc(d, t.sweepIdle)
	}
	t.mu.Unlock()
}

// sweepIdle closes the connections idle for IdleConnTimeout or longer, and comes back while any
// are left: an upstream that is not called again gets its connections closed all the same.
func (t *Transport) sweepIdle() {
	d := t.std.IdleConnTimeout
	now := time.Now()
	var old []*conn
	t.mu.Lock()
	for k, p := range t.hosts {
		n := 0
		for _, c := range p.idle { // oldest first
			if now.Sub(c.idleAt) < d {
				break
			}
			old = append(old, c)
			n++
		}
		rest := copy(p.idle, p.idle[n:])
		clear(p.idle[rest:]) // no closed connection left reachable from the backing array
		p.idle = p.idle[:rest]
		t.nidle -= n
		if len(p.idle) == 0 {
			delete(t.hosts, k)
		}
	}
	t.sweep = nil
	if t.nidle > 0 && d > 0 {
		t.sweep = time.AfterFunc(d/2, t.sweepIdle)
	}
	t.mu.Unlock()
	for _, c := range old {
		c.nc.Close()
	}
}

// roundTrip sends req on c and reads the answer's head. retry says the request may be sent
// again on a new connection: c was reused, and the upstream cannot have acted on it.
func (c *conn) roundTrip(req *http.Request, tg target) (resp *http.Response, retry bool, err error) {
	ctx := req.Context()
	// Cancellation closes the connection: a write or read in progress ends at once. Stopped
	// when the body is done; a connection whose close has begun is never pooled.
	stop := context.AfterFunc(ctx, func() { c.nc.Close() })
	fail := func(err error) (*http.Response, bool, error) {
		stop()
		c.nc.Close()
		if ctx.Err() != nil {
			return nil, false, context.Cause(ctx)
		}
		return nil, false, err
	}

	// ResponseHeaderTimeout bounds the write too: an upstream that stops reading a body and
	// never answers would otherwise hold the request until the client gives up.
	if d := c.t.std.ResponseHeaderTimeout; d > 0 {
		_ = c.nc.SetDeadline(time.Now().Add(d))
	}
	w := writeRequest(&c.cw, req, tg, c.t.std.DisableKeepAlives)
	if w.err != nil {
		if w.bodyErr != nil {
			return fail(w.bodyErr) // the client's body failed: not the upstream's doing
		}
		// The upstream may have answered before it stopped reading (a 413, say, and close):
		// that answer is the one to return, if it has arrived.
		if w.written > 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(earlyAnswerWait))
			c.lr.n = c.t.maxHeaderBytes()
			if r, err := http.ReadResponse(c.br, req); err == nil && r.StatusCode >= 200 {
				_ = c.nc.SetReadDeadline(time.Time{})
				c.lr.n = math.MaxInt64
				r.Close = true
				return c.wrapBody(req, r, stop), false, nil
			}
		}
		timedOut := isTimeout(w.err) && ctx.Err() == nil
		if timedOut {
			w.err = errHeaderTimeout // ResponseHeaderTimeout ran out while the upstream did not read
		}
		_, _, err := fail(w.err)
		// Nothing reached the upstream whole: a request with part of its body is never acted on.
		// Not after a timeout, though: that is no connection closed while idle, and a second wait
		// would double the first.
		return nil, c.reused && !timedOut && replayable(req), err
	}

	if d := c.t.std.ResponseHeaderTimeout; d > 0 {
		_ = c.nc.SetReadDeadline(time.Now().Add(d)) // from the end of the write, as net/http has it
	}
	trace := httptrace.ContextClientTrace(ctx)
	c.lr.n = c.t.maxHeaderBytes()
	c.lr.read = 0
	for n1xx := 0; ; n1xx++ {
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			timedOut := false
			switch {
			case ctx.Err() != nil:
			case c.lr.n <= 0:
				err = fmt.Errorf("net/http: server response headers exceeded %d bytes; aborted", c.t.maxHeaderBytes())
			case isTimeout(err):
				err, timedOut = errHeaderTimeout, true
			}
			_, _, err = fail(err)
			// Nothing came back on a reused connection: the upstream closed it as the request
			// went out. Retried as net/http's Transport retries: only what may be sent twice, and
			// not after a timeout.
			return nil, c.reused && !timedOut && c.lr.read == 0 && idempotent(req) && replayable(req), err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if n1xx >= max1xx {
			return fail(errors.New("h1: too many 1xx informational responses from the upstream"))
		}
		if resp.StatusCode == http.StatusContinue {
			if trace != nil && trace.Got100Continue != nil {
				trace.Got100Continue()
			}
		} else if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
				return fail(err)
			}
			c.lr.n = c.t.maxHeaderBytes() // delivered: the next head has a limit of its own
		}
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// Upgrades go to the fallback (direct); a 101 to anything else is the upstream's error.
		return fail(errors.New("h1: the upstream switched protocols on a request that asked for none"))
	}
	if c.t.std.ResponseHeaderTimeout > 0 {
		_ = c.nc.SetDeadline(time.Time{})
	}
	c.lr.n = math.MaxInt64
	return c.wrapBody(req, resp, stop), false, nil
}

// earlyAnswerWait is how long a failed write waits for an answer the upstream sent before it
// stopped reading.
const earlyAnswerWait = 50 * time.Millisecond

// max1xx bounds the informational answers before the final one.
const max1xx = 32

var errHeaderTimeout error = &timeoutError{"net/http: timeout awaiting response headers"}

// timeoutError is net/http's error for a response header timeout, with the same methods.
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string     { return e.msg }
func (e *timeoutError) Timeout() bool     { return true }
func (e *timeoutError) Temporary() bool   { return true }
func (e *timeoutError) Is(err error) bool { return err == context.DeadlineExceeded }

// isTimeout reports whether err is a deadline's (a net.Error that says Timeout).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (t *Transport) maxHeaderBytes() int64 {
	if n := t.std.MaxResponseHeaderBytes; n > 0 {
		return n
	}
	return 10 << 20 // net/http's default
}

// wrapBody gives resp a body that returns c to the pool when read to its end.
func (c *conn) wrapBody(req *http.Request, resp *http.Response, stop func() bool) *http.Response {
	reuse := !resp.Close && !req.Close && !c.t.std.DisableKeepAlives
	if resp.Body == http.NoBody || resp.Body == nil {
		resp.Body = http.NoBody
		c.release(reuse, stop)
		return resp
	}
	resp.Body = &body{c: c, rc: resp.Body, stop: stop, reuse: reuse, ctx: req.Context()}
	return resp
}

// release pools c when reuse allows it and nothing is left unread on it, and closes it otherwise.
func (c *conn) release(reuse bool, stop func() bool) {
	if stop() && reuse && c.br.Buffered() == 0 {
		c.t.put(c)
		return
	}
	c.nc.Close()
}

// body is an answer's body. Read to its end, it puts the connection back in the pool; closed
// before that, or failed, it closes it.
type body struct {
	c     *conn
	rc    io.ReadCloser // http.ReadResponse's body
	stop  func() bool
	reuse bool
	ctx   context.Context
	state atomic.Int32 // bodyOpen, bodyDone (read to the end), bodyClosed
}

const (
	bodyOpen int32 = iota
	bodyDone
	bodyClosed
)

var errBodyClosed = errors.New("http: read on closed response body")

func (b *body) Read(p []byte) (int, error) {
	switch b.state.Load() {
	case bodyDone:
		return 0, io.EOF
	case bodyClosed:
		return 0, errBodyClosed
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		if b.state.CompareAndSwap(bodyOpen, bodyDone) {
			b.c.release(b.reuse, b.stop)
		}
	case err != nil:
		if b.state.CompareAndSwap(bodyOpen, bodyClosed) {
			b.stop()
			b.c.nc.Close()
		}
		if b.ctx.Err() != nil {
			err = context.Cause(b.ctx)
		}
	}
	return n, err
}

// Close may be called while a Read is in progress in another goroutine: closing the connection
// ends that read.
func (b *body) Close() error {
	if b.state.CompareAndSwap(bodyOpen, bodyClosed) {
		b.stop()
		b.c.nc.Close()
	}
	return nil
}

// limitReader reads from r while n allows, counting what it read.
type limitReader struct {
	r    io.Reader
	n    int64
	read int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errHeaderLimit
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	l.read += int64(n)
	return n, err
}

var errHeaderLimit = errors.New("h1: response header limit reached")

// canonicalAddr is the request's "host:port", port 80 when the URL names none.
func canonicalAddr(req *http.Request) string {
	host := req.URL.Host
	if port := req.URL.Port(); port != "" {
		return host
	}
	h := req.URL.Hostname()
	if strings.Contains(h, ":") {
		return "[" + h + "]:80"
	}
	return h + ":80"
}

// replayable reports whether the request's body can be sent again (GetBody, or none at all).
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// idempotent is net/http's test of a request that may be sent twice: an idempotent method, or
// an idempotency key.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, a := req.Header["Idempotency-Key"]
	_, b := req.Header["X-Idempotency-Key"]
	return a || b
}

// rewind is req with a fresh body for a second attempt.
func rewind(req *http.Request) (*http.Request, bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, true
	}
	if req.GetBody == nil {
		return nil, false
	}
	b, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	closeBody(req)
	r2 := *req
	r2.Body = b
	return &r2, true
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
