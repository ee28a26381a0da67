package engine

// Contract tests of Engine.Compact and its neighbours, with fakes for what the engine calls out
// to: a scripted summariser, a recording observer, a recording archive. The sealer is a real
// keyring with a generated key (testEngine), the counter a real one.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/memo"
)

// scriptSum answers every summarisation with answer(ctx, req) and records each request. The gap
// check is told apart by its instructions (compact.GapCheckPrompt).
type scriptSum struct {
	answer func(ctx context.Context, req summarizer.Request) (summarizer.Result, error)

	mu   sync.Mutex
	reqs []summarizer.Request
}

func (s *scriptSum) Summarize(ctx context.Context, req summarizer.Request) (summarizer.Result, error) {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	return s.answer(ctx, req)
}

func (s *scriptSum) requests() []summarizer.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

func (s *scriptSum) n() int { return len(s.requests()) }

func isGapCheck(req summarizer.Request) bool { return req.Instructions == compact.GapCheckPrompt() }

// entriesSum names the number of entries it was given, so a test can tell which compaction (the
// speculative prefix or the whole turn) a summary was written for.
func entriesSum() *scriptSum {
	return &scriptSum{answer: func(_ context.Context, req summarizer.Request) (summarizer.Result, error) {
		return summarizer.Result{Summary: fmt.Sprintf("summary of %d entries", len(req.Entries)), Model: "sum-model"}, nil
	}}
}

// recObs records every observation as "kind:value"; with events set it also sends each one
// there (a test waits on a background job's outcome with it).
type recObs struct {
	mu     sync.Mutex
	seen   []string
	events chan string
}

func (o *recObs) add(s string) {
	o.mu.Lock()
	o.seen = append(o.seen, s)
	o.mu.Unlock()
	if o.events != nil {
		o.events <- s
	}
}

func (o *recObs) Speculative(s string) { o.add("spec:" + s) }
func (o *recObs) Fallback(d dialect.Name, policy string) {
	o.add("fallback:" + string(d) + "/" + policy)
}
func (o *recObs) Memo(s string)                   { o.add("memo:" + s) }
func (o *recObs) SummaryTruncated(d dialect.Name) { o.add("truncated:" + string(d)) }
func (o *recObs) has(s string) bool               { return slices.Contains(o.all(), s) }
func (o *recObs) all() []string                   { o.mu.Lock(); defer o.mu.Unlock(); return slices.Clone(o.seen) }
func (o *recObs) hasPrefix(p string) (found bool) {
	for _, s := range o.all() {
		found = found || strings.HasPrefix(s, p)
	}
	return found
}

// waitFor reads o.events until want arrives.
func (o *recObs) waitFor(t *testing.T, want string) {
	t.Helper()
	for s := range o.events {
		if s == want {
			return
		}
	}
}

// recArchive is an archive.Store that keeps what Put is given. Put fails with err when set, and
// with the context's error when its context is done: archiving must run under the caller's
// context, never the compaction deadline.
type recArchive struct {
	archive.Store // nil: any other method is a test bug and panics
	err           error

	mu   sync.Mutex
	segs []archive.Segment
}

func (a *recArchive) Put(ctx context.Context, s archive.Segment) (archive.Ref, error) {
	if err := ctx.Err(); err != nil {
		return archive.Ref{}, err
	}
	if a.err != nil {
		return archive.Ref{}, a.err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.segs = append(a.segs, s)
	n := len(a.segs)
	return archive.Ref{ID: fmt.Sprintf("seg_%d", n), Hash: fmt.Sprintf("hash_%d", n)}, nil
}

func (a *recArchive) segments() []archive.Segment {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.segs)
}

// raws is the raw JSON of items, as strings, for comparing.
func raws(items []api.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = string(it.Raw)
	}
	return out
}

// openOK opens c the way a later turn would, failing the test when it does not.
func openOK(t *testing.T, e *Engine, c *Compaction, kind, tenant string) *Opened {
	t.Helper()
	o, err := e.Open(c.EncryptedContent, c.ID, kind, tenant, c.Signature)
	if err != nil {
		t.Fatalf("the sealed compaction does not open: %v", err)
	}
	return o
}

