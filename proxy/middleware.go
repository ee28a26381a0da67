package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/budget"
	"github.com/compactd/compactd/internal/metrics"
	"github.com/compactd/compactd/internal/relay"
)

// reqState is the per-request observability state, in the request context. The upstream
// transport and the summariser decorator add the time they spent waiting to it, so the
// middleware can tell compactd's own cost (overhead) from the time it was only waiting.
type reqState struct {
	id string
	// upstream is which upstream the path goes to, the upstream metrics' label: "anthropic"
	// for the Messages routes (Config.AnthropicUpstream), "openai" for every other. It names
	// a provider, not a dialect (the Chat route goes to the OpenAI upstream).
	upstream string
	start    time.Time

	upstreamNanos   atomic.Int64
	summariserNanos atomic.Int64

	// conversation is the archive conversation of the request's compaction, noted by
	// compactCore for the event log (eventlog.go).
	conversation string

	body  *bodyTap     // nil for bodiless requests
	guard *bodyGuard   // the body's size and read-deadline guard (limits.go); nil for bodiless requests
	hold  *budget.Hold // the request's share of the in-flight budget (internal/budget); nil outside it

	// The storage of body, guard and the response writer instrument wraps: one allocation per
	// request instead of four. Not pooled: the ReverseProxy's transport and the async work a
	// turn starts may still hold a pointer into a reqState after the handler returned, so only
	// the garbage collector knows when it is free.
	tap      bodyTap
	guardBuf bodyGuard
	ow       obsWriter
	idHeader [1]string // the X-Request-Id header's value, set without a slice of its own
	// upstreamBody is the response body wrapper of the request's first upstream round trip.
	upstreamBody     upstreamBody
	upstreamBodyUsed atomic.Bool
	// outBody is the body compactd read whole and forwards (pipe.forward), for the round trip
	// to hand the transport directly: the ReverseProxy wraps it in a reader of its own, which
	// compactd's client (internal/h1) does not know to be in memory and net/http's Transport
	// only copies through a 32 KiB buffer (bulkconn.go).
	outBody interface {
		io.ReadCloser
		bulkBody
	}
	outLen int64
	// outSmall is also the whole of a small body compactd read and forwards, which the round
	// trip hands net/http's Transport as a reader it knows to be in memory: the transport
	// then writes the request head and the body in one write, where for any other body it
	// sends the head first, in a write of its own (bulkconn.go).
	outSmall      []byte
	ctx           reqCtx
	route         chi.Context
	routePatterns [2]string // the backing of route.RoutePatterns (a mounted router adds the second)
	// credential is what the client presented (clientKey), taken before authenticate swaps it for
	// the tenant's; owner is its digest with the tenant, computed on first use (ownerOf). Never
	// logged.
	credential string
	owner      string
}

type reqStateKey struct{}

// reqCtx is a request's context: its parent's, plus the reqState and, when instrument runs
// outside chi (as New sets it up), chi's route context, which chi then uses instead of making
// its own. One context that answers both keys, stored in the reqState, costs no allocation;
// context.WithValue twice, and the request copy chi makes, cost three per request. Every other
// key is the parent's, so cancellation and deadlines propagate as through any context.
type reqCtx struct {
	context.Context
	st       *reqState
	ownRoute bool // the route context is st.route (there was none in the parent)
}

func (c *reqCtx) Value(key any) any {
	switch key {
	case reqStateKey{}:
		return c.st
	case chi.RouteCtxKey:
		if c.ownRoute {
			return &c.st.route
		}
	}
	return c.Context.Value(key)
}

func stateFrom(ctx context.Context) *reqState {
	st, _ := ctx.Value(reqStateKey{}).(*reqState)
	return st
}

func (st *reqState) addUpstream(d time.Duration) {
	if st != nil {
		st.upstreamNanos.Add(int64(d))
	}
}

