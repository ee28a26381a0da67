package proxy

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/engine"
)

// The event log: what the operator console shows of a conversation (internal/console), written
// into the archive's database (archive.EventLog) from the few places every compaction, memo
// application and recall search passes (events.go, compaction.go markApplied, recall.go
// recallSearch). Recording never slows a turn: events go into a bounded queue that one
// goroutine writes in batches; when the queue is full the event is dropped and counted
// (compactd_events_dropped_total), and a write that fails drops its batch the same way.

// EventSink is where the Server writes its event log (Config.Events). *archive.EventLog is one.
type EventSink interface {
	Append(ctx context.Context, evs []archive.Event) error
}

const (
	eventQueue      = 1024 // events waiting to be written
	eventBatch      = 64   // written in one transaction
	eventWriteLimit = 10 * time.Second
)

// eventRecorder queues events for one writer goroutine. A nil *eventRecorder records nothing.
type eventRecorder struct {
	sink    EventSink
	q       chan archive.Event
	dropped atomic.Int64
	counter prometheus.Counter // nil without a registry
	log     func(msg string, args ...any)

	mu     sync.Mutex // guards closed against add racing close
	closed bool
	done   chan struct{}
}

func newEventRecorder(sink EventSink, reg *prometheus.Registry, warn func(string, ...any)) *eventRecorder {
	r := &eventRecorder{sink: sink, q: make(chan archive.Event, eventQueue), log: warn, done: make(chan struct{})}
	if reg != nil {
		r.counter = prometheus.NewCounter(prometheus.CounterOpts{Name: "compactd_events_dropped_total",
			Help: "Event log rows (the operator console's timeline) dropped because the write queue was full or the write failed."})
		reg.MustRegister(r.counter)
	}
	go r.run()
	return r
}

// add queues e, or drops and counts it when the queue is full or the recorder closed.
func (r *eventRecorder) add(e archive.Event) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		r.drop(1)
		return
	}
	select {
	case r.q <- e:
	default:
		r.drop(1)
	}
}

func (r *eventRecorder) drop(n int) {
	r.dropped.Add(int64(n))
	if r.counter != nil {
		r.counter.Add(float64(n))
	}
}

func (r *eventRecorder) run() {
	defer close(r.done)
	batch := make([]archive.Event, 0, eventBatch)
	for e := range r.q {
		batch = append(batch[:0], e)
	more:
		for len(batch) < eventBatch {
			select {
			case e, ok := <-r.q:
				if !ok {
					break more
				}
				batch = append(batch, e)
			default:
				break more
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), eventWriteLimit)
		err := r.sink.Append(ctx, batch)
		cancel()
		if err != nil {
			r.drop(len(batch))
			r.log("event log: write failed; the console's timeline misses these events", "events", len(batch), "err", err)
		}
	}
}

// close stops taking events and waits, until ctx is done, for the queued ones to be written.
func (r *eventRecorder) close(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.q)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return errors.New("event log: still writing")
	}
}

// Client kinds of the event log, from the request's headers.
const (
	ClientCodex      = "codex"
	ClientClaudeCode = "claude_code"
	ClientChatAgent  = "chat_agent"
	ClientSDK        = "sdk"
	ClientOther      = "other"
)

// chatAgents are user-agent words of the Chat Completions agents compactd is used with.
var chatAgents = []string{"qwen", "aider", "cline", "continue", "opencode", "goose", "kilo", "roo-code", "crush"}

// clientKind names the kind of client a request came from, by the headers that kind sends:
// Codex (its originator or user agent, or any x-codex-* header), Claude Code (its session
// header or claude-cli user agent: what agentcompact.go recognises it by), the Chat agents
// (their user agents), the OpenAI and Anthropic SDKs (their user agents and x-stainless-*
// headers). Headers prove nothing about a client; this is a label for the console, never a
// decision.
func clientKind(h http.Header) string {
	ua := strings.ToLower(h.Get("User-Agent"))
	if strings.Contains(ua, "codex") || strings.Contains(strings.ToLower(h.Get("Originator")), "codex") {
		return ClientCodex
	}
	for k := range h {
		if strings.HasPrefix(k, "X-Codex-") {
			return ClientCodex
		}
	}
	if h.Get("X-Claude-Code-Session-Id") != "" || strings.Contains(ua, "claude-cli") || strings.Contains(ua, "claude-code") {
		return ClientClaudeCode
	}
	for _, a := range chatAgents {
		if strings.Contains(ua, a) {
			return ClientChatAgent
		}
	}
	if h.Get("X-Stainless-Lang") != "" || strings.Contains(ua, "openai") || strings.Contains(ua, "anthropic") {
		return ClientSDK
	}
	return ClientOther
}

// event is the row every recording starts from: the request's tenant, owner, client and route.
func (s *Server) event(r *http.Request, kind, conversation string, d dialect) archive.Event {
	ctx := r.Context()
	e := archive.Event{Tenant: s.tenantOf(ctx), Owner: s.ownerOf(ctx), Conversation: conversation, Kind: kind,
		CreatedAt: time.Now(), API: apiName(d), Client: clientKind(r.Header)}
	if rc := chi.RouteContext(ctx); rc != nil {
		e.Route = rc.RoutePattern()
	}
	return e
}

