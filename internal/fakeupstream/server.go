// Package fakeupstream is a deterministic stand-in for the LLM behind compactd. It speaks the real
// wire formats of the OpenAI Responses and Chat Completions APIs and the Anthropic Messages API —
// JSON and SSE — closely enough that the official SDKs parse every byte, so compactd's tests,
// demo and benchmarks can run with no network and no model.
//
// Determinism: a fresh Server fed the same sequence of requests writes the same bytes. Reply
// texts embed a per-route turn counter ("MOCK-REPLY <n>: …") so tests can tell turns apart, and
// ids are derived from a hash of (route, request number, body) rather than from randomness or the
// clock; created_at is a fixed instant.
//
// Like a backend without native compaction (vLLM, most gateways), it refuses compaction items,
// compaction triggers and context_management with a 400: if one reaches it, compactd forwarded
// something it should have handled itself.
//
// Strict by default: it refuses, with the real API's status and error envelope, what the real
// APIs refuse — orphan or unanswered tool results on every dialect, a first Messages message
// that is not the user's, tool_result blocks that do not open their message, unknown item and
// block types, and any request on a route whose API it does not speak (Options.Speaks). The
// rules and their sources are in strict.go. Options.Lenient turns the rules off for the few
// tests that need an upstream that accepts anything. Every refusal is recorded
// (Recorded.Refused), and FailOnRefusal makes a test fail on one it did not expect, so a test
// passes only if the upstream accepted everything compactd sent — even when compactd relays the
// 400 to its client without complaint.
//
// Fault injection is by request header, so a test can pick the fault per request:
//
//	X-Fake-Status: 429   answer that status with an error body in the route's dialect
//	X-Fake-Cut: 3        cut an SSE stream after 3 whole events, mid-event, by aborting the connection
//
// X-Fake-Cut has no effect on JSON (non-stream) replies.
package fakeupstream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/internal/dialect"
)

// The kinds Recorded.Kind holds besides a dialect's name (dialect.Responses, dialect.Chat,
// dialect.Messages: a model turn on that dialect's route). They are not dialects: Valid is false.
const (
	KindCountTokens = "count_tokens" // POST /v1/messages/count_tokens
	KindSummary     = "summary"      // a summariser call, whichever route carried it
	KindOther       = "other"        // any other route (/v1/models, unknown paths)
)

// Fault-injection headers. They are test hooks only: compactd must forward them untouched for
// the fault to reach this server.
const (
	HeaderStatus = "X-Fake-Status"
	HeaderCut    = "X-Fake-Cut"
)

// createdAt is the fixed creation time stamped on every object: a clock reading would make
// identical requests produce different bytes.
const createdAt = 1767225600 // 2026-01-01T00:00:00Z

// maxBody bounds what one request may upload; agent histories are a few MB at most.
const maxBody = 64 << 20

// Options tunes latency and summariser behaviour. The zero value answers instantly.
type Options struct {
	FirstByteDelay time.Duration // before the response starts (JSON or SSE)
	TokenDelay     time.Duration // between SSE deltas
	SummaryDelay   time.Duration // extra delay when answering a summariser call
	Deltas         int           // text deltas per streamed reply (default 4)
	// Summaries controls summariser answers: nil = DefaultSummary. LossySummaries makes one
	// that drops details deterministically.
	Summaries func(transcript string) string
	// Answer, when set, makes ordinary turns answer questions from their context (answer.go).
	Answer Answerer
	// RecordBodies keeps request bodies in the log. New records bodies whatever its value
	// (a bool cannot tell "unset" from "false"); set DropBodies to turn recording off.
	RecordBodies bool
	// DropBodies leaves Recorded.Body nil, for benchmarks that would otherwise keep every
	// multi-megabyte history alive.
	DropBodies bool
	// Lenient accepts bodies the real APIs refuse (strict.go), for tests that send invalid
	// input on purpose to check compactd's own handling, or that need an upstream that accepts
	// anything. Compaction is refused and Speaks applies whatever its value.
	Lenient bool
	// OnRefuse, when set, is called with each refusal as it happens (no body, no headers), e.g.
	// to log it from `compactd fake-upstream`.
	OnRefuse func(Recorded)
	// Speaks lists the APIs this upstream serves (dialect.Responses, Chat, Messages); nil or
	// empty = all three. A request on a route of another API gets a 404 in the envelope of the
	// APIs it does serve, as an OpenAI-only or Anthropic-only backend answers it.
	Speaks []dialect.Name
}

// Recorded is one request as the server received it.
type Recorded struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
	// Kind is the dialect of the route a model turn came on (dialect.Responses, dialect.Chat,
	// dialect.Messages), or KindCountTokens, KindSummary (summariser calls, whichever route
	// carried them) or KindOther.
	Kind dialect.Name
	// Refused is why the upstream refused the request (the error message it answered with), or
	// "" when it accepted it: a strict rule, compaction, or a route it does not speak. An
	// injected fault (X-Fake-Status) is not a refusal, though a body the fault answers instead
	// is still recorded as refused when it breaks a rule; an unparseable body is not one either.
	Refused string
	// Status is the refusal's HTTP status (400 or 404), 0 when not refused.
	Status int
}

