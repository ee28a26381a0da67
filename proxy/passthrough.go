package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/fault"
)

// newReverseProxy builds the ReverseProxy every upstream call of one API goes through. Routes
// that rewrite a turn attach its flight to the request context; ModifyResponse then rewrites the
// response on its way back, as a stream.
func (s *Server) newReverseProxy(target *url.URL, d dialect, modify func(*http.Response) error) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:   rewriteTo(target, false),
		Transport: s.cfg.Transport,
		// No FlushInterval: ReverseProxy already flushes every write of a text/event-stream
		// response, and of one without a Content-Length (net/http/httputil's flushInterval), so
		// SSE never sits in a buffer. A flush interval on every response would cost a plain JSON
		// answer a separate header write, a timer goroutine and a flush per write.
		BufferPool:     copyBuffers,
		ModifyResponse: modify,
		ErrorHandler:   s.upstreamError(d),
		ErrorLog:       nil,
	}
}

// copyBuffers are the ReverseProxy's copy buffers, 32 KiB like its own, reused across requests
// instead of one allocation per response.
var copyBuffers = &bufferPool{}

// copyBufferSize is the size of a copy buffer.
const copyBufferSize = 32 << 10

// bufferPool keeps the buffers as pointers to arrays: Put turns the slice it is handed back into
// the array pointer it came from, where a *[]byte would cost an allocation per Put.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[copyBufferSize]byte); ok {
		return v[:]
	}
	return make([]byte, copyBufferSize)
}

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) == copyBufferSize {
		b.p.Put((*[copyBufferSize]byte)(buf[:copyBufferSize]))
	}
}

// rewriteTo is the ReverseProxy's Rewrite: the upstream request goes to target. decode says
// compactd reads the response itself whatever the turn.
func rewriteTo(target *url.URL, decode bool) func(*httputil.ProxyRequest) {
	return func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		// SetURL joins paths; keep the client's raw query as-is. No X-Forwarded-* headers:
		// the upstream is an API provider, not a web app that needs the client's address.
		pr.Out.URL.RawQuery = pr.In.URL.RawQuery
		// Expect: 100-continue is answered here: compactd's server sends the client its 100
		// Continue when the body is first read. Passed on, it made the transport wait for the
		// upstream's own 100 before sending the body, and ReverseProxy relayed that one to the
		// client as well: two 100 Continues for one request whenever the body was read before
		// the upstream's arrived (TestExpectContinueOverLimitIs413 caught it under CI's load).
		pr.Out.Header.Del("Expect")
		if decode || rewrites(pr.Out.Context()) {
			// compactd must read the response to rewrite it, so it must come back decoded:
			// net/http's Transport then asks for gzip and decompresses it itself, compactd's
			// own client (internal/h1, http:// upstreams) asks for no encoding at all.
			pr.Out.Header.Del("Accept-Encoding")
		}
	}
}

// rewrites reports whether compactd rewrites the answer to the request of ctx: a turn the
// pipeline forwards with a Rewriter that edits it.
func rewrites(ctx context.Context) bool {
	f := flightFrom(ctx)
	return f != nil && f.rw.Rewrites()
}