// The window: instructions (system, developer) are kept verbatim and never summarised; the
// newest user messages the retain budget holds are kept verbatim in their original order,
// interleaved with the instructions as they came, and are summarised too; past the budget
// nothing older is kept; a newest user message that alone exceeds the budget is kept shortened.
func TestCompactWindowKeepsInstructionsAndRetainedVerbatim(t *testing.T) {
	items := []api.Item{
		msg("system", "SYS-RULES: answer briefly"),
		msg("user", "U-OLD "+words(2000)),
		msg("assistant", "A-ONE "+words(3000)),
		msg("developer", "DEV-NOTE: indent with tabs"),
		msg("user", "U-MID "+words(200)),
		msg("assistant", "A-TWO "+words(3000)),
		msg("user", "U-NEW "+words(300)),
	}
	sum := entriesSum()
	e, _ := testEngine(t, sum, nil)
	n := func(i int) int { return e.countItem(items[i]) }
	tests := []struct {
		name      string
		retain    int
		kept      []int // indexes of items kept whole, in order
		truncated int   // index of the one kept shortened (it is the last kept), or -1
	}{
		{"a budget holding every user message", 64_000, []int{0, 1, 3, 4, 6}, -1},
		{"a budget holding exactly the newest two", n(6) + n(4), []int{0, 3, 4, 6}, -1},
		{"a budget one token short of the newest two", n(6) + n(4) - 1, []int{0, 3, 6}, -1},
		{"a newest message past the budget: kept shortened", n(6) - 100, []int{0, 3}, 6},
		{"no budget: instructions only", 0, []int{0, 3}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := sum.n()
			c, err := e.Compact(context.Background(), request(e, items, tt.retain))
			if err != nil {
				t.Fatal(err)
			}
			if w := e.Partition(items, tt.retain); !slices.Equal(w.Retained, c.Window.Retained) || w.Truncated != c.Window.Truncated {
				t.Errorf("Partition = %+v, the compaction's window %+v", w, c.Window)
			}
			if c.Window.Truncated != tt.truncated {
				t.Errorf("truncated index %d, want %d", c.Window.Truncated, tt.truncated)
			}
			var want []string
			for _, i := range tt.kept {
				want = append(want, string(items[i].Raw))
			}
			got := raws(c.Kept)
			if tt.truncated >= 0 {
				if len(got) != len(want)+1 {
					t.Fatalf("kept %d items, want %d and the shortened one", len(got), len(want))
				}
				short := c.Kept[len(c.Kept)-1]
				text := api.MessageText(short.Raw)
				if !short.IsUserMessage() || !strings.HasPrefix(text, "U-NEW ") || e.countItem(short) >= n(tt.truncated) {
					t.Errorf("the shortened message is a %s message of %d tokens (was %d), starting %.20q", short.Role, e.countItem(short), n(tt.truncated), text)
				}
				got = got[:len(got)-1]
			}
			if !slices.Equal(got, want) {
				t.Errorf("kept verbatim:\n%.60q\nwant\n%.60q", got, want)
			}

			if sum.n() != before+1 {
				t.Fatalf("%d summariser calls, want 1", sum.n()-before)
			}
			entries := strings.Join(sum.requests()[before].Entries, "\n")
			for _, s := range []string{"SYS-RULES", "DEV-NOTE"} {
				if strings.Contains(entries, s) {
					t.Errorf("the instruction %s was given to the summariser", s)
				}
			}
			for _, s := range []string{"U-OLD", "A-ONE", "U-MID", "A-TWO", "U-NEW"} {
				if !strings.Contains(entries, s) {
					t.Errorf("the conversation item %s was not summarised", s)
				}
			}
			if !strings.Contains(c.Handoff, c.Summary) || c.Summary != "summary of 5 entries" {
				t.Errorf("summary %q, handoff %.80q", c.Summary, c.Handoff)
			}
			if want := 5 - len(c.Window.Retained); c.Payload.ItemsReplaced != want {
				t.Errorf("items replaced %d, want %d", c.Payload.ItemsReplaced, want)
			}
		})
	}
}

