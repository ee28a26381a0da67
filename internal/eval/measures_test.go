package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/duplextest"
)

// TestEvalGrepFound: the grep column finds an answer's exact text in the raw log's strings (JSON
// escapes decoded) or in the text a question turn's request gave the model, and nowhere else:
// not in ids, a sealed payload, the request's tools or model, a near miss, or a document past
// the depth bound.
func TestEvalGrepFound(t *testing.T) {
	const quoted = `pq: duplicate key value violates unique constraint "tax_pkey" (row 4242)`
	raw := rawLogText([]json.RawMessage{
		js(map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "set retry_window: 4821ms"}}}),
		js(map[string]any{"type": "function_call_output", "call_id": "call_31337", "output": "error: " + quoted}),
		js(map[string]any{"type": "compaction", "id": "cmp_77", "encrypted_content": "QUJDRA9001zz"}),
	})
	turn := [][]byte{
		js(map[string]any{"model": "m-5150", "input": []any{map[string]any{"role": "user", "content": "summary: limit is 173"}},
			"tools": []any{map[string]any{"name": "t", "description": "default 8675"}}}),
		js(map[string]any{"messages": []any{map[string]any{"role": "tool", "tool_call_id": "call_2600", "content": "excerpt: internal/tax/rate.go:1203"}}}),
	}
	deep := []byte(strings.Repeat(`{"input":`, 20000) + `"123456"` + strings.Repeat(`}`, 20000))
	for _, tc := range []struct {
		name, answer     string
		turn             [][]byte
		found, inContext bool
	}{
		{"in a user message", "4821ms", nil, true, false},
		{"JSON-escaped in a tool output", quoted, nil, true, false},
		{"in the question turn's input", "173", turn, true, true},
		{"in a recall round's tool message", "internal/tax/rate.go:1203", turn, true, true},
		{"a call id is not text", "31337", turn, false, false},
		{"an item id is not text", "cmp_77", turn, false, false},
		{"a sealed payload is not text", "9001", turn, false, false},
		{"the tools are not context", "8675", turn, false, false},
		{"the model is not context", "5150", turn, false, false},
		{"a near miss", "4821 ms", turn, false, false},
		{"empty", "", turn, false, false},
		{"past the depth bound", "123456", [][]byte{deep}, false, false},
	} {
		found, in := grepFound(tc.answer, raw, tc.turn)
		if found != tc.found || in != tc.inContext {
			t.Errorf("%s: grepFound(%q) = %v, %v; want %v, %v", tc.name, tc.answer, found, in, tc.found, tc.inContext)
		}
	}
}