// upstreamRoundTrip sends body to target (the upstream of r's dialect) in place of r's for a
// caller that reads the answer itself (the recall loop's rounds), and returns the response with
// its body unread.
//
// It is the ReverseProxy's path, not a second client beside it: the request is prepared by
// httputil.ReverseProxy itself (its hop-by-hop removal, Connection-listed headers included,
// and rewriteTo) and goes out through s.cfg.Transport, instrumented like every other upstream
// call. The ReverseProxy is given the response's headers only, and the ones it would pass on to
// the client become resp.Header; the body stays with the caller.
func (s *Server) upstreamRoundTrip(r *http.Request, target *url.URL, body []byte) (*http.Response, error) {
	in := withBody(r, r.Context(), body)
	var resp *http.Response
	var rtErr error
	rp := &httputil.ReverseProxy{
		Rewrite: rewriteTo(target, true),
		Transport: roundTripFunc(func(out *http.Request) (*http.Response, error) {
			// The ReverseProxy closes the body it hands the transport when ServeHTTP returns —
			// here right after the response headers, while the transport may still be
			// finishing the request body (a read after that close fails and drops the
			// connection, and with it the response being read). The transport gets a body of
			// its own.
			out.Body, _ = out.GetBody()
			resp, rtErr = s.cfg.Transport.RoundTrip(out)
			if rtErr != nil {
				return nil, rtErr
			}
			return &http.Response{StatusCode: resp.StatusCode, Header: resp.Header.Clone(), Body: http.NoBody, Request: out}, nil
		}),
		ErrorHandler: func(http.ResponseWriter, *http.Request, error) {},
	}
	hw := &headerWriter{h: http.Header{}}
	rp.ServeHTTP(hw, in)
	if rtErr != nil {
		return nil, rtErr
	}
	if resp == nil {
		return nil, errors.New("the upstream request could not be prepared")
	}
	resp.Header = hw.h
	return resp, nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// headerWriter keeps the headers the ReverseProxy would send to the client, and nothing else.
type headerWriter struct{ h http.Header }

func (w *headerWriter) Header() http.Header         { return w.h }
func (w *headerWriter) WriteHeader(int)             {}
func (w *headerWriter) Write(p []byte) (int, error) { return len(p), nil }

// upstreamError is the ReverseProxy ErrorHandler of d's routes: a failed upstream round trip
// answered in d's envelope (a 502, or the stream's error event once it is committed).
func (s *Server) upstreamError(d dialect) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		if s.bodyError(w, r, err, d) {
			return
		}
		if errors.Is(err, context.Canceled) {
			// The client went away; there is nobody to answer.
			return
		}
		s.log.Warn("upstream request failed", "api", apiName(d), "path", r.URL.Path, "err", err)
		writeFaultTo(w, d, committedStream(r.Context()), upstreamUnavailable(d))
	}
}

// bodyError answers a round trip that failed on the client's side, while the transport was
// still reading a pass-through body: the body's read deadline passed (408; checked first, since
// the failed read also cancels the request, so err may only say "canceled") or the body went past
// the size limit (413). The upstream has then received an incomplete request, and the client
// still needs an answer.
func (s *Server) bodyError(w http.ResponseWriter, r *http.Request, err error, d dialect) bool {
	var tooBig *http.MaxBytesError
	switch {
	case bodyTimedOut(r.Context()):
		writeFault(w, d, bodyTimeout(s.cfg.BodyReadTimeout))
	case errors.As(err, &tooBig):
		writeFault(w, d, bodyTooLarge(s.cfg.MaxBodyBytes))
	default:
		return false
	}
	return true
}

// upstreamUnavailable is the answer when the upstream cannot be reached.
func upstreamUnavailable(d dialect) *fault.Fault {
	which := "--upstream"
	if d == dialectAnthropic {
		which = "--anthropic-upstream"
	}
	return &fault.Fault{Kind: fault.Upstream, Code: fault.CodeUpstreamUnavailable,
		Message: "compactd could not reach the upstream API; check the URL compactd is configured with (" + which + ") and that it is reachable, then retry"}
}

// withBody is r for the upstream with body in place of the client's (compactd read the client's
// whole; a rewritten turn sends its own) under ctx: length declared, and replayable, as the
// transport needs for a retry on a fresh connection.
//
// It is a shallow copy: the ReverseProxy clones the request (headers included) before it changes
// anything, and the transport writes Content-Length from ContentLength, never from the header,
// so a deep Clone here only copied every header map once more per request. A caller that edits
// headers clones them first (forwardMessages).
func withBody(r *http.Request, ctx context.Context, body []byte) *http.Request {
	out := r.WithContext(ctx)
	rb := &replayBody{body: body}
	rb.Reset(body)
	out.Body = rb
	out.ContentLength = int64(len(body))
	out.GetBody = rb.replay
	return out
}

