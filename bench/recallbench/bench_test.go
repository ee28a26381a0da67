package recallbench

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/api"
)

// small is the size the tests run: ten rounds of 20 steps, four facts each (40 facts, ~200 KB).
func small(t *testing.T, excerpts string) Config {
	return Config{Seed: 7, Checkpoints: []int{1, 3, 10}, Steps: 20, FactsPerRound: 4, Excerpts: excerpts, Dir: t.TempDir()}
}

func TestRecallBenchReach(t *testing.T) {
	cfg := small(t, "") // the default: archive.Search's excerpts
	rs, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + Markdown(cfg, rs))
	if len(rs) != 3 {
		t.Fatalf("got %d checkpoints, want 3", len(rs))
	}
	for _, r := range rs {
		if r.Facts != 4*r.Compactions {
			t.Errorf("%d compactions: %d facts, want %d", r.Compactions, r.Facts, 4*r.Compactions)
		}
		if !(r.Recall >= r.Ledger && r.Ledger >= r.Summary) {
			t.Errorf("%d compactions: want (c) >= (b) >= (a), got %d %d %d", r.Compactions, r.Recall, r.Ledger, r.Summary)
		}
	}
	last := rs[len(rs)-1]
	a, b, c := last.Share()
	if c < 0.95 {
		t.Errorf("(c) after %d compactions = %.2f, want >= 0.95", last.Compactions, c)
	}
	// the summariser is lossy by construction and the ledger is bounded: if either alone found
	// nearly everything, the bench would not be measuring recall
	if a > 0.5 || b >= c && c < 1 {
		t.Errorf("shares (a) %.2f (b) %.2f (c) %.2f: the bench does not exercise recall", a, b, c)
	}
	if last.LedgerBytes > cfg.withDefaults().LedgerBudget {
		t.Errorf("ledger %d bytes over budget", last.LedgerBytes)
	}
}

func TestRecallBenchDeterministic(t *testing.T) {
	ctx := context.Background()
	r1, err := Run(ctx, small(t, ExcerptArchive))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Run(ctx, small(t, ExcerptArchive))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r1, r2) {
		t.Errorf("same seed, different results:\n%+v\n%+v", r1, r2)
	}
	for _, r := range r1 { // the archive's own excerpts still satisfy the ordering
		if !(r.Recall >= r.Ledger && r.Ledger >= r.Summary) {
			t.Errorf("archive excerpts, %d compactions: %d %d %d", r.Compactions, r.Recall, r.Ledger, r.Summary)
		}
	}
}

func TestGeneratedFactsAreUnique(t *testing.T) {
	g := newGen(3)
	seen := map[string]bool{}
	var all strings.Builder
	for k := 1; k <= 5; k++ {
		items, _, facts := g.round(k, 12, 4)
		for _, it := range items {
			all.Write(it.Raw)
		}
		for _, f := range facts {
			if seen[f.Answer] {
				t.Errorf("answer %q planted twice", f.Answer)
			}
			seen[f.Answer] = true
			if f.Query == "" || f.Question == "" {
				t.Errorf("fact %+v lacks a question or query", f)
			}
		}
	}
	raw := all.String()
	for a := range seen {
		// answers are JSON-escaped in raw items; every planted answer must be in the session
		if !strings.Contains(raw, strings.ReplaceAll(a, "\t", `\t`)) {
			t.Errorf("answer %q not in the generated items", a)
		}
	}
}

func TestLossySummaryDropsToolOutput(t *testing.T) {
	items := []api.Item{
		userItem("Fix the parser. Don't use regexp: it is too slow."),
		assistantItem("Looking."),
		assistantItem("Done, tests pass."),
	}
	g := newGen(1)
	items = append(items, g.exec("cat deploy/x.yaml", 0, "secret_value: 12345")...)
	got := lossySummary("earlier", items)
	want := "earlier\n- The user asked: Fix the parser.\n- Last reply: Done, tests pass."
	if got != want {
		t.Errorf("lossySummary = %q, want %q", got, want)
	}
}

func TestExcerptStrategies(t *testing.T) {
	ctx := context.Background()
	byMode := map[string][]Result{}
	for _, mode := range []string{"", ExcerptArchive, ExcerptFocused, ExcerptSegment} {
		rs, err := Run(ctx, small(t, mode))
		if err != nil {
			t.Fatalf("%q: %v", mode, err)
		}
		byMode[mode] = rs
	}
	// the default and the legacy name measure the archive's own excerpts, what the proxy returns
	for _, mode := range []string{"", ExcerptFocused} {
		if !reflect.DeepEqual(byMode[mode], byMode[ExcerptArchive]) {
			t.Errorf("%q differs from %q:\n%+v\n%+v", mode, ExcerptArchive, byMode[mode], byMode[ExcerptArchive])
		}
	}
	// a whole segment holds every excerpt cut from it: the upper bound is never below
	for i, r := range byMode[ExcerptSegment] {
		if a := byMode[ExcerptArchive][i]; r.Recall < a.Recall {
			t.Errorf("%d compactions: segment bound %d < excerpts %d", r.Compactions, r.Recall, a.Recall)
		}
	}
	if _, err := Run(ctx, small(t, "nonsense")); err == nil {
		t.Error("unknown excerpt strategy accepted")
	}
}