// What may be compacted at all: the minimum saving is a share of the turn's tokens, checked
// before the summariser is called and waived for explicit compactions; a compacted context that
// renders no smaller than the turn is refused after summarising, before anything is archived,
// sealed or recorded.
func TestCompactSavingContract(t *testing.T) {
	// The retain budget keeps both user messages: only the answer between them is replaceable,
	// about a third of the turn.
	items := []api.Item{msg("user", words(3000)), msg("assistant", words(3000)), msg("user", words(3000))}
	tests := []struct {
		name      string
		minSaving float64
		explicit  bool
		finish    func(before int) int // tokens after; nil: the real count
		wantErr   error
		wantCalls int
	}{
		{"a third saved, half wanted", 0.5, false, nil, ErrTooLittleSaving, 0},
		{"a third saved, a quarter wanted", 0.25, false, nil, nil, 1},
		{"explicit: no minimum", 0.5, true, nil, nil, 1},
		{"rendered no smaller than the turn", 0.25, false, func(before int) int { return before }, ErrNotSmaller, 1},
		{"explicit: the rendered size is the client's business", 0.25, true, func(before int) int { return before }, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sum := entriesSum()
			arch := &recArchive{}
			obs := &recObs{}
			e, _ := testEngine(t, sum, func(c *Config) { c.MinSaving, c.Archive, c.Observer = tt.minSaving, arch, obs })
			in := request(e, items, 64_000)
			in.Explicit, in.Conversation = tt.explicit, "conv"
			if tt.finish != nil {
				real := in.Finish
				in.Finish = func(c *Compaction) (int, int) { _, r := real(c); return tt.finish(in.TokensBefore), r }
			}
			c, err := e.Compact(context.Background(), in)
			if tt.wantErr == nil && err != nil || !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if sum.n() != tt.wantCalls {
				t.Errorf("%d summariser calls, want %d", sum.n(), tt.wantCalls)
			}
			if err != nil {
				if c != nil || len(arch.segments()) != 0 {
					t.Errorf("a refused compaction was returned (%v) or archived (%d segments)", c != nil, len(arch.segments()))
				}
				return
			}
			if len(arch.segments()) != 1 || c.EncryptedContent == "" {
				t.Errorf("a compaction made: %d segments, sealed %v", len(arch.segments()), c.EncryptedContent != "")
			}
		})
	}
}