// replayBody is the body withBody gives the upstream request, and its GetBody: one allocation
// where an io.NopCloser over a bytes.Reader and a closure for GetBody were three.
//
// It records whether the transport read it to its end and whether it asked for a replay: once
// the last byte has been read (copied out by Read, or handed to a writer that returned), and
// no replay was made, nothing reads the body's bytes any more and their buffer may be reused
// (done). Close says nothing of that: the ReverseProxy closes the body when the handler returns,
// while the transport's writer may still be reading it.
type replayBody struct {
	bytes.Reader
	body     []byte
	drained  atomic.Bool
	replayed atomic.Bool
}

func (b *replayBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if b.Reader.Len() == 0 {
		b.drained.Store(true)
	}
	return n, err
}

func (b *replayBody) WriteTo(w io.Writer) (int64, error) {
	n, err := b.Reader.WriteTo(w)
	if b.Reader.Len() == 0 {
		b.drained.Store(true)
	}
	return n, err
}

func (*replayBody) Close() error { return nil }

// replay is GetBody: a fresh reader over the same bytes.
func (b *replayBody) replay() (io.ReadCloser, error) {
	b.replayed.Store(true)
	return io.NopCloser(bytes.NewReader(b.body)), nil
}

// done reports whether the transport has read all of the body and made no replay of it.
func (b *replayBody) done() bool { return b.drained.Load() && !b.replayed.Load() }

// fullDuplex lets a pass-through request's body keep streaming to the upstream after the
// response has begun. net/http's HTTP/1 server otherwise closes the request body as soon as the
// handler writes its headers (golang/go#40747): an upstream that answers before it has read the
// whole body — an event stream, a 100-continue-less upload that fails early — would have the
// transport's copy of the body fail and the connection, with the response on it, torn down. The
// routes compactd parses read the body whole first and need nothing.
func fullDuplex(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			_ = http.NewResponseController(w).EnableFullDuplex() // HTTP/2 is always full duplex
		}
		h.ServeHTTP(w, r)
	})
}

// withSplice is withBody for a body in pieces (api.Splice): the transport reads them one after
// another, so the pieces that are the client's bytes are copied once, into the socket.
func withSplice(r *http.Request, ctx context.Context, body api.Splice) *http.Request {
	out := r.WithContext(ctx)
	sb := &spliceBody{parts: body}
	out.Body = sb
	out.ContentLength = int64(body.Len())
	out.GetBody = sb.replay
	return out
}

// spliceBody reads the pieces of a Splice in order; like replayBody, it records whether it was
// read to its end and whether a replay was asked for (done).
type spliceBody struct {
	parts    api.Splice
	i, at    int // the piece being read and the offset in it
	drained  atomic.Bool
	replayed atomic.Bool
}

func (b *spliceBody) done() bool { return b.drained.Load() && !b.replayed.Load() }

func (b *spliceBody) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && b.i < len(b.parts) {
		c := copy(p[n:], b.parts[b.i][b.at:])
		n += c
		b.at += c
		if b.at == len(b.parts[b.i]) {
			b.i, b.at = b.i+1, 0
		}
	}
	if b.i >= len(b.parts) {
		b.drained.Store(true)
		if n == 0 {
			return 0, io.EOF
		}
	}
	return n, nil
}

// WriteTo writes what is left of the pieces to w, each in one call: io.Copy takes it, and a piece
// of the client's body goes to the connection without passing through a copy buffer.
func (b *spliceBody) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for b.i < len(b.parts) {
		n, err := w.Write(b.parts[b.i][b.at:])
		total += int64(n)
		if err != nil {
			b.at += n
			return total, err
		}
		b.i, b.at = b.i+1, 0
	}
	b.drained.Store(true)
	return total, nil
}

func (*spliceBody) Close() error { return nil }

// replay is GetBody: a fresh reader over the same pieces.
func (b *spliceBody) replay() (io.ReadCloser, error) {
	b.replayed.Store(true)
	return &spliceBody{parts: b.parts}, nil
}