func (st *reqState) addSummariser(d time.Duration) {
	if st != nil {
		st.summariserNanos.Add(int64(d))
	}
}

// model is the request body's top-level "model", read from the captured head of the body.
func (st *reqState) model() string {
	if st == nil || st.body == nil {
		return ""
	}
	return st.body.model()
}

// requestID returns the client's x-request-id if it is a sane token, else a new one. Client ids
// are kept so a caller can follow its own id through compactd's logs.
func requestID(h http.Header) string {
	id := h.Get("X-Request-Id")
	if id == "" || len(id) > 128 {
		return newID("req_")
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return newID("req_")
		}
	}
	return id
}

// Routes whose requests are probes and scrapes: logged at debug level so they do not drown the
// access log.
var quietRoutes = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// instrument is the outermost middleware: request id, per-request state, request metrics,
// in-flight and stream gauges, and the one access log line per request.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := &reqState{id: requestID(r.Header), upstream: upstreamOf(r.URL.Path), start: time.Now()}
		st.ctx = reqCtx{Context: r.Context(), st: st}
		if chi.RouteContext(r.Context()) == nil {
			st.ctx.ownRoute = true
			st.route.Routes, st.route.RoutePatterns = s.router, st.routePatterns[:0]
		}
		// The copy first, then its body: net/http's own request must keep its body, which
		// net/http inspects after the handler (an unread body closed early makes it close the
		// connection gracefully, so a client still sending gets the answer, not a reset).
		r = r.WithContext(&st.ctx)
		if r.Body != nil && r.Body != http.NoBody {
			// The head is looked at for the model (gen_ai metrics, the access log's model field)
			// and, with --log-content, kept to log.
			capture := 0
			if s.metrics != nil || s.cfg.LogContent {
				capture = bodyCapture
			}
			st.tap.rc, st.tap.max, st.tap.keep = r.Body, capture, s.cfg.LogContent
			st.body = &st.tap
			r.Body = st.body
		}
		ow := &st.ow
		ow.ResponseWriter, ow.st, ow.m, ow.r = w, st, s.metrics, r
		if s.cfg.StreamWriteTimeout > 0 {
			ow.wd = writeDeadline{timeout: s.cfg.StreamWriteTimeout, rw: w}
		}

		s.metrics.RequestStarted()
		defer func() {
			// Runs after the handler returned, also when it panicked (http.ErrAbortHandler from a
			// cut stream): the stream gauge is released here and only here, exactly once.
			ow.wd.clear() // the next request on the connection starts without a write deadline
			s.metrics.RequestDone()
			if ow.streamRoute != "" {
				s.metrics.StreamClosed(ow.streamRoute)
			}
			s.finish(r, ow, st)
		}()
		next.ServeHTTP(ow, r)
	})
}

