package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/fakeupstream"
)

// ciConfig is the CI-sized run: two sessions (one per shape), three compactions.
func ciConfig(seed uint64) Config {
	c := DefaultConfig()
	c.Seed, c.Sessions, c.Steps, c.Threshold, c.Checkpoints = seed, 2, 24, 2000, []int{1, 3}
	return c
}

func TestEvalCorrect(t *testing.T) {
	for _, tc := range []struct {
		got, want string
		ok        bool
	}{
		{"(*Frame, []Lease, error)", "(*Frame, []Lease, error)", true},
		{"  `(*Frame, []Lease, error)`\n", "(*Frame, []Lease, error)", true},
		{"Answer: 4821ms.", "4821ms", true},
		{`"internal/wal/lease.go:1203"`, "internal/wal/lease.go:1203", true},
		{"4821", "4821ms", false},
		{"4821ms or 4822ms", "4821ms", false},
		{"unknown", "4821ms", false},
		{"", "4821ms", false},
		{"The value is 4821ms", "4821ms", false}, // exact match, not containment
	} {
		if got := Correct(tc.got, tc.want); got != tc.ok {
			t.Errorf("Correct(%q, %q) = %v, want %v", tc.got, tc.want, got, tc.ok)
		}
	}
}

// itemsText is what the fake upstream reads: every string of the items.
func itemsText(items []json.RawMessage) string {
	var b strings.Builder
	for _, it := range items {
		var walk func(r gjson.Result)
		walk = func(r gjson.Result) {
			switch {
			case r.Type == gjson.String:
				b.WriteString(r.Str + "\n")
			case r.IsObject() || r.IsArray():
				r.ForEach(func(_, v gjson.Result) bool { walk(v); return true })
			}
		}
		walk(gjson.ParseBytes(it))
	}
	return b.String()
}

// TestEvalAnswer checks the fake model's reading on known contexts: every kind, in every shape,
// is answered from the raw items; nothing is answered from a context without them; a correction
// beats what it corrected; and the ledger's rendering of a signature and an error still answers.
func TestEvalAnswer(t *testing.T) {
	for _, shape := range Shapes {
		g := newGen(7)
		for _, kind := range Kinds {
			steps, f := g.plant(kind, 1)
			seq := 0
			render := func(st []Step) []json.RawMessage { return Render(shape, st, &seq) }
			if shape == ShapeChatAgent {
				render = func(st []Step) []json.RawMessage { return RenderChat(nil, st, &seq) }
			}
			items := render(append([]Step{g.noise(), g.noise()}, steps...))
			ctx := itemsText(items) + f.Question
			got, query, ok := Answer(f.Question, ctx)
			if !ok || got != f.Answer {
				t.Errorf("%s %s: Answer = %q, %v; want %q", shape, kind, got, ok, f.Answer)
			}
			if query == "" || strings.Contains(query, f.Answer) {
				t.Errorf("%s %s: query %q must name the subject, not the answer", shape, kind, query)
			}
			got, query2, ok := Answer(f.Question, itemsText(render([]Step{g.noise()}))+f.Question)
			if !ok || got != "" || query2 != query {
				t.Errorf("%s %s without the fact: Answer = %q, %q, %v; want \"\", %q, true", shape, kind, got, query2, ok, query)
			}
		}
	}
	if _, _, ok := Answer("Thanks. Next, look at the wal package.", "anything"); ok {
		t.Error("a session turn was taken for a question")
	}

	// The ledger renders signatures without the brace and errors as code spans.
	g := newGen(3)
	var apiItems []api.Item
	var facts []Fact
	for _, kind := range []string{KindReturnType, KindError, KindCorrection} {
		steps, f := g.plant(kind, 1)
		facts = append(facts, f)
		seq := 0
		for _, raw := range Render(ShapeCodex, steps, &seq) {
			apiItems = append(apiItems, api.Item{Raw: raw, Type: gjson.GetBytes(raw, "type").Str, Role: gjson.GetBytes(raw, "role").Str})
		}
	}
	idx := make([]int, len(apiItems))
	for i := range idx {
		idx[i] = i
	}
	ledger := compact.Ledger(apiItems, idx, 6144)
	for _, f := range facts {
		if got, _, _ := Answer(f.Question, ledger); got != f.Answer {
			t.Errorf("from the ledger, %s: Answer = %q, want %q\nledger:\n%s", f.Kind, got, f.Answer, ledger)
		}
	}
}

func TestEvalSessionSeeded(t *testing.T) {
	a, b := Session(9, 3, 12, 3, 3), Session(9, 3, 12, 3, 3)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatal("the same seed gave different sessions")
	}
	jc, _ := json.Marshal(Session(10, 3, 12, 3, 3))
	if bytes.Equal(ja, jc) {
		t.Fatal("different seeds gave the same session")
	}
	kinds := map[string]bool{}
	for _, r := range a {
		if len(r.Facts) != 3 || len(r.Turns) != 3 {
			t.Fatalf("round has %d facts in %d turns, want 3 in 3", len(r.Facts), len(r.Turns))
		}
		for _, f := range r.Facts {
			kinds[f.Kind] = true
		}
	}
	if len(kinds) != len(Kinds) {
		t.Errorf("three rounds planted %d kinds, want all %d", len(kinds), len(Kinds))
	}
}

// stable zeroes what depends on the clock.
func stable(r *Report) []byte {
	for i := range r.Rows {
		r.Rows[i].Cost.LatencyMS = 0
	}
	b, _ := json.Marshal(r)
	return b
}