// The facts ledger is written only with a byte budget (Config.LedgerBytes), sealed beside the
// summary and rendered into the handoff; the gap check, a second summariser pass over summary and
// ledger, adds its findings to the ledger's Gap check section and its usage to the compaction's;
// a gap check that fails costs nothing but its findings: the ledger is sealed without them.
func TestCompactLedgerAndGapCheck(t *testing.T) {
	items := []api.Item{
		msg("user", "Let's use port 7431 for the listener and never touch config/prod.yaml. "+words(1000)),
		msg("assistant", words(3000)),
		msg("user", "go on"),
	}
	const finding = "the deploy key lives at /srv/keys/deploy.pem"
	gapErr := &summarizer.Error{Status: 503, Err: errors.New("503 Service Unavailable")}
	var b strings.Builder
	for i := range 400 {
		fmt.Fprintf(&b, "- the service %d listens on port %d\n", i, 9000+i)
	}
	manyFindings := b.String()
	const budget = 1000 // Config.MaxSummaryTokens: the gap check's answer is bounded like a summary
	tests := []struct {
		name        string
		ledgerBytes int
		gapCheck    bool
		gap         func() (string, error) // the gap check's answer
		wantLedger  bool
		wantFinding bool
		wantCalls   int
		wantUsage   int64 // output tokens
		wantCut     bool  // the gap check's answer is cut to the summary budget
	}{
		{"no ledger budget: no ledger, no gap check", 0, true, nil, false, false, 1, 10, false},
		{"a ledger", 4096, false, nil, true, false, 1, 10, false},
		{"a gap check that finds something", 4096, true, func() (string, error) { return "- " + finding + "\n", nil }, true, true, 2, 15, false},
		{"a gap check that finds nothing", 4096, true, func() (string, error) { return "Nothing missing.", nil }, true, false, 2, 15, false},
		{"a gap check that fails", 4096, true, func() (string, error) { return "", gapErr }, true, false, 2, 10, false},
		{"a gap check past the summary budget: cut", 4096, true, func() (string, error) { return "- " + finding + "\n" + manyFindings, nil }, true, true, 2, 15, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sum := &scriptSum{answer: func(_ context.Context, req summarizer.Request) (summarizer.Result, error) {
				if isGapCheck(req) {
					s, err := tt.gap()
					return summarizer.Result{Summary: s, Usage: summarizer.Usage{InputTokens: 50, OutputTokens: 5, TotalTokens: 55}}, err
				}
				return summarizer.Result{Summary: "The user set up a listener.", Model: "sum-model", Usage: summarizer.Usage{InputTokens: 100, OutputTokens: 10, TotalTokens: 110}}, nil
			}}
			obs := &recObs{}
			e, _ := testEngine(t, sum, func(c *Config) {
				c.LedgerBytes, c.GapCheck, c.MaxSummaryTokens, c.Observer = tt.ledgerBytes, tt.gapCheck, budget, obs
			})
			in := request(e, items, 64_000)
			in.Tenant = "t1"
			c, err := e.Compact(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if sum.n() != tt.wantCalls {
				t.Errorf("%d summariser calls, want %d", sum.n(), tt.wantCalls)
			}
			if (c.Ledger != "") != tt.wantLedger {
				t.Fatalf("ledger %q, want one: %v", c.Ledger, tt.wantLedger)
			}
			if tt.wantLedger && !strings.Contains(c.Ledger, "7431") {
				t.Errorf("the ledger lacks the user's port: %q", c.Ledger)
			}
			if got := strings.Contains(c.Ledger, finding) && strings.Contains(c.Ledger, "### "+compact.GapCheckTitle); got != tt.wantFinding {
				t.Errorf("gap finding in the ledger = %v, want %v: %q", got, tt.wantFinding, c.Ledger)
			}
			if tt.wantLedger && !tt.wantFinding {
				// Without a finding the ledger is exactly the deterministic one.
				w := e.Partition(items, 64_000)
				if want := compact.Ledger(items, w.Summarise, tt.ledgerBytes); c.Ledger != want {
					t.Errorf("ledger\n%q\nwant\n%q", c.Ledger, want)
				}
			}
			if want := responsesDialect.Handoff(c.Summary, c.Ledger); c.Handoff != want {
				t.Errorf("handoff\n%q\nwant\n%q", c.Handoff, want)
			}
			if c.Usage.OutputTokens != tt.wantUsage {
				t.Errorf("usage %d output tokens, want %d", c.Usage.OutputTokens, tt.wantUsage)
			}
			if got := obs.has("truncated:responses"); got != tt.wantCut {
				t.Errorf("a gap check answer cut: %v, want %v", got, tt.wantCut)
			}
			if tt.wantCut && (strings.Contains(c.Ledger, "service 399 ") || !strings.Contains(c.Ledger, "service 0 ")) {
				t.Errorf("the gap check's answer was not cut to its budget: %d bytes of ledger", len(c.Ledger))
			}
			if tt.gapCheck && tt.wantCalls == 2 {
				gr := sum.requests()[1]
				if !isGapCheck(gr) || !strings.HasPrefix(gr.Entries[0], "[summary and ledger so far]\nThe user set up a listener.") {
					t.Errorf("the gap check was not given summary and ledger: %.80q", gr.Entries)
				}
			}
			o := openOK(t, e, c, responsesDialect.SealKind, "t1")
			if o.Payload.Ledger != c.Ledger || o.Payload.Summary != c.Summary || o.Payload.Model != "sum-model" {
				t.Errorf("sealed ledger %q summary %q model %q", o.Payload.Ledger, o.Payload.Summary, o.Payload.Model)
			}
		})
	}
}

