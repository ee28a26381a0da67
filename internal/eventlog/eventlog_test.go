package eventlog

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/engine"
)

// sink keeps what is written; while gate is open (not nil) every Append waits on it, and fail
// makes Append fail.
type sink struct {
	mu     sync.Mutex
	evs    []archive.Event
	gate   chan struct{}
	fail   bool
	writes chan struct{} // one send per Append, when not nil
}

func (s *sink) Append(ctx context.Context, evs []archive.Event) error {
	if s.writes != nil {
		s.writes <- struct{}{}
	}
	if s.gate != nil {
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return errors.New("disk full")
	}
	s.evs = append(s.evs, evs...)
	return nil
}

func (s *sink) events() []archive.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]archive.Event(nil), s.evs...)
}

// A nil recorder records nothing and every method is safe on it.
func TestNilRecorder(t *testing.T) {
	var r *Recorder
	r.Add(archive.Event{})
	r.Compaction(Source{}, "conv", "threshold", &engine.Compaction{Payload: &compact.Payload{}}, 0)
	r.CompactionFailed(Source{}, "conv", "threshold", "m", engine.PolicyFail, errors.New("x"))
	r.Recall(Source{}, "conv", "q", nil, nil)
	if r.MemoApplied(Source{}, &engine.Memory{}) {
		t.Error("a nil recorder recorded a memo application")
	}
	if r.Dropped() != 0 || r.Sink() != nil || r.Close(context.Background()) != nil {
		t.Error("a nil recorder has state")
	}
}

// Events are written in order; Close writes what is queued, and events after it are dropped and
// counted; a failed write drops its batch, counts it and says so.
func TestRecorder(t *testing.T) {
	s := &sink{}
	reg := prometheus.NewRegistry()
	var warned []string
	var mu sync.Mutex
	r := New(s, reg, func(msg string, _ ...any) { mu.Lock(); warned = append(warned, msg); mu.Unlock() })
	if r.Sink() != s {
		t.Error("Sink is not the sink given")
	}
	for i := range 200 {
		r.Add(archive.Event{Conversation: fmt.Sprint(i)})
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	evs := s.events()
	if len(evs) != 200 {
		t.Fatalf("%d events written, want 200", len(evs))
	}
	for i, e := range evs {
		if e.Conversation != fmt.Sprint(i) {
			t.Fatalf("event %d is %q: out of order", i, e.Conversation)
		}
	}
	r.Add(archive.Event{})
	if r.Dropped() != 1 || testutil.ToFloat64(r.counter) != 1 {
		t.Errorf("after Close: %d dropped (metric %v), want 1", r.Dropped(), testutil.ToFloat64(r.counter))
	}
	if err := r.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}

	s = &sink{fail: true}
	r = New(s, nil, func(msg string, _ ...any) { mu.Lock(); warned = append(warned, msg); mu.Unlock() })
	r.Add(archive.Event{})
	r.Add(archive.Event{})
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if r.Dropped() != 2 || len(warned) == 0 {
		t.Errorf("failed write: %d dropped, %d warnings; want 2 dropped and a warning", r.Dropped(), len(warned))
	}
}

