package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/handoff"
)

// countingSum answers every summarisation with summary(req) and counts the calls.
type countingSum struct {
	mu      sync.Mutex
	calls   int
	summary func(summarizer.Request) string
}

func (c *countingSum) Summarize(_ context.Context, req summarizer.Request) (summarizer.Result, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	s := "a short summary of the work so far"
	if c.summary != nil {
		s = c.summary(req)
	}
	return summarizer.Result{Summary: s, Model: "m"}, nil
}

func (c *countingSum) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

type countingObs struct {
	nopObserver
	mu        sync.Mutex
	truncated int
	spec      []string
}

func (o *countingObs) SummaryTruncated(dialect.Name) { o.mu.Lock(); o.truncated++; o.mu.Unlock() }
func (o *countingObs) Speculative(s string)          { o.mu.Lock(); o.spec = append(o.spec, s); o.mu.Unlock() }

func testEngine(t *testing.T, sum summarizer.Summarizer, mutate func(*Config)) (*Engine, *countingObs) {
	t.Helper()
	k, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := crypto.NewKeyring(k)
	if err != nil {
		t.Fatal(err)
	}
	counter := compact.NewCounter(compact.CounterOptions{})
	t.Cleanup(counter.Close)
	obs := &countingObs{}
	cfg := Config{Sealer: ring, Summarizer: sum, Counter: counter, Observer: obs, Speculative: SpeculativeConfig{Fraction: -1}}
	if mutate != nil {
		mutate(&cfg)
	}
	e := New(cfg)
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e, obs
}

var responsesDialect = Dialect{Name: dialect.Responses, SealKind: "openai.compaction", Handoff: handoff.Text, Memo: true, UserMessage: api.UserMessage}

func msg(role, text string) api.Item {
	b := api.AppendString([]byte(`{"type":"message","role":`), role)
	b = append(b, `,"content":`...)
	b = api.AppendString(b, text)
	return api.Item{Raw: append(b, '}'), Type: "message", Role: role}
}

func words(n int) string { return strings.Repeat("the parser module changed again ", n/5+1) }

// request is a Responses-like compaction of items: the kept window, the handoff, the tail.
func request(e *Engine, items []api.Item, retain int) Request {
	return Request{
		Dialect: responsesDialect, Model: "m", Items: items, Retain: retain,
		TokensBefore: e.CountItems(items),
		Finish: func(c *Compaction) (int, int) {
			out := append([]api.Item(nil), c.Kept...)
			if c.Handoff != "" {
				out = append(out, api.Item{Raw: api.UserMessage(c.Handoff), Type: "message", Role: "user", Handoff: true})
			}
			out = append(out, items[len(c.Compacted):]...)
			return e.CountItems(out), len(c.Compacted) - len(c.Window.Instructions) - len(c.Window.Retained)
		},
	}
}

// A compaction that cannot make the request meaningfully smaller is not made, and the summariser
// is not called for it: nothing to replace (a fresh conversation whose first request is past the
// policy), or less than the minimum saving (user messages the retain budget keeps, above the
// threshold). An explicit compaction with nothing to replace is an empty one, still without a
// summariser call.
func TestCompactSkipsWhatCannotSave(t *testing.T) {
	tests := []struct {
		name      string
		items     []api.Item
		retain    int
		explicit  bool
		minSaving float64
		wantErr   error
		wantCalls int
	}{
		{"a fresh conversation: one user message, kept", []api.Item{msg("system", "be brief"), msg("user", words(3000))}, 64_000, false, 0, ErrNothingToCompact, 0},
		{"only instructions", []api.Item{msg("developer", words(3000))}, 64_000, false, 0, ErrNothingToCompact, 0},
		{"retained user messages, a short answer", []api.Item{msg("user", words(3000)), msg("assistant", words(200)), msg("user", words(3000))}, 64_000, false, 0, ErrTooLittleSaving, 0},
		{"the same with the minimum off: still too little for the handoff", []api.Item{msg("user", words(3000)), msg("assistant", words(40)), msg("user", words(3000))}, 64_000, false, -1, ErrTooLittleSaving, 0},
		{"enough to replace", []api.Item{msg("user", words(3000)), msg("assistant", words(3000)), msg("user", words(300))}, 64_000, false, 0, nil, 1},
		{"explicit, nothing to replace: an empty compaction", []api.Item{msg("user", words(3000))}, 64_000, true, 0, nil, 0},
		{"explicit, little to replace: no minimum", []api.Item{msg("user", words(3000)), msg("assistant", words(200)), msg("user", words(3000))}, 64_000, true, 0, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sum := &countingSum{}
			e, _ := testEngine(t, sum, func(c *Config) { c.MinSaving = tt.minSaving })
			in := request(e, tt.items, tt.retain)
			in.AllowEmpty, in.Explicit = tt.explicit, tt.explicit
			c, err := e.Compact(context.Background(), in)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if sum.n() != tt.wantCalls {
				t.Errorf("%d summariser calls, want %d", sum.n(), tt.wantCalls)
			}
			if err != nil {
				if r := SkipReason(err); r == "" {
					t.Errorf("SkipReason(%v) is empty", err)
				}
				return
			}
			if c.Payload.TokensAfter >= c.Payload.TokensBefore && !tt.explicit {
				t.Errorf("compaction made: %d tokens after, %d before", c.Payload.TokensAfter, c.Payload.TokensBefore)
			}
		})
	}
}