// A compaction archives the raw items it summarised, byte for byte, except compactd's own
// handoff message (its originals are in the previous segment); the segment links to the previous
// compaction's, and the sealed payload names the segment, so the lineage can be walked back. Run
// against the real SQLite archive.
func TestCompactArchivesWithLineage(t *testing.T) {
	ctx := context.Background()
	var store archive.Store
	e, _ := testEngine(t, entriesSum(), func(c *Config) {
		sealer, err := archive.KeyringSealer(c.Sealer.(*crypto.Keyring), "")
		if err != nil {
			t.Fatal(err)
		}
		store, err = archive.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "archive.db"), sealer)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		c.Archive = store
	})
	compactTurn := func(items []api.Item, prev *Opened) *Compaction {
		t.Helper()
		in := request(e, items, 64_000)
		in.Tenant, in.Owner, in.Conversation, in.Prev = "t1", "own1", "conv-1", prev
		c, err := e.Compact(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	checkSegment := func(c *Compaction, want []api.Item, previous string) archive.Segment {
		t.Helper()
		ref := c.Payload.Archive
		if ref == nil || ref.ID == "" || ref.Conversation != "conv-1" || ref.Owner != "own1" {
			t.Fatalf("the payload's archive reference: %+v", ref)
		}
		seg, err := store.Get(ctx, "t1", ref.ID)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]string, len(seg.Items))
		for i, raw := range seg.Items {
			got[i] = string(raw)
		}
		if !slices.Equal(got, raws(want)) {
			t.Errorf("archived items\n%.50q\nwant\n%.50q", got, raws(want))
		}
		if seg.Previous != previous || seg.Owner != "own1" || seg.Conversation != "conv-1" || seg.Kind != archive.KindCompaction {
			t.Errorf("segment previous %q owner %q conversation %q kind %q", seg.Previous, seg.Owner, seg.Conversation, seg.Kind)
		}
		if seg.Meta["item"] != c.ID || seg.Meta["model"] != "sum-model" {
			t.Errorf("segment meta %v, want item %s", seg.Meta, c.ID)
		}
		return seg
	}

	sys := msg("system", "SYS: be brief")
	u1, a1, u2 := msg("user", "U1 "+words(2000)), msg("assistant", "A1 "+words(3000)), msg("user", "U2 "+words(200))
	c1 := compactTurn([]api.Item{sys, u1, a1, u2}, nil)
	checkSegment(c1, []api.Item{u1, a1, u2}, "")

	// The next compaction: the context as the first left it, grown by a turn.
	prev := openOK(t, e, c1, responsesDialect.SealKind, "t1")
	handoffItem := api.Item{Raw: api.UserMessage(c1.Handoff), Type: "message", Role: "user", Handoff: true}
	a2, u3 := msg("assistant", "A2 "+words(3000)), msg("user", "U3 go on")
	c2 := compactTurn([]api.Item{sys, u2, handoffItem, a2, u3}, prev)
	checkSegment(c2, []api.Item{u2, a2, u3}, c1.Payload.Archive.ID)
	if c2.Payload.Previous != c1.ID {
		t.Errorf("payload previous %q, want %q", c2.Payload.Previous, c1.ID)
	}
	lineage, err := store.Lineage(ctx, "t1", c2.Payload.Archive.ID)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range lineage {
		ids = append(ids, r.ID)
	}
	if want := []string{c2.Payload.Archive.ID, c1.Payload.Archive.ID}; !slices.Equal(ids, want) {
		t.Errorf("lineage %v, want %v", ids, want)
	}
	if lineage[0].Hash != c2.Payload.Archive.Hash {
		t.Errorf("the sealed hash %q is not the stored segment's %q", c2.Payload.Archive.Hash, lineage[0].Hash)
	}
}