// recordCompaction records a successful compaction: its figures and, sealed, its handoff text.
func (s *Server) recordCompaction(r *http.Request, d dialect, trigger string, c *compaction) {
	if s.events == nil || c == nil || c.Payload == nil {
		return
	}
	conv, owner := turnConversation(r.Context()), ""
	if a := c.Payload.Archive; a != nil {
		conv, owner = a.Conversation, a.Owner
	}
	if conv == "" {
		return // not archived under a conversation: nothing to show it in
	}
	e := s.event(r, archive.EventCompaction, conv, d)
	if owner != "" {
		e.Owner = owner
	}
	e.Trigger, e.Outcome, e.Model, e.Item = trigger, "ok", c.Payload.Model, c.ID
	if c.Payload.Model == extractiveModel {
		e.Outcome = string(PolicyExtractive)
	}
	if c.Speculated {
		e.Flags = "speculation"
	}
	if a := c.Payload.Archive; a != nil {
		e.Segment = a.ID
	}
	e.Before, e.After, e.Items, e.Latency = c.Payload.TokensBefore, c.Payload.TokensAfter, c.Payload.ItemsReplaced, c.took
	if c.Summary != "" || c.Ledger != "" {
		e.Content = &archive.EventContent{Summary: c.Summary, Ledger: c.Ledger}
	}
	s.events.add(e)
}

// extractiveModel is the model name of a summary the extractive failure policy wrote.
const extractiveModel = "compactd-extractive"

// recordCompactionFailed records a compaction that could not be completed, with what the
// failure policy made of it: fail (the client got an error), passthrough (forwarded uncompacted).
func (s *Server) recordCompactionFailed(r *http.Request, d dialect, trigger, model string, err error) {
	conv := turnConversation(r.Context())
	if s.events == nil || conv == "" {
		return
	}
	e := s.event(r, archive.EventCompactionFailed, conv, d)
	e.Trigger, e.Model, e.Outcome = trigger, model, s.failureOutcome(d, trigger, err)
	e.Flags = failureClass(err)
	e.Content = &archive.EventContent{Error: err.Error()}
	s.events.add(e)
}

// failureOutcome is what a failed compaction turned into. Passthrough applies to the threshold
// triggers only (an explicit route must answer with a compaction) and never to a full queue or
// a client gone (engine.PassThrough).
func (s *Server) failureOutcome(d dialect, trigger string, err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, summarizer.ErrBusy):
		return "busy"
	case s.cfg.FailurePolicies.For(d.Name()) == PolicyPassthrough && (trigger == "threshold" || trigger == "policy" || trigger == agentTrigger):
		return string(PolicyPassthrough)
	}
	return string(PolicyFail)
}

// failureClass is a word for why a compaction failed.
func failureClass(err error) string {
	var te *engine.TimeoutError
	switch p := engine.PushbackOf(err); {
	case errors.As(err, &te):
		return "timeout"
	case errors.Is(err, summarizer.ErrCircuitOpen):
		return "circuit_open"
	case p.RateLimited:
		return "rate_limited"
	case p.Overloaded:
		return "overloaded"
	}
	return "error"
}

// recordMemoApplied records that the memo applied a remembered compaction to a turn.
func (s *Server) recordMemoApplied(r *http.Request, d dialect, m *engine.Memory) {
	if s.events == nil || m == nil || m.Opened == nil || m.Opened.Payload == nil || m.Opened.Payload.Archive == nil {
		return
	}
	a := m.Opened.Payload.Archive
	if a.Conversation == "" {
		return
	}
	e := s.event(r, archive.EventMemoApplied, a.Conversation, d)
	e.Item, e.Segment, e.Items = m.Opened.ID, a.ID, m.Items
	s.live.memoApplied.Add(1)
	s.events.add(e)
}

// recordRecall records one recall search with, sealed, its query and the excerpts it returned.
func (s *Server) recordRecall(ctx context.Context, rt *recallTurn, query string, hits []archive.Hit, err error) {
	if s.events == nil || rt.conversation == "" {
		return
	}
	e := archive.Event{Tenant: s.tenantOf(ctx), Owner: s.ownerOf(ctx), Conversation: rt.conversation, Kind: archive.EventRecall,
		CreatedAt: time.Now(), Items: len(hits), Outcome: "ok", Client: rt.client, API: rt.api}
	if rc := chi.RouteContext(ctx); rc != nil {
		e.Route = rc.RoutePattern()
	}
	if err != nil {
		e.Outcome = "failed"
	}
	c := &archive.EventContent{Query: query}
	for _, h := range hits {
		c.Excerpts = append(c.Excerpts, archive.EventExcerpt{Segment: h.SegmentID, Item: h.ItemIndex, Text: h.Excerpt})
	}
	e.Content = c
	s.events.add(e)
}

// turnConversation is the archive conversation the request's compaction ran under (compactCore
// notes it), "" outside a compaction.
func turnConversation(ctx context.Context) string {
	if st := stateFrom(ctx); st != nil {
		return st.conversation
	}
	return ""
}