// TestEvalTap: the tap forwards every request to its upstream untouched (method, path, query,
// headers, body) and answers with the upstream's response; it records the bodies of POSTs only
// between arm and disarm, and disarm hands them over once.
func TestEvalTap(t *testing.T) {
	var got []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("X-Api-Key")+" "+string(b))
		w.Header().Set("X-Up", "1")
		_, _ = w.Write([]byte("answer to " + string(b)))
	}))
	defer up.Close()
	tp, err := startTap(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer tp.close()
	post := func(body string) string {
		req, _ := http.NewRequest(http.MethodPost, tp.base+"/v1/messages?beta=true", strings.NewReader(body))
		req.Header.Set("X-Api-Key", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.Header.Get("X-Up") != "1" {
			t.Errorf("the upstream's headers did not come back")
		}
		return string(b)
	}
	if r := post("one"); r != "answer to one" {
		t.Errorf("reply %q", r)
	}
	tp.arm()
	post("two")
	post("three")
	rec := tp.disarm()
	post("four")
	if want := []string{"two", "three"}; len(rec) != 2 || string(rec[0]) != want[0] || string(rec[1]) != want[1] {
		t.Errorf("recorded %q, want %q", rec, want)
	}
	if again := tp.disarm(); again != nil {
		t.Errorf("a second disarm returned %q", again)
	}
	// Past its limit the tap keeps no more bodies but still forwards every byte.
	tp.limit = 8
	tp.arm()
	post("five")
	post("a body longer than the room left")
	post("sixteen")
	if rec := tp.disarm(); len(rec) != 1 || string(rec[0]) != "five" {
		t.Errorf("over the limit, recorded %q, want only \"five\"", rec)
	}
	for i, w := range []string{"one", "two", "three", "four", "five", "a body longer than the room left", "sixteen"} {
		if want := "POST /v1/messages?beta=true k " + w; i >= len(got) || got[i] != want {
			t.Errorf("upstream request %d = %q, want %q", i, got, want)
			break
		}
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestEvalRatioOf(t *testing.T) {
	for _, tc := range []struct {
		sizes                       [][2]int
		n                           int
		mean, lo, hi, before, after float64
	}{
		{nil, 0, 0, 0, 0, 0, 0},
		{[][2]int{{1000, 250}}, 1, 0.75, 0.75, 0.75, 1000, 250},
		{[][2]int{{1000, 250}, {2000, 1500}, {400, 400}}, 3, (0.75 + 0.25 + 0) / 3, 0, 0.75, 3400.0 / 3, 2150.0 / 3},
	} {
		r := ratioOf(tc.sizes)
		near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
		if !r.Known || r.Compactions != tc.n || !near(r.Mean, tc.mean) || !near(r.Min, tc.lo) || !near(r.Max, tc.hi) ||
			!near(r.TokensBefore, tc.before) || !near(r.TokensAfter, tc.after) {
			t.Errorf("ratioOf(%v) = %+v", tc.sizes, r)
		}
	}
}

// checkMeasured holds for every run: each answer the model got right had its text in what
// compactd sent the model (the tap saw the question turn) and so counts for grep; the raw log
// carries every planted fact, so grep is every fact; and compactd reported (event log) as many
// compactions as the client saw, each replacing a share of the conversation in (0, 1).
func checkMeasured(t *testing.T, rep *Report, rounds int) {
	t.Helper()
	for _, row := range rep.Rows {
		for _, a := range row.Answers {
			if a.Correct && !a.InContext {
				t.Errorf("(%s) %q answered %q correctly, yet the tap saw no such text on the question turn", row.Variant.Name, a.Fact.Question, a.Got)
			}
			if !a.Grep {
				t.Errorf("(%s) grep missed %q, which the session planted", row.Variant.Name, a.Fact.Answer)
			}
		}
		for _, p := range row.Points {
			if p.Grep != p.Facts || p.Grep < p.Correct || p.GrepRecall != 1 {
				t.Errorf("(%s) after %d: grep %d of %d facts, %d correct", row.Variant.Name, p.Compactions, p.Grep, p.Facts, p.Correct)
			}
		}
		r := row.Ratio
		if !r.Known || r.Compactions != row.Cost.Compactions || r.Compactions != rounds || !(r.Min > 0 && r.Max < 1 && r.Min <= r.Mean && r.Mean <= r.Max) ||
			r.TokensAfter >= r.TokensBefore {
			t.Errorf("(%s) ratio %+v over %d client-seen compactions, want %d compactions replacing a share in (0, 1)", row.Variant.Name, r, row.Cost.Compactions, rounds)
		}
	}
}

// TestEvalSeedsAndSweep: --seeds pools the single-seed runs (each identical to a run of that
// seed alone), with each point's spread and per-kind minimum taken from them, and a sweep runs
// every budget, reusing the main run for the main budget; a larger retain budget keeps more of
// the conversation, which the measured ratio shows.
func TestEvalSeedsAndSweep(t *testing.T) {
	ctx := context.Background()
	cfg := ciConfig(1)
	cfg.Variants, cfg.Checkpoints = []string{"a", "b"}, []int{1, 3}
	cfg.Seeds, cfg.SweepRetain = []uint64{1, 2}, []int{32, 2048}
	var progress []int
	cfg.Progress = func(done, total int) { progress = append(progress, done, total) }
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 4 || len(rep.Sweep) != 2 || rep.Sweep[0].Retain != 32 || rep.Sweep[1].Retain != 2048 {
		t.Fatalf("%d runs, sweep %+v", len(rep.Runs), rep.Sweep)
	}
	if n := len(progress); n == 0 || progress[n-2] != progress[n-1] || progress[n-1] != 4*2*2*3 {
		t.Errorf("progress ended at %v, want 48/48", progress[max(0, n-2):])
	}
	for _, sd := range []uint64{1, 2} {
		one := ciConfig(sd)
		one.Variants, one.Checkpoints = cfg.Variants, cfg.Checkpoints
		alone, err := Run(ctx, one)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(stable(alone), stable(rep.Runs[sd-1])) {
			t.Errorf("seed %d pooled differs from seed %d alone", sd, sd)
		}
	}
	for i, row := range rep.Rows {
		for j, p := range row.Points {
			a, b := rep.Runs[0].Rows[i].Points[j], rep.Runs[1].Rows[i].Points[j]
			if p.Facts != a.Facts+b.Facts || p.Correct != a.Correct+b.Correct || p.Grep != a.Grep+b.Grep ||
				p.Spread == nil || p.Spread.Seeds != 2 || p.Spread.Min != min(a.Recall, b.Recall) || p.Spread.Max != max(a.Recall, b.Recall) {
				t.Errorf("(%s) after %d: pooled %+v from %+v and %+v", row.Variant.Name, p.Compactions, p, a, b)
			}
			for _, k := range Kinds {
				lo, want := p.MinByKind[k], Score{a.ByKind[k], a.KindFacts[k]}
				if bs := (Score{b.ByKind[k], b.KindFacts[k]}); bs.Facts > 0 && (want.Facts == 0 || bs.Correct*want.Facts < want.Correct*bs.Facts) {
					want = bs
				}
				if want.Facts > 0 && lo != want {
					t.Errorf("(%s) after %d, %s: min %+v, want %+v", row.Variant.Name, p.Compactions, k, lo, want)
				}
			}
		}
		if row.Ratio.Compactions != 2*2*3 || row.Cost.Compactions != 2*2*3 {
			t.Errorf("(%s) pooled ratio %+v, cost %+v: want 12 compactions", row.Variant.Name, row.Ratio, row.Cost)
		}
	}
	if !bytes.Equal(js(rep.Sweep[0].Rows), js(rep.Rows)) {
		t.Error("the sweep's main budget is not the main run")
	}
	for i := range rep.Rows {
		lo, hi := rep.Sweep[0].Rows[i].Ratio, rep.Sweep[1].Rows[i].Ratio
		if hi.Mean >= lo.Mean || hi.TokensAfter <= lo.TokensAfter {
			t.Errorf("(%s) retain 2048 replaced %.2f (%.0f after), retain 32 %.2f (%.0f after): want less replaced", rep.Rows[i].Variant.Name, hi.Mean, hi.TokensAfter, lo.Mean, lo.TokensAfter)
		}
	}
	for _, r := range rep.Runs {
		checkMeasured(t, r, 2*3)
	}

	// One seed in Seeds is that seed's plain run.
	cfg.Seeds, cfg.SweepRetain, cfg.Progress = []uint64{2}, nil, nil
	single, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stable(single), stable(rep.Runs[1])) || single.Runs != nil || single.Config.Seed != 2 {
		t.Error("--seeds with one seed is not that seed's run")
	}
}

func TestEvalConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Seeds = []uint64{1, 2, 1} }, "--seeds"},
		{func(c *Config) { c.SweepRetain = []int{32, 0} }, "--sweep-retain"},
		{func(c *Config) { c.SweepRetain, c.Compactd = []int{32}, "http://127.0.0.1:1" }, "--sweep-retain"},
		{func(c *Config) { c.SweepRetain, c.API, c.Shapes = []int{32, 512}, dialect.Messages, nil }, "--sweep-retain"},
		{func(c *Config) { c.API, c.Shapes = dialect.Chat, []string{ShapeCodex} }, "Responses"},
		{func(c *Config) { c.API, c.Shapes = dialect.Responses, []string{ShapeChatAgent} }, "Chat Completions"},
		{func(c *Config) { c.API, c.Shapes = dialect.Messages, []string{ShapeChatAgent} }, "--shapes"},
	} {
		c := ciConfig(1)
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", c, err, tc.want)
		}
	}
	if d := (Config{API: dialect.Chat}).withDefaults(); d.Turns != 1 || d.Threshold != 4000 || d.Steps != 48 || !slices.Equal(d.Shapes, []string{ShapeChatAgent}) {
		t.Errorf("Chat defaults: %d turns, threshold %d, %d steps, shapes %v", d.Turns, d.Threshold, d.Steps, d.Shapes)
	}
}