// A summary that comes back no smaller than what it would replace is never sealed: a threshold
// compaction is skipped (not_smaller), an explicit one too unless only the handoff's fixed text
// makes the difference (the client asked to compact a short conversation).
func TestCompactRefusesAResultNotSmaller(t *testing.T) {
	conv := []api.Item{msg("user", words(100)), msg("assistant", words(400)), msg("user", words(50))}
	tests := []struct {
		name     string
		summary  string
		explicit bool
		wantErr  error
	}{
		{"a summary longer than the conversation", words(2000), false, ErrNotSmaller},
		{"explicit: a summary longer than the conversation", words(2000), true, ErrNotSmaller},
		{"explicit: a short summary the fixed text makes no smaller", "did X", true, nil},
		{"a short summary", "did X", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sum := &countingSum{summary: func(summarizer.Request) string { return tt.summary }}
			e, _ := testEngine(t, sum, func(c *Config) { c.MinSaving = -1 })
			in := request(e, conv, 64_000)
			in.Explicit = tt.explicit
			_, err := e.Compact(context.Background(), in)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil && SkipReason(err) != "not_smaller" {
				t.Errorf("SkipReason = %q, want not_smaller", SkipReason(err))
			}
		})
	}
}

// A summariser answer past its token budget is cut at a line, marked, and counted before it is
// sealed; one within it is sealed as it came.
func TestCompactCapsTheSummary(t *testing.T) {
	line := "- the handler now returns positioned errors; tests pass\n"
	tests := []struct {
		name    string
		summary string
		cut     bool
	}{
		{"megabytes", strings.Repeat(line, 60_000), true},
		{"just past the budget", strings.Repeat(line, 120), true},
		{"within the budget", strings.Repeat(line, 40), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sum := &countingSum{summary: func(summarizer.Request) string { return tt.summary }}
			e, obs := testEngine(t, sum, func(c *Config) { c.MaxSummaryTokens = 1000 })
			conv := []api.Item{msg("user", words(200)), msg("assistant", words(20_000)), msg("user", words(100))}
			c, err := e.Compact(context.Background(), request(e, conv, 64_000))
			if err != nil {
				t.Fatal(err)
			}
			n := e.cfg.Counter.Text(c.Summary)
			if n > 1000 {
				t.Errorf("sealed summary is %d tokens, budget 1000", n)
			}
			if got := obs.truncated == 1; got != tt.cut {
				t.Errorf("truncations counted: %d, want cut=%v", obs.truncated, tt.cut)
			}
			if tt.cut != strings.Contains(c.Summary, "[compactd: the summary was cut here") {
				t.Errorf("cut marker present = %v, want %v", !tt.cut, tt.cut)
			}
			if tt.cut && !strings.HasSuffix(strings.TrimSuffix(c.Summary, c.Summary[strings.LastIndex(c.Summary, "\n\n[compactd"):]), "tests pass") {
				t.Errorf("the summary was not cut at a line: %q", c.Summary[max(0, len(c.Summary)-200):])
			}
			if !tt.cut && c.Summary != tt.summary {
				t.Error("a summary within its budget was changed")
			}
		})
	}
}

// KeepWindow writes the one retained message it shortens in the dialect's own form (the engine
// speaks no dialect), and keeps it whole for a dialect that gives no UserMessage.
func TestKeepWindowWritesTheDialectsMessage(t *testing.T) {
	e, _ := testEngine(t, nil, nil)
	long := strings.Repeat("please keep refactoring the parser ", 200)
	items := []api.Item{
		{Raw: []byte(`{"role":"user","content":` + string(mustJSONString(long)) + `}`), Type: "message", Role: "user"},
	}
	w := e.Partition(items, 50)
	if w.Truncated != 0 {
		t.Fatalf("window %+v: want the one user message shortened", w)
	}
	chat := Dialect{Name: dialect.Chat, UserMessage: api.ChatUserMessage}
	for _, tc := range []struct {
		name  string
		d     Dialect
		check func(raw string) bool
	}{
		{"chat", chat, func(raw string) bool {
			return strings.HasPrefix(raw, `{"role":"user","content":"`) && len(raw) < len(items[0].Raw)
		}},
		{"responses", responsesDialect, func(raw string) bool {
			return strings.HasPrefix(raw, `{"type":"message","role":"user","content":[{"type":"input_text"`) && len(raw) < len(items[0].Raw)
		}},
		{"no renderer", Dialect{Name: "raw"}, func(raw string) bool { return raw == string(items[0].Raw) }},
	} {
		kept := e.KeepWindow(tc.d, nil, items, w, 50)
		if len(kept) != 1 || !tc.check(string(kept[0].Raw)) {
			t.Errorf("%s: kept %d items: %.120q", tc.name, len(kept), raws(kept))
		}
	}
}

func mustJSONString(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}