// TestEvalRun runs the CI-sized evaluation against the fake upstream: the four configurations
// come out in the expected order at every checkpoint, recall is strictly better than the summary
// alone, and the same seed reproduces the report byte for byte (latency aside).
func TestEvalRun(t *testing.T) {
	ctx := context.Background()
	rep, err := Run(ctx, ciConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rep.Rows))
	}
	for i := range rep.Config.Checkpoints {
		for r := 1; r < len(rep.Rows); r++ {
			lo, hi := rep.Rows[r-1].Points[i], rep.Rows[r].Points[i]
			if lo.Correct > hi.Correct {
				t.Errorf("after %d compactions (%s) answered %d > (%s) %d", lo.Compactions,
					rep.Rows[r-1].Variant.Name, lo.Correct, rep.Rows[r].Variant.Name, hi.Correct)
			}
		}
		if a, d := rep.Rows[0].Points[i], rep.Rows[3].Points[i]; d.Correct <= a.Correct || a.Facts != d.Facts || a.Facts == 0 {
			t.Errorf("after %d compactions: summary %d/%d, recall %d/%d: want recall strictly better", a.Compactions, a.Correct, a.Facts, d.Correct, d.Facts)
		}
	}
	for _, row := range rep.Rows {
		if row.Cost.Compactions != 2*3 || row.Cost.InputTokens <= 0 {
			t.Errorf("(%s) cost %+v: want 6 compactions with tokens", row.Variant.Name, row.Cost)
		}
		wantCalls := 1.0
		if row.Variant.Gap {
			wantCalls = 2 // the gap-check pass
		}
		if row.Cost.Calls != wantCalls {
			t.Errorf("(%s) %.1f summariser calls per compaction, want %.0f", row.Variant.Name, row.Cost.Calls, wantCalls)
		}
		for _, a := range row.Answers {
			if a.Correct != (a.Got == a.Fact.Answer) {
				t.Errorf("answer %q to %q scored %v", a.Got, a.Fact.Question, a.Correct)
			}
		}
	}
	checkMeasured(t, rep, 2*3)
	again, err := Run(ctx, ciConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stable(rep), stable(again)) {
		t.Error("two runs with the same seed differ")
	}
	other, err := Run(ctx, ciConfig(2))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(stable(rep), stable(other)) {
		t.Error("runs with different seeds are identical")
	}
}

func TestEvalReportFormats(t *testing.T) {
	rep := sampleReport()
	var text, js, page bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"(a) summary", "(b) +ledger", "(c) +gap check", "(d) +recall", "10 compactions", "3/6  50%", "user correction"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(js.Bytes(), "rows.3.points.0.recall").Float(); got != 1 {
		t.Errorf("JSON rows.3.points.0.recall = %v, want 1", got)
	}
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	h := page.String()
	if strings.Count(h, `class="series"`) != 4 || !strings.Contains(h, "<svg") {
		t.Errorf("HTML report lacks its four series")
	}
	for _, bad := range []string{"<script", "src=", "href=", "@import"} {
		if strings.Contains(h, bad) {
			t.Errorf("HTML report refers to an external asset or script (%q)", bad)
		}
	}
}

// sampleReport is a fixed report: recall rising from (a) to (d).
func sampleReport() *Report {
	cfg := DefaultConfig()
	rep := &Report{Config: cfg.withDefaults(), Upstream: "fake"}
	for i, v := range Variants {
		row := Row{Variant: v, Cost: Cost{Known: true, Compactions: 10, Calls: 1, InputTokens: 1000, OutputTokens: 100, LatencyMS: 2},
			Ratio: Ratio{Known: true, Compactions: 10, Mean: 0.75, Min: 0.5, Max: 0.9, TokensBefore: 4000, TokensAfter: 1000}}
		for _, k := range cfg.Checkpoints {
			facts := 6 * k
			correct := facts * (i + 1) / 4
			if i < 3 {
				correct = correct * 2 / (k + 1)
			}
			row.Points = append(row.Points, Point{Compactions: k, Facts: facts, Correct: correct, Recall: float64(correct) / float64(facts),
				ByKind: map[string]int{KindCorrection: i}, KindFacts: map[string]int{KindCorrection: 5},
				Grep: facts * 5 / 6, GrepRecall: 5.0 / 6, GrepByKind: map[string]int{KindCorrection: 5}})
		}
		rep.Rows = append(rep.Rows, row)
	}
	return rep
}

// TestEvalExternalCompactd measures a compactd that is already running (here configuration (d)
// in front of the fake): one "external" row, cost unknown, and the same scores as the in-process
// run of that configuration.
func TestEvalExternalCompactd(t *testing.T) {
	ctx := context.Background()
	cfg := ciConfig(1)
	full := cfg.withDefaults()
	fake := fakeupstream.New(fakeupstream.Options{DropBodies: true, Summaries: fakeupstream.LossySummaries(full.Lossy), Answer: Answer})
	fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	upBase, stopFake, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stopFake()
	full.SummarizerModel = "fake-summariser"
	base, _, stop, err := startCompactd(ctx, full, upBase, upBase, Variants[3])
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ext := cfg
	ext.Compactd = base
	rep, err := Run(ctx, ext)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Variant.Name != "external" || rep.Rows[0].Cost.Known {
		t.Fatalf("rows %+v: want one external row without cost", rep.Rows)
	}
	cfg.Variants = []string{"d"}
	in, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range rep.Rows[0].Points {
		if q := in.Rows[0].Points[i]; p.Correct != q.Correct || p.Facts != q.Facts {
			t.Errorf("after %d compactions: external %d/%d, in-process (d) %d/%d", p.Compactions, p.Correct, p.Facts, q.Correct, q.Facts)
		}
	}
	var text bytes.Buffer
	_ = rep.WriteText(&text)
	if !strings.Contains(text.String(), "n/a (external compactd)") {
		t.Errorf("text report: %s", text.String())
	}
}