// finish records a finished request: metrics and the access log line.
func (s *Server) finish(r *http.Request, ow *obsWriter, st *reqState) {
	now := time.Now() // one clock read for the duration and the log record's time
	elapsed := now.Sub(st.start)
	up := time.Duration(st.upstreamNanos.Load())
	sum := time.Duration(st.summariserNanos.Load())
	overhead := max(elapsed-up-sum, 0)
	route := routeLabel(r)
	code := ow.code
	if code == 0 {
		// The handler wrote nothing: net/http answers 200 with an empty body, unless the client
		// went away first, in which case nobody got an answer (nginx's 499).
		code = http.StatusOK
		if r.Context().Err() != nil {
			code = 499
		}
	}
	s.metrics.Request(route, r.Method, code, elapsed.Seconds(), overhead.Seconds())

	level := slog.LevelInfo
	if quietRoutes[route] {
		level = slog.LevelDebug
	}
	ctx := r.Context()
	h := s.accessLogHandler()
	if !h.Enabled(ctx, level) {
		return
	}
	var in int64
	if st.body != nil {
		in = st.body.n.Load()
	}
	// The record is built here and handed to the handler beneath ctxHandler, with the request
	// id among its attributes: one line per request is the hottest log call there is, and this
	// way it costs neither runtime.Callers (an access line has no useful source position) nor a
	// second growth of the record's attributes when ctxHandler appends the id. The attributes
	// and their order are those of an s.log.LogAttrs call.
	var buf [20]slog.Attr
	attrs := append(buf[:0],
		slog.String("method", r.Method),
		slog.String("route", route),
		slog.Int("status", code),
		slog.Float64("duration_ms", ms(elapsed)),
		slog.Float64("upstream_ms", ms(up)),
		slog.Float64("summariser_ms", ms(sum)),
		slog.Float64("overhead_ms", ms(overhead)),
		slog.Int64("bytes_in", in),
		slog.Int64("bytes_out", ow.bytes),
	)
	if route == "passthrough" {
		attrs = append(attrs, slog.String("path", r.URL.Path)) // never the query: it may carry a key
	}
	if ow.streamRoute != "" {
		attrs = append(attrs, slog.Bool("stream", true))
	}
	if ow.upstreamID != "" {
		attrs = append(attrs, slog.String("upstream_request_id", ow.upstreamID))
	}
	if m := st.model(); m != "" && metrics.ModelNameOK(m) {
		attrs = append(attrs, slog.String("model", m))
	}
	attrs = clientTurnFrom(r.Header).appendLogAttrs(attrs)
	attrs = append(attrs, slog.String("request_id", st.id)) // what ctxHandler adds
	rec := slog.NewRecord(now, level, "request", 0)
	rec.AddAttrs(attrs...)
	_ = h.Handle(ctx, rec)
	if s.cfg.LogContent && st.body != nil && s.log.Enabled(ctx, slog.LevelDebug) {
		// Debug only, by explicit opt-in (--log-content): request bodies carry prompts.
		s.log.LogAttrs(ctx, slog.LevelDebug, "request content", slog.String("body_head", st.body.head()))
	}
}