// Server is the fake upstream. It is an http.Handler; Start serves it on a loopback port.
type Server struct {
	opt Options

	mu          sync.Mutex
	log         []Recorded
	refused     []Recorded // every refusal (up to maxRefusals), kept even when DropBodies or Reset drop the log
	moreRefused int        // refusals past maxRefusals, counted only
	expected    []string   // FailOnRefusal ignores refusals whose reason contains one of these

	seq atomic.Int64 // every request, for ids
	// Per-route turn counters for "MOCK-REPLY <n>"; only successfully answered non-summary
	// requests count, so a rejected or faulted request does not shift later replies.
	nResponses, nChat, nMessages atomic.Int64

	inflight sync.WaitGroup
}

// New returns a Server. Deltas defaults to 4 and bodies are recorded unless o.DropBodies.
func New(o Options) *Server {
	if o.Deltas <= 0 {
		o.Deltas = 4
	}
	o.RecordBodies = !o.DropBodies
	return &Server{opt: o}
}

// Requests returns a deep copy of the request log in arrival order (headers and bodies too, so
// a test may modify what it gets). Safe for concurrent use.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Recorded, len(s.log))
	for i, r := range s.log {
		r.Header = r.Header.Clone()
		r.Body = bytes.Clone(r.Body)
		out[i] = r
	}
	return out
}

// Reset clears the request log and restarts the turn counters at 1.
func (s *Server) Reset() {
	s.mu.Lock()
	s.log = nil
	s.mu.Unlock()
	s.seq.Store(0)
	s.nResponses.Store(0)
	s.nChat.Store(0)
	s.nMessages.Store(0)
}

// Start serves s on 127.0.0.1 at a free port. baseURL has no path ("http://127.0.0.1:PORT"):
// give the OpenAI SDK baseURL+"/v1/" and the Anthropic SDK baseURL. stop closes every connection,
// cancels in-flight delays, waits for the handlers to return, and may be called more than once.
func (s *Server) Start() (baseURL string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			_ = srv.Close()
			<-served
			s.inflight.Wait()
		})
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// ServeHTTP records the request, applies delays and injected faults, and answers it.
// An X-Fake-Cut abort panics with http.ErrAbortHandler, which net/http turns into a dropped
// connection; call ServeHTTP through an http.Server, not a ResponseRecorder, when cutting.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.inflight.Add(1)
	defer s.inflight.Done()

	body, err := readBody(r)
	if err != nil {
		return // client went away mid-upload; nothing to answer
	}
	route := routeOf(r.Method, r.URL.Path)
	c := &call{
		srv:   s,
		w:     w,
		r:     r,
		ctx:   r.Context(),
		route: route,
		body:  body,
		seq:   s.seq.Add(1),
	}
	c.parse()
	ref := c.refusal()
	s.record(r, body, c.kind(), ref)

	c.sleep(s.opt.FirstByteDelay)
	if code := r.Header.Get(HeaderStatus); code != "" {
		if n, err := strconv.Atoi(code); err == nil && n >= 400 && n <= 599 {
			c.fail(n, "", "injected fault: status "+code)
			return
		}
	}
	if len(body) > maxBody {
		c.fail(http.StatusRequestEntityTooLarge, "", "request body too large")
		return
	}
	if ref != nil {
		c.refuse(ref)
		return
	}
	switch route {
	case routeResponses:
		c.serveResponses()
	case routeChat:
		c.serveChat()
	case routeMessages:
		c.serveMessages()
	case routeCountTokens:
		c.serveCountTokens()
	case routeModels:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(modelsList))
	default:
		c.fail(http.StatusNotFound, "", "Invalid URL ("+r.Method+" "+r.URL.Path+")")
	}
}

// readBody reads at most maxBody+1 bytes, sized up front from Content-Length so a large history
// is not copied through repeated buffer growth.
func readBody(r *http.Request) ([]byte, error) {
	lr := io.LimitReader(r.Body, maxBody+1)
	if r.ContentLength <= 0 || r.ContentLength > maxBody {
		return io.ReadAll(lr)
	}
	buf := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(lr, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

func (s *Server) record(r *http.Request, body []byte, kind dialect.Name, ref *refusal) {
	rec := Recorded{
		Method:   r.Method,
		Path:     r.URL.Path,
		RawQuery: r.URL.RawQuery,
		Header:   r.Header.Clone(),
		Kind:     kind,
	}
	if ref != nil {
		rec.Refused, rec.Status = ref.reason, ref.status
	}
	if !s.opt.DropBodies {
		rec.Body = body // ReadAll's buffer is ours alone; nothing else writes to it
	}
	s.mu.Lock()
	s.log = append(s.log, rec)
	var short Recorded
	if ref != nil {
		short = rec
		short.Body, short.Header = nil, nil
		if len(s.refused) < maxRefusals {
			s.refused = append(s.refused, short)
		} else {
			s.moreRefused++
		}
	}
	s.mu.Unlock()
	if ref != nil && s.opt.OnRefuse != nil {
		s.opt.OnRefuse(short)
	}
}

// maxRefusals bounds the refusals kept, for a long-running fake (`compactd fake-upstream`); a
// test that reaches it has failed long before.
const maxRefusals = 1000

// Refusals returns the requests the server refused since it was created (Reset does not clear
// them; past the first 1000 they are only counted), without bodies or headers, in arrival order.
func (s *Server) Refusals() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.refused)
}

