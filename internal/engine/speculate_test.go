package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/dialect"
)

func specItems(texts ...string) []api.Item {
	var out []api.Item
	for i, t := range texts {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		out = append(out, api.Item{Raw: api.UserMessage(t), Type: "message", Role: role})
	}
	return out
}

// blockingRun is a summariser that waits for release (or cancellation) and records its context.
type blockingRun struct {
	release chan struct{}
	ctxs    chan context.Context
}

func newBlockingRun() *blockingRun {
	return &blockingRun{release: make(chan struct{}), ctxs: make(chan context.Context, 16)}
}

func (b *blockingRun) run(ctx context.Context, prefix []api.Item) (specResult, error) {
	b.ctxs <- ctx
	select {
	case <-b.release:
		return specResult{res: summarizer.Result{Summary: "spec summary"}}, nil
	case <-ctx.Done():
		return specResult{}, ctx.Err()
	}
}

func TestSpeculatorHitMissAndChangedPrefix(t *testing.T) {
	sp := newSpeculator(SpeculativeConfig{})
	b := newBlockingRun()
	turn := specItems("u1", "a1", "u2", "a2", "u3") // prefix = items before the newest user message
	if !started(sp.start("m", Scope{}, turn, 0, 0, b.run)) {
		t.Fatal("speculation not started")
	}
	if started(sp.start("m", Scope{}, turn, 0, 0, b.run)) {
		t.Error("the same prefix was speculated twice")
	}
	close(b.release)

	tests := []struct {
		name  string
		model string
		items []api.Item
		want  int
	}{
		{"other model", "m2", specItems("u1", "a1", "u2", "a2", "u3", "a3", "u4"), 0},
		{"changed prefix", "m", specItems("u1", "a1", "u2-edited", "a2", "u3", "a3", "u4"), 0},
		{"shorter history", "m", specItems("u1", "a1"), 0},
		{"hit: same prefix, more after it", "m", specItems("u1", "a1", "u2", "a2", "u3", "a3", "u4"), 4},
		{"a summary is used once", "m", specItems("u1", "a1", "u2", "a2", "u3", "a3", "u4"), 0},
	}
	for _, tt := range tests {
		n, e := sp.lookup(tt.model, tt.items, nil)
		if n != tt.want {
			t.Errorf("%s: prefix %d, want %d", tt.name, n, tt.want)
		}
		if e != nil {
			<-e.done
			if e.out.res.Summary != "spec summary" {
				t.Errorf("%s: summary %q", tt.name, e.out.res.Summary)
			}
		}
	}
}

func TestSpeculatorCancelsWhatNobodyUses(t *testing.T) {
	sp := newSpeculator(SpeculativeConfig{MaxEntries: 1, MaxConcurrent: 4, TTL: time.Minute})
	now := time.Unix(1000, 0)
	sp.now = func() time.Time { return now }
	b := newBlockingRun()

	sp.start("m", Scope{}, specItems("u1", "a1", "u2"), 0, 0, b.run)
	first := <-b.ctxs
	// Evicted by a newer prefix (MaxEntries 1): the first job is cancelled.
	sp.start("m", Scope{}, specItems("x1", "y1", "x2"), 0, 0, b.run)
	second := <-b.ctxs
	select {
	case <-first.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("evicted speculation was not cancelled")
	}
	// Expired: cancelled at the next touch.
	now = now.Add(2 * time.Minute)
	if n, _ := sp.lookup("m", specItems("x1", "y1", "x2", "y2"), nil); n != 0 {
		t.Error("an expired summary was used")
	}
	select {
	case <-second.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("expired speculation was not cancelled")
	}
}

func TestSpeculatorBoundsConcurrency(t *testing.T) {
	sp := newSpeculator(SpeculativeConfig{MaxConcurrent: 1})
	b := newBlockingRun()
	if !started(sp.start("m", Scope{}, specItems("u1", "a1", "u2"), 0, 0, b.run)) {
		t.Fatal("first not started")
	}
	<-b.ctxs
	if started(sp.start("m", Scope{}, specItems("v1", "b1", "v2"), 0, 0, b.run)) {
		t.Error("started past MaxConcurrent")
	}
	if started(sp.start("m", Scope{}, specItems("u1"), 0, 0, b.run)) {
		t.Error("started with nothing before the newest user message")
	}
	sp.close()
}