// A full queue drops rather than blocks, and Close gives up when its context ends while a write
// is still going on.
func TestRecorderFull(t *testing.T) {
	s := &sink{gate: make(chan struct{}), writes: make(chan struct{}, queueLen+1)} // never blocks
	r := New(s, nil, func(string, ...any) {})
	r.Add(archive.Event{}) // taken by the writer, which then waits on the gate
	<-s.writes
	for range queueLen + 10 {
		r.Add(archive.Event{})
	}
	if r.Dropped() != 10 {
		t.Errorf("%d dropped past a full queue, want 10", r.Dropped())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Close(ctx); err == nil {
		t.Error("Close returned nil while a write was held")
	}
	close(s.gate)
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(s.events()); n != 1+queueLen {
		t.Errorf("%d written, want %d", n, 1+queueLen)
	}
}

func TestClientKind(t *testing.T) {
	for _, tc := range []struct {
		h    http.Header
		want string
	}{
		{http.Header{"User-Agent": {"codex_cli_rs/0.40"}}, ClientCodex},
		{http.Header{"Originator": {"codex_exec"}}, ClientCodex},
		{http.Header{"X-Codex-Turn-Metadata": {"x"}}, ClientCodex},
		{http.Header{"X-Claude-Code-Session-Id": {"s"}}, ClientClaudeCode},
		{http.Header{"User-Agent": {"claude-cli/2.0 (external, cli)"}}, ClientClaudeCode},
		{http.Header{"User-Agent": {"Aider/0.8"}}, ClientChatAgent},
		{http.Header{"User-Agent": {"OpenAI/Python 1.0"}}, ClientSDK},
		{http.Header{"X-Stainless-Lang": {"js"}}, ClientSDK},
		{http.Header{"User-Agent": {"curl/8"}}, ClientOther},
		{http.Header{}, ClientOther},
	} {
		if got := ClientKind(tc.h); got != tc.want {
			t.Errorf("ClientKind(%v) = %q, want %q", tc.h, got, tc.want)
		}
	}
}

// record runs f on a recorder and returns what it wrote.
func record(t *testing.T, f func(r *Recorder)) []archive.Event {
	t.Helper()
	s := &sink{}
	r := New(s, nil, func(string, ...any) {})
	f(r)
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s.events()
}

var src = Source{Tenant: "t", Owner: "o", Route: "/v1/responses", Client: ClientCodex, API: "responses"}

func TestCompactionRow(t *testing.T) {
	c := &engine.Compaction{ID: "cmp_1", Summary: "s", Ledger: "l", Speculated: true,
		Payload: &compact.Payload{Model: "m", TokensBefore: 100, TokensAfter: 10, ItemsReplaced: 7,
			Archive: &compact.ArchiveRef{ID: "seg", Conversation: "archived", Owner: "o2"}}}
	evs := record(t, func(r *Recorder) {
		r.Compaction(src, "turn", "threshold", c, time.Second)
		r.Compaction(src, "turn", "threshold", &engine.Compaction{ID: "cmp_2",
			Payload: &compact.Payload{Model: extractiveModel}}, 0)
		r.Compaction(src, "", "threshold", &engine.Compaction{ID: "cmp_3", Payload: &compact.Payload{}}, 0) // no conversation
		r.Compaction(src, "turn", "threshold", &engine.Compaction{ID: "cmp_4"}, 0)                          // no payload
	})
	if len(evs) != 2 {
		t.Fatalf("%d rows, want 2 (none without a conversation or payload): %+v", len(evs), evs)
	}
	e := evs[0]
	if e.Kind != archive.EventCompaction || e.Conversation != "archived" || e.Owner != "o2" || e.Tenant != "t" ||
		e.Route != "/v1/responses" || e.Client != ClientCodex || e.API != "responses" || e.Trigger != "threshold" ||
		e.Outcome != "ok" || e.Model != "m" || e.Item != "cmp_1" || e.Flags != "speculation" || e.Segment != "seg" ||
		e.Before != 100 || e.After != 10 || e.Items != 7 || e.Latency != time.Second || e.Content == nil ||
		e.Content.Summary != "s" || e.Content.Ledger != "l" || e.CreatedAt.IsZero() {
		t.Errorf("compaction row: %+v", e)
	}
	if e := evs[1]; e.Conversation != "turn" || e.Owner != "o" || e.Outcome != "extractive" || e.Content != nil || e.Flags != "" {
		t.Errorf("extractive compaction row: %+v", e)
	}
}

func TestCompactionFailedRow(t *testing.T) {
	busy := fmt.Errorf("wrapped: %w", summarizer.ErrBusy)
	for _, tc := range []struct {
		name           string
		policy         engine.FailurePolicy
		trigger        string
		err            error
		outcome, class string
	}{
		{"fail", engine.PolicyFail, "threshold", errors.New("x"), "fail", "error"},
		{"passthrough", engine.PolicyPassthrough, "threshold", errors.New("x"), "passthrough", "error"},
		{"passthrough, policy trigger", engine.PolicyPassthrough, "policy", errors.New("x"), "passthrough", "error"},
		{"passthrough, agent trigger", engine.PolicyPassthrough, "agent", errors.New("x"), "passthrough", "error"},
		{"passthrough, explicit route", engine.PolicyPassthrough, "explicit", errors.New("x"), "fail", "error"},
		{"canceled", engine.PolicyPassthrough, "threshold", context.Canceled, "canceled", "error"},
		{"busy", engine.PolicyPassthrough, "threshold", busy, "busy", "error"},
		{"timeout", engine.PolicyFail, "threshold", &engine.TimeoutError{Limit: time.Second}, "fail", "timeout"},
		{"circuit open", engine.PolicyFail, "threshold", summarizer.ErrCircuitOpen, "fail", "circuit_open"},
		{"rate limited", engine.PolicyFail, "threshold", &summarizer.Error{Status: 429}, "fail", "rate_limited"},
		{"overloaded", engine.PolicyFail, "threshold", &summarizer.Error{Status: 529}, "fail", "overloaded"},
	} {
		evs := record(t, func(r *Recorder) {
			r.CompactionFailed(src, "conv", tc.trigger, "m", tc.policy, tc.err)
			r.CompactionFailed(src, "", tc.trigger, "m", tc.policy, tc.err) // no conversation: no row
		})
		if len(evs) != 1 {
			t.Fatalf("%s: %d rows, want 1", tc.name, len(evs))
		}
		e := evs[0]
		if e.Kind != archive.EventCompactionFailed || e.Conversation != "conv" || e.Trigger != tc.trigger || e.Model != "m" ||
			e.Outcome != tc.outcome || e.Flags != tc.class || e.Content == nil || e.Content.Error != tc.err.Error() {
			t.Errorf("%s: %+v, want outcome %s, class %s", tc.name, e, tc.outcome, tc.class)
		}
	}
}

func TestMemoAppliedRow(t *testing.T) {
	archived := &engine.Memory{Items: 12, Opened: &engine.Opened{ID: "cmp_1",
		Payload: &compact.Payload{Archive: &compact.ArchiveRef{ID: "seg", Conversation: "conv"}}}}
	var recorded []bool
	evs := record(t, func(r *Recorder) {
		for _, m := range []*engine.Memory{
			archived, nil, {}, {Opened: &engine.Opened{}}, {Opened: &engine.Opened{Payload: &compact.Payload{}}},
			{Opened: &engine.Opened{Payload: &compact.Payload{Archive: &compact.ArchiveRef{ID: "seg"}}}},
		} {
			recorded = append(recorded, r.MemoApplied(src, m))
		}
	})
	if len(evs) != 1 || fmt.Sprint(recorded) != "[true false false false false false]" {
		t.Fatalf("%d rows, recorded %v; want one, for the archived compaction only", len(evs), recorded)
	}
	if e := evs[0]; e.Kind != archive.EventMemoApplied || e.Conversation != "conv" || e.Item != "cmp_1" || e.Segment != "seg" || e.Items != 12 || e.Tenant != "t" {
		t.Errorf("memo row: %+v", e)
	}
}

func TestRecallRow(t *testing.T) {
	hits := []archive.Hit{{SegmentID: "seg", ItemIndex: 3, Excerpt: "text"}}
	evs := record(t, func(r *Recorder) {
		r.Recall(src, "conv", "q", hits, nil)
		r.Recall(src, "conv", "q", nil, errors.New("x"))
		r.Recall(src, "", "q", hits, nil)
	})
	if len(evs) != 2 {
		t.Fatalf("%d rows, want 2", len(evs))
	}
	if e := evs[0]; e.Kind != archive.EventRecall || e.Conversation != "conv" || e.Items != 1 || e.Outcome != "ok" ||
		e.Client != ClientCodex || e.API != "responses" || e.Route != "/v1/responses" || e.Content == nil || e.Content.Query != "q" ||
		len(e.Content.Excerpts) != 1 || e.Content.Excerpts[0] != (archive.EventExcerpt{Segment: "seg", Item: 3, Text: "text"}) {
		t.Errorf("recall row: %+v", e)
	}
	if e := evs[1]; e.Outcome != "failed" || e.Items != 0 {
		t.Errorf("failed recall row: %+v", e)
	}
}