// TestEvalReportMeasures: the text, JSON and HTML reports show the grep row, the compaction
// ratio, the spread over seeds, per-kind tables at every checkpoint (HTML) and the sweep.
func TestEvalReportMeasures(t *testing.T) {
	rep := sampleReport()
	var text, page, j bytes.Buffer
	_ = rep.WriteText(&text)
	for _, want := range []string{"grep (raw log)", "   5/6  83%", "replaced", " 75%", "upper bound"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("single-seed text lacks %q:\n%s", want, text.String())
		}
	}
	_ = rep.WriteHTML(&page)
	h := page.String()
	if n := strings.Count(h, `class="kinds"`); n != len(rep.Config.Checkpoints) {
		t.Errorf("HTML has %d per-kind tables, want one per checkpoint (%d)", n, len(rep.Config.Checkpoints))
	}
	if !strings.Contains(h, `class="bound"`) || !strings.Contains(h, GrepColor) || strings.Contains(h, "sweep-chart") {
		t.Error("HTML lacks the grep line, or shows a sweep that did not run")
	}

	rep.Config.Seeds = []uint64{1, 2, 3}
	rep.Sweep = []Setting{{Retain: 32, Rows: rep.Rows}, {Retain: 512, Rows: rep.Rows}}
	for i := range rep.Rows {
		for j := range rep.Rows[i].Points {
			p := &rep.Rows[i].Points[j]
			p.Spread = &Spread{Seeds: 3, Min: p.Recall / 2, Max: 1}
			p.MinByKind = map[string]Score{KindCorrection: {Correct: 0, Facts: 2}}
		}
	}
	text.Reset()
	page.Reset()
	_ = rep.WriteText(&text)
	for _, want := range []string{"seeds 1, 2, 3", "pooled over 3 seeds", "[25–100]", "the lowest of 3 seeds", "0/2", "retain sweep", "512  (d) +recall"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("pooled text lacks %q:\n%s", want, text.String())
		}
	}
	_ = rep.WriteHTML(&page)
	h = page.String()
	if strings.Count(h, `class="series"`) != 4 || strings.Count(h, `class="sweep-series"`) != 4 || strings.Count(h, `class="sweep-ratio"`) != 4 ||
		!strings.Contains(h, `class="spread"`) || !strings.Contains(h, "(min 0/2)") || !strings.Contains(h, `id="sweep"`) {
		t.Error("pooled HTML lacks its spread, per-kind minimum or sweep")
	}
	for _, bad := range []string{"<script", "src=", "href=", "@import"} {
		if strings.Contains(h, bad) {
			t.Errorf("HTML report refers to an external asset or script (%q)", bad)
		}
	}
	_ = rep.WriteJSON(&j)
	if g := gjson.ParseBytes(j.Bytes()); g.Get("rows.0.points.0.grep").Int() != 5 || g.Get("rows.0.compaction_ratio.mean").Float() != 0.75 ||
		g.Get("rows.0.points.0.spread.seeds").Int() != 3 || g.Get("sweep.1.retain_tokens").Int() != 512 || g.Get("config.seeds.2").Int() != 3 {
		t.Errorf("JSON: %s", j.String()[:min(j.Len(), 800)])
	}
}

// TestEvalTapStreams: unarmed, the tap relays an answer that starts while the request body is
// still streaming (full duplex). Half duplex, the tap's server would drain the request body once
// the SSE headers went out; the client here sends its second half only after it has the headers,
// so that deadlocks and the guard's deadline fails the test.
func TestEvalTapStreams(t *testing.T) {
	const half = 32 << 10
	up := httptest.NewServer(duplextest.Upstream())
	defer up.Close()
	tp, err := startTap(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer tp.close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a guard against a hang, not a measurement
	defer cancel()
	status, got, err := duplextest.Post(ctx, http.DefaultClient, tp.base+"/v1/messages", half)
	if want := duplextest.Done(2 * half); err != nil || !strings.Contains(string(got), want) {
		t.Errorf("stream through the tap: %d %q, %v; want %q", status, got, err, want)
	}
}