func TestUseSpeculationFailedJobFallsBack(t *testing.T) {
	s := &Engine{spec: newSpeculator(SpeculativeConfig{}), obs: nopObserver{}}
	items := specItems("u1", "a1", "u2")
	s.spec.start(specKey(Dialect{}, "m", "", ""), Scope{}, items, 0, 0, func(context.Context, []api.Item) (specResult, error) {
		return specResult{}, errors.New("summariser down")
	})
	if n, _ := s.useSpeculation(context.Background(), Request{Model: "m"}, append(items, specItems("a2", "u3")...)); n != 0 {
		t.Error("a failed speculation was used")
	}
}

func TestSpeculatorStop(t *testing.T) {
	t.Run("cancels jobs already taken by a turn and refuses new ones", func(t *testing.T) {
		sp := newSpeculator(SpeculativeConfig{})
		b := newBlockingRun()
		items := specItems("u1", "a1", "u2")
		if !started(sp.start("m", Scope{}, items, 0, 0, b.run)) {
			t.Fatal("not started")
		}
		jobCtx := <-b.ctxs
		// A crossing turn takes the job out of the cache: close() alone would not reach it.
		if n, e := sp.lookup("m", items, nil); n == 0 || e == nil {
			t.Fatal("running job not found")
		}
		if err := sp.stop(context.Background()); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if jobCtx.Err() == nil {
			t.Error("stop returned with a job's context still live")
		}
		if started(sp.start("m", Scope{}, specItems("v1", "b1", "v2"), 0, 0, b.run)) {
			t.Error("a job started after stop")
		}
	})
	t.Run("bounded by its context", func(t *testing.T) {
		sp := newSpeculator(SpeculativeConfig{})
		release, started := make(chan struct{}), make(chan struct{})
		sp.start("m", Scope{}, specItems("u1", "a1", "u2"), 0, 0, func(context.Context, []api.Item) (specResult, error) {
			close(started)
			<-release // ignores cancellation
			return specResult{}, errors.New("released")
		})
		<-started
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := sp.stop(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("stop with a stuck job and a done context = %v, want context.Canceled", err)
		}
		close(release)
		if err := sp.stop(context.Background()); err != nil { // and now it does end
			t.Errorf("second stop: %v", err)
		}
	})
}

// A client that respells an earlier message between turns — Claude Code moves cache_control to
// the newest message every request — still finds the summary speculated for the same
// conversation: prefix hashes are over the dialect's canonical form (the memo's).
func TestSpeculationKeysAreCanonical(t *testing.T) {
	msg := func(role, text, extra string) api.Item {
		return api.Item{Raw: []byte(`{"role":"` + role + `","content":[{"type":"text","text":"` + text + `"` + extra + `}]}`), Type: "message", Role: role}
	}
	then := []api.Item{msg("user", "u1", `,"cache_control":{"type":"ephemeral"}`), msg("assistant", "a1", ""), msg("user", "u2", "")}
	now := []api.Item{msg("user", "u1", ""), msg("assistant", "a1", ""), msg("user", "u2", `,"cache_control":{"type":"ephemeral"}`), msg("assistant", "a2", ""), msg("user", "u3", "")}
	for _, tc := range []struct {
		d    Dialect
		want bool
	}{
		{Dialect{Name: dialect.Messages, Memo: true}, true},
		{Dialect{Name: dialect.Messages}, false}, // no memo: no canonical form either
		{Dialect{Name: "raw"}, false},            // no canonical form: the respelt prefix is another prefix
	} {
		sp := newSpeculator(SpeculativeConfig{})
		done := make(chan struct{})
		sp.start(specKey(tc.d, "m", "", ""), Scope{}, then, 0, 0, func(context.Context, []api.Item) (specResult, error) {
			close(done)
			return specResult{res: summarizer.Result{Summary: "s"}}, nil
		})
		<-done
		if n, e := sp.lookup(specKey(tc.d, "m", "", ""), now, nil); (e != nil) != tc.want || (tc.want && n != 2) {
			t.Errorf("%s: lookup = %d, %v; want a hit %v on the 2-message prefix", tc.d.Name, n, e != nil, tc.want)
		}
		sp.close()
		_ = sp.stop(context.Background())
	}
}