// An archive that fails fails the compaction: nothing is returned to seal into the context and
// nothing is recorded in the memo, so the next turn compacts again instead of pointing at a
// segment that does not exist.
func TestCompactArchiveFailure(t *testing.T) {
	diskFull := errors.New("disk full")
	obs := &recObs{}
	m := memo.NewLocal(0, time.Hour)
	e, _ := testEngine(t, entriesSum(), func(c *Config) { c.Archive, c.Memo, c.Observer = &recArchive{err: diskFull}, m, obs })
	items := []api.Item{msg("user", words(2000)), msg("assistant", words(3000)), msg("user", "go on")}
	sc := Scope{Tenant: "t1", Conversation: "conv"}
	in := request(e, items, 64_000)
	in.Tenant, in.Conversation = "t1", "conv"
	in.Memory, in.Covers = e.Remembered(context.Background(), responsesDialect, sc, rawItems(items)), len(items)
	c, err := e.Compact(context.Background(), in)
	if !errors.Is(err, diskFull) || !strings.HasPrefix(err.Error(), "archive: ") || c != nil {
		t.Fatalf("Compact = %v, %v; want the archive's error", c, err)
	}
	if obs.has("memo:recorded") {
		t.Error("a compaction whose archive failed was recorded in the memo")
	}
	if got := e.Remembered(context.Background(), responsesDialect, sc, rawItems(items)); got == nil || got.Opened != nil {
		t.Error("the memo applies a compaction whose archive failed")
	}
}

// A gap check's answer cut to its budget is cut without the marker a cut summary gets: among the
// findings the marker would be sealed as a fact ("the summary was cut here"), which is not true
// of the summary, and carried forward into every later compaction's ledger.
func TestCompactGapCheckCutLeavesNoMarkerInTheLedger(t *testing.T) {
	var b strings.Builder
	for i := range 400 {
		fmt.Fprintf(&b, "- the service %d listens on port %d\n", i, 9000+i)
	}
	bigGap := true
	sum := &scriptSum{answer: func(_ context.Context, req summarizer.Request) (summarizer.Result, error) {
		switch {
		case isGapCheck(req) && bigGap:
			return summarizer.Result{Summary: b.String()}, nil
		case isGapCheck(req):
			return summarizer.Result{Summary: "Nothing missing."}, nil
		}
		return summarizer.Result{Summary: "The user set up the services.", Model: "sum-model"}, nil
	}}
	obs := &recObs{}
	e, _ := testEngine(t, sum, func(c *Config) {
		c.LedgerBytes, c.GapCheck, c.MaxSummaryTokens, c.Observer = 4096, true, 1000, obs
	})
	items := []api.Item{msg("user", "Let's use port 7431. "+words(1000)), msg("assistant", words(3000)), msg("user", "go on")}
	c1, err := e.Compact(context.Background(), request(e, items, 64_000))
	if err != nil {
		t.Fatal(err)
	}
	if !obs.has("truncated:responses") || !strings.Contains(c1.Ledger, "service 0 ") {
		t.Fatalf("the gap check's answer was not cut, or its findings lost: %v", obs.all())
	}
	const marker = "[compactd: the summary was cut here"
	if strings.Contains(c1.Ledger, marker) {
		t.Errorf("the cut marker is a finding in the ledger: %q", c1.Ledger[max(0, len(c1.Ledger)-120):])
	}

	// The next compaction carries the ledger forward from the handoff it replaces.
	bigGap = false
	next := []api.Item{
		{Raw: api.UserMessage(c1.Handoff), Type: "message", Role: "user", Handoff: true},
		msg("assistant", words(3000)), msg("user", "and now?"),
	}
	c2, err := e.Compact(context.Background(), request(e, next, 64_000))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c2.Ledger, "service 0 ") {
		t.Fatalf("the findings were not carried forward: %q", c2.Ledger)
	}
	if strings.Contains(c2.Ledger, marker) {
		t.Error("the cut marker is carried forward as a finding")
	}
}