// accessLogHandler is the handler access-log records go to: the one beneath ctxHandler (finish
// adds the request id itself).
func (s *Server) accessLogHandler() slog.Handler {
	if s.logHandler != nil {
		return s.logHandler
	}
	h := s.log.Handler()
	if c, ok := h.(ctxHandler); ok {
		return c.Handler
	}
	return h
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// routeLabel is the chi route pattern that served r; everything reverse-proxied without a route
// of its own is "passthrough".
func routeLabel(r *http.Request) string {
	p := chi.RouteContext(r.Context()).RoutePattern()
	if p == "" || p == "/*" {
		return "passthrough"
	}
	return p
}

// obsWriter records status and size, puts the request id on the response, and counts SSE
// responses as in-flight streams from their first header write until the handler returns.
type obsWriter struct {
	http.ResponseWriter
	st *reqState
	m  *metrics.Metrics
	r  *http.Request

	code        int
	bytes       int64
	streamRoute string // set when the response is an SSE stream counted in the gauge
	upstreamID  string
	wd          writeDeadline // every write to the client is bounded (writedeadline.go)
}

func (w *obsWriter) WriteHeader(code int) {
	if w.code != 0 {
		w.ResponseWriter.WriteHeader(code) // let net/http report the superfluous call
		return
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.wd.arm()                         // net/http writes an informational response at once
		w.ResponseWriter.WriteHeader(code) // informational; the real status comes later
		return
	}
	w.code = code
	h := w.Header()
	// compactd's id is the response's X-Request-Id; an upstream's own id (OpenAI and Anthropic
	// send one) is kept beside it for support requests to the provider.
	if up := h.Get("X-Request-Id"); up != "" && up != w.st.id {
		w.upstreamID = up
		h.Set("X-Upstream-Request-Id", up)
	} else if up := h.Get("Request-Id"); up != "" {
		w.upstreamID = up // Anthropic's header name
	}
	w.st.idHeader[0] = w.st.id
	h["X-Request-Id"] = w.st.idHeader[:] // h.Set, without allocating the value's slice
	if relay.IsEventStream(h) {
		w.streamRoute = routeLabel(w.r)
		w.m.StreamOpened(w.streamRoute)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *obsWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.wd.arm()
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	// No flush of a complete answer here: the request's share of the in-flight body budget is
	// released when the handler returns, and a client whose next turn follows this answer at
	// once must find it released (TestInflightBudgetRefusesInDialect).
	return n, err
}

// Flush lets SSE through immediately (http.Flusher for code that asserts it).
func (w *obsWriter) Flush() {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.wd.arm()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the underlying writer (deadlines, hijacking).
func (w *obsWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// bodyCapture is how much of a request body is looked at to find its "model" (and, with
// --log-content, kept to log). Clients put model first; 64 KiB is far past it.
const bodyCapture = 64 << 10

// bodyTap counts the request body as it is read and finds its top-level "model" in the head of
// it. It keeps the head only until the model is found (its value complete), so the usual cost is
// one copy of the first read and one look at it, not 64 KiB per request; with keep (--log-content)
// it keeps the whole head for the log.
type bodyTap struct {
	rc   io.ReadCloser
	n    atomic.Int64
	max  int
	keep bool

	mu    sync.Mutex
	buf   []byte
	found bool
	mdl   string
}

func (b *bodyTap) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.n.Add(int64(n))
	if b.max > 0 && n > 0 {
		b.mu.Lock()
		if room := b.max - len(b.buf); room > 0 && (b.keep || !b.found) {
			if len(b.buf) == 0 && !b.keep {
				// The first read (for a body read whole, the whole body): look in it where it
				// is, and copy it only when the model is not in it, complete.
				if head := p[:min(n, room)]; bytes.Contains(head, []byte(`"model"`)) {
					if res := gjson.GetBytes(head, "model"); res.Exists() {
						b.found, b.mdl = true, res.Str
						b.mu.Unlock()
						return n, err
					}
				}
			}
			b.buf = append(b.buf, p[:min(n, room)]...)
			if !b.found && bytes.Contains(b.buf, []byte(`"model"`)) {
				b.look()
			}
			if b.found && !b.keep {
				b.buf = nil // done: nothing more to copy
			}
		}
		b.mu.Unlock()
	}
	return n, err
}

// look tries to read the model from the head so far. gjson reports no value for a string cut
// short by the end of the head (its closing quote not yet read), so a value found is whole; a
// non-string "model" is no model name and ends the search as well. Called with mu held.
func (b *bodyTap) look() {
	if res := gjson.GetBytes(b.buf, "model"); res.Exists() {
		b.found, b.mdl = true, res.Str
	}
}

func (b *bodyTap) Close() error { return b.rc.Close() }

func (b *bodyTap) model() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.found && len(b.buf) > 0 {
		// The body ended (or the cap was reached) with the value at the very end of the head.
		b.mdl = gjson.GetBytes(b.buf, "model").Str
		b.found = true
	}
	return b.mdl
}

func (b *bodyTap) head() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// ctxHandler adds the request id to every record logged with a request's context
// (s.log.InfoContext(r.Context(), …)), so compaction lines join up with the access line.
type ctxHandler struct{ slog.Handler }

func (h ctxHandler) Handle(ctx context.Context, rec slog.Record) error {
	if st := stateFrom(ctx); st != nil {
		rec.AddAttrs(slog.String("request_id", st.id))
	}
	return h.Handler.Handle(ctx, rec)
}

func (h ctxHandler) WithAttrs(a []slog.Attr) slog.Handler { return ctxHandler{h.Handler.WithAttrs(a)} }
func (h ctxHandler) WithGroup(n string) slog.Handler      { return ctxHandler{h.Handler.WithGroup(n)} }