// started is start's first result: whether a job was started.
func started(s, _ bool) bool { return s }

// A turn whose conversation grew by less than MinGrowth since the summary of a shorter prefix
// this replica holds starts no summary of its own (it is covered); growth past it, another
// conversation, or a summary that failed does start one.
func TestSpeculatorMinGrowth(t *testing.T) {
	sp := newSpeculator(SpeculativeConfig{MaxConcurrent: 8})
	b := newBlockingRun()
	defer close(b.release)
	const minGrowth = 1000
	if s, _ := sp.start("m", Scope{}, specItems("u1", "a1", "u2"), 5000, minGrowth, b.run); !s {
		t.Fatal("the first speculation did not start")
	}
	for _, tc := range []struct {
		name         string
		items        []api.Item
		total        int
		started, cov bool
	}{
		{"grown by less than MinGrowth: covered", specItems("u1", "a1", "u2", "a2", "u3"), 5600, false, true},
		{"grown past MinGrowth: a new summary", specItems("u1", "a1", "u2", "a2", "u3", "a3", "u4"), 6100, true, false},
		{"the newest one covers the next turn", specItems("u1", "a1", "u2", "a2", "u3", "a3", "u4", "a4", "u5"), 6500, false, true},
		{"another conversation", specItems("v1", "b1", "v2"), 5000, true, false},
	} {
		s, c := sp.start("m", Scope{}, tc.items, tc.total, minGrowth, b.run)
		if s != tc.started || c != tc.cov {
			t.Errorf("%s: started %v covered %v, want %v %v", tc.name, s, c, tc.started, tc.cov)
		}
	}

	// A failed summary covers nothing.
	fail := newSpeculator(SpeculativeConfig{})
	boom := func(context.Context, []api.Item) (specResult, error) {
		return specResult{}, errors.New("summariser down")
	}
	fail.start("m", Scope{}, specItems("u1", "a1", "u2"), 5000, minGrowth, boom)
	n, e := 0, (*specEntry)(nil)
	fail.mu.Lock()
	for _, en := range fail.entries {
		e, n = en, en.n
	}
	fail.mu.Unlock()
	if e == nil || n != 2 {
		t.Fatalf("the failing job's entry: %v (prefix %d)", e, n)
	}
	<-e.done
	if s, c := fail.start("m", Scope{}, specItems("u1", "a1", "u2", "a2", "u3"), 5100, minGrowth, b.run); !s || c {
		t.Errorf("after a failed summary: started %v covered %v, want a new one", s, c)
	}
}

// A summary prepared for a prefix that was a safe cut when it started is not used once the
// conversation answers, after the cut, a call made before it: keeping that answer verbatim
// behind a summary of its call would be refused upstream.
func TestSpeculatorLookupOnlyAtSafeCuts(t *testing.T) {
	call := api.Item{Raw: []byte(`{"type":"function_call","call_id":"c1","name":"a","arguments":"{}"}`), Type: "function_call"}
	output := api.Item{Raw: []byte(`{"type":"function_call_output","call_id":"c1","output":"ok"}`), Type: "function_call_output"}
	u := specItems("u1", "a1")
	u2 := specItems("u2")
	turn := append(append(append([]api.Item(nil), u...), call), u2...) // u1 a1 call | u2
	for _, tc := range []struct {
		name  string
		items []api.Item
		want  int
	}{
		{"the call answered after the cut", append(append([]api.Item(nil), turn...), output), 0},
		{"nothing answers across the cut", append(append([]api.Item(nil), turn...), specItems("x", "u3")...), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := newSpeculator(SpeculativeConfig{})
			b := newBlockingRun()
			close(b.release)
			if !started(sp.start("m", Scope{}, turn, 0, 0, b.run)) {
				t.Fatal("speculation not started")
			}
			if n, _ := sp.lookup("m", tc.items, nil); n != tc.want {
				t.Errorf("prefix %d, want %d", n, tc.want)
			}
			sp.close()
			sp.jobs.Wait()
		})
	}
}