// ExpectRefusals tells FailOnRefusal that refusals whose reason contains one of substrs are
// part of the test (a test of compactd relaying an upstream 400, say). "" expects every refusal.
func (s *Server) ExpectRefusals(substrs ...string) {
	s.mu.Lock()
	s.expected = append(s.expected, substrs...)
	s.mu.Unlock()
}

// TB is the part of testing.TB FailOnRefusal needs; the package does not import testing, as
// the compactd binary links it for `compactd fake-upstream` and `compactd demo`.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
}

// FailOnRefusal makes t fail, when it ends, for each request the server refused that the test
// did not expect (ExpectRefusals), naming the route and the reason: the request compactd sent
// would have been refused by the real API. Call it right after New and before Start's stop is
// registered, so it runs after the server has stopped and every handler has returned.
func (s *Server) FailOnRefusal(t TB) {
	t.Helper()
	t.Cleanup(func() {
		t.Helper()
		for _, r := range s.UnexpectedRefusals() {
			t.Errorf("fake upstream (strict) refused %s %s (%s) with %d: %s", r.Method, r.Path, r.Kind, r.Status, r.Refused)
		}
		s.mu.Lock()
		more := s.moreRefused
		s.mu.Unlock()
		if more > 0 {
			t.Errorf("fake upstream (strict) refused %d more requests", more)
		}
	})
}

// UnexpectedRefusals is Refusals less those ExpectRefusals covers.
func (s *Server) UnexpectedRefusals() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Recorded
	for _, r := range s.refused {
		expected := false
		for _, e := range s.expected {
			expected = expected || strings.Contains(r.Refused, e)
		}
		if !expected {
			out = append(out, r)
		}
	}
	return out
}

type route int

const (
	routeUnknown route = iota
	routeResponses
	routeChat
	routeMessages
	routeCountTokens
	routeModels
)

// routeOf routes on method and path only; Claude Code's "?beta=true" query is ignored.
func routeOf(method, path string) route {
	switch {
	case method == http.MethodPost && path == "/v1/responses":
		return routeResponses
	case method == http.MethodPost && path == "/v1/chat/completions":
		return routeChat
	case method == http.MethodPost && path == "/v1/messages":
		return routeMessages
	case method == http.MethodPost && path == "/v1/messages/count_tokens":
		return routeCountTokens
	case method == http.MethodGet && path == "/v1/models":
		return routeModels
	}
	return routeUnknown
}

// modelsList is served byte-for-byte so pass-through tests can compare exact bytes.
const modelsList = `{"object":"list","data":[` +
	`{"id":"fake-model","object":"model","created":1767225600,"owned_by":"compactd-fakeupstream"},` +
	`{"id":"fake-summariser","object":"model","created":1767225600,"owned_by":"compactd-fakeupstream"}` +
	`]}`

// ModelsList returns the exact body of GET /v1/models.
func ModelsList() []byte { return []byte(modelsList) }

// call is the state of one request being answered.
type call struct {
	srv   *Server
	w     http.ResponseWriter
	r     *http.Request
	ctx   context.Context
	route route
	body  []byte
	seq   int64
	in    parsed
}

func (c *call) kind() dialect.Name {
	if c.in.summary {
		return KindSummary
	}
	switch c.route {
	case routeResponses, routeChat, routeMessages:
		return routeAPI(c.route)
	case routeCountTokens:
		return KindCountTokens
	}
	return KindOther
}

// sleep waits d. If the client leaves or the server stops first, it aborts the handler with
// http.ErrAbortHandler: returning normally would let net/http send an empty 200.
func (c *call) sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.ctx.Done():
		panic(http.ErrAbortHandler)
	}
}

// id returns prefix + 24 hex digits derived from (route, request number, salt, body): unique per
// request, yet identical across runs that send the same requests in the same order.
func (c *call) id(prefix, salt string) string {
	h := sha256.New()
	var b [9]byte
	b[0] = byte(c.route)
	binary.LittleEndian.PutUint64(b[1:], uint64(c.seq))
	h.Write(b[:])
	h.Write([]byte(salt))
	h.Write(c.in.bodyHash[:])
	return prefix + hex.EncodeToString(h.Sum(nil)[:12])
}

// summaryText answers a summariser call, after the extra SummaryDelay.
func (c *call) summaryText() string {
	c.sleep(c.srv.opt.SummaryDelay)
	if f := c.srv.opt.Summaries; f != nil {
		return f(c.in.transcript)
	}
	return DefaultSummary(c.in.transcript)
}

// replyText is the deterministic answer to an ordinary turn.
func replyText(n int64, lastUser string) string {
	return "MOCK-REPLY " + strconv.FormatInt(n, 10) + ": " + firstRunes(lastUser, 60)
}
