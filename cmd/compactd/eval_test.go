package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/eval"
	"github.com/compactd/compactd/internal/fakeupstream"
)

var ciEvalFlags = []string{"--sessions", "2", "--steps", "24", "--threshold", "2000", "--compactions", "1,3"}

// TestEvalCommand runs `compactd eval` end to end against the built-in fake upstream: the table
// on stdout, --json for scripts, --html for a report, the four configurations in the expected
// order, and no progress bar when stderr is not a terminal.
func TestEvalCommand(t *testing.T) {
	html := filepath.Join(t.TempDir(), "report.html")
	var stdout, stderr bytes.Buffer
	if err := evalMain(append(ciEvalFlags, "--html", html), &stdout, &stderr, false); err != nil {
		t.Fatalf("eval: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"(a) summary", "(b) +ledger", "(c) +gap check", "(d) +recall", "3 compactions", "by fact kind"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr is not a terminal, yet got %q", stderr.String())
	}
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(page, []byte("<svg")) || bytes.Count(page, []byte(`class="series"`)) != 4 {
		t.Error("the HTML report lacks its chart")
	}

	stdout.Reset()
	if err := evalMain(append(ciEvalFlags, "--json"), &stdout, &stderr, false); err != nil {
		t.Fatal(err)
	}
	rows := gjson.GetBytes(stdout.Bytes(), "rows").Array()
	if len(rows) != 4 {
		t.Fatalf("JSON has %d rows, want 4:\n%s", len(rows), stdout.String()[:min(stdout.Len(), 500)])
	}
	for i := range 2 {
		prev := -1.0
		for _, r := range rows {
			got := r.Get("points").Array()[i].Get("recall").Float()
			if got < prev {
				t.Errorf("checkpoint %d: (%s) recall %.2f below the previous configuration's %.2f", i, r.Get("config.name").Str, got, prev)
			}
			prev = got
		}
	}
}

func TestEvalCommandFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--compactions", "0"},
		{"--compactions", "x"},
		{"--shapes", "chat"},
		{"--configs", "e"},
		{"stray"},
		{"--upstream", "http://127.0.0.1:1"}, // no --model
		{"--compactd", "http://127.0.0.1:1"},
		{"--summarizer-key-env", "COMPACTD_EVAL_TEST_UNSET_VARIABLE"},
		{"--api", "grpc"},
		{"--api", "messages", "--shapes", "codex"},
		{"--api", "chat", "--shapes", "codex"},
		{"--api", "responses", "--shapes", "chat-agent"},
	} {
		var out, errb bytes.Buffer
		if err := evalMain(args, &out, &errb, false); err == nil {
			t.Errorf("eval %v: no error", args)
		}
	}
}

func TestEvalProgressBar(t *testing.T) {
	var b bytes.Buffer
	drawProgress(&b, 15, 30)
	if got := b.String(); got != "\r[###############...............] 15/30 rounds" {
		t.Errorf("progress bar %q", got)
	}
}

func TestEvalProgressOnTerminal(t *testing.T) {
	var out, errb bytes.Buffer
	if err := evalMain([]string{"--sessions", "1", "--steps", "12", "--threshold", "1000", "--compactions", "1", "--configs", "a"}, &out, &errb, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errb.String(), "] 1/1 rounds") || !strings.HasSuffix(errb.String(), "\r\033[K") {
		t.Errorf("progress on a terminal: %q", errb.String())
	}
	if strings.Contains(out.String(), "\r") {
		t.Error("progress leaked into stdout")
	}
}

// TestEvalCommandMessages runs `compactd eval --api messages` against a fake upstream given as
// --upstream, the way one runs it against Anthropic: the key comes from ANTHROPIC_API_KEY and
// arrives as x-api-key on /v1/messages, the summariser defaults to Chat Completions on the same
// upstream, the table names the route, and (d) +recall is measured there (compactd offers its
// recall tool on /v1/messages) and, in JSON after 10 compactions, scores at least (c), the
// ordering the Responses eval checks.
func TestEvalCommandMessages(t *testing.T) {
	d := eval.DefaultConfig()
	fake := fakeupstream.New(fakeupstream.Options{Summaries: fakeupstream.LossySummaries(d.Lossy), Answer: eval.Answer})
	fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	base, stop, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-cmd-test")
	common := []string{"--upstream", base, "--api", "messages", "--model", "claude-fake", "--summarizer-model", "fake-summariser",
		"--sessions", "1", "--steps", "10", "--threshold", "1000"}
	var stdout, stderr bytes.Buffer
	if err := evalMain(append(common, "--compactions", "1", "--configs", "a,d"), &stdout, &stderr, false); err != nil {
		t.Fatalf("eval: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "route /v1/messages") || strings.Contains(out, "n/a") {
		t.Errorf("table:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "(d) +recall") { // the recall row; the by-kind row comes later
			if !strings.Contains(line, "%") {
				t.Errorf("(d) is not measured on Messages: %q", line)
			}
			break
		}
	}
	kinds := map[string]int{}
	for _, r := range fake.Requests() {
		kinds[string(r.Kind)+" "+r.Path]++
		if r.Kind == dialect.Messages && r.Header.Get("X-Api-Key") != "sk-ant-cmd-test" {
			t.Errorf("Messages turn with x-api-key %q", r.Header.Get("X-Api-Key"))
		}
	}
	// One compaction each: (a) summarises once, (d) twice (the gap check).
	if kinds["summary /v1/chat/completions"] != 3 || kinds["messages /v1/messages"] == 0 || len(kinds) != 2 {
		t.Errorf("upstream saw %v: want Messages turns and three Chat Completions summariser calls", kinds)
	}

	stdout.Reset()
	if err := evalMain(append(common, "--compactions", "10", "--configs", "c,d", "--json"), &stdout, &stderr, false); err != nil {
		t.Fatal(err)
	}
	j := gjson.ParseBytes(stdout.Bytes())
	c, dd := j.Get("rows.0"), j.Get("rows.1")
	if j.Get("route").Str != "/v1/messages" || c.Get("config.name").Str != "c" || dd.Get("config.name").Str != "d" ||
		dd.Get("unavailable").Exists() || dd.Get("points.0.facts").Int() != 30 || c.Get("points.0.facts").Int() != 30 {
		t.Fatalf("JSON: %s", stdout.String()[:min(stdout.Len(), 600)])
	}
	if cr, dr := c.Get("points.0.recall").Float(), dd.Get("points.0.recall").Float(); dr < cr {
		t.Errorf("after 10 compactions on Messages (d) recall %.2f below (c) %.2f", dr, cr)
	}
}

// Every numeric flag of eval is checked: a value the run would silently replace by its default
// (0 or negative), a chance outside 0..1, a count that is not a number, and a compaction count
// past the bound are usage errors (exit status 2, naming the flag), not a run with defaults or
// one that never ends. The rest of each command line is a small run, so that before the check
// existed the case ran (and passed) quickly.
func TestEvalNumericFlagsAreUsageErrors(t *testing.T) {
	small := []string{"--sessions", "1", "--steps", "12", "--threshold", "1000", "--compactions", "1", "--configs", "a"}
	for _, tc := range []struct {
		args []string
		flag string // named in the message
	}{
		{[]string{"--threshold", "-5"}, "--threshold"},
		{[]string{"--threshold", "0"}, "--threshold"},
		{[]string{"--sessions", "0"}, "--sessions"},
		{[]string{"--sessions", "-2"}, "--sessions"},
		{[]string{"--steps", "0"}, "--steps"},
		{[]string{"--facts", "0"}, "--facts"},
		{[]string{"--turns", "-1"}, "--turns"},
		{[]string{"--retain-tokens", "0"}, "--retain-tokens"},
		{[]string{"--ledger-bytes", "0"}, "--ledger-bytes"},
		{[]string{"--lossy-keep", "1.5"}, "--lossy-keep"},
		{[]string{"--lossy-keep", "-0.1"}, "--lossy-keep"},
		{[]string{"--lossy-max-lines", "0"}, "--lossy-max-lines"},
		{[]string{"--compactions", "a"}, "--compactions"},
		{[]string{"--compactions", "1,,3"}, "--compactions"},
		{[]string{"--compactions", "0"}, "--compactions"},
		{[]string{"--compactions", "100000000"}, "--compactions"},
		{[]string{"--shapes", "chat"}, "--shapes"},
		{[]string{"--configs", "e"}, "--configs"},
		{[]string{"--api", "grpc"}, "--api"},
		{[]string{"--upstream", "http://127.0.0.1:1"}, "--model"},
		{[]string{"--seeds", "0"}, "--seeds"},
		{[]string{"--seeds", "x"}, "--seeds"},
		{[]string{"--seeds", "1,x"}, "--seeds"},
		{[]string{"--seeds", "1,2,1"}, "--seeds"},
		{[]string{"--seeds", "1,-2"}, "--seeds"},
		{[]string{"--seeds", "101"}, "--seeds"},
		{[]string{"--seeds", "3", "--seed", "2"}, "--seed"},
		{[]string{"--sweep-retain", "32,0"}, "--sweep-retain"},
		{[]string{"--sweep-retain", "32,,512"}, "--sweep-retain"},
		{[]string{"--sweep-retain", "1,2,3,4,5,6,7,8,9,10,11"}, "--sweep-retain"},
		{[]string{"--sweep-retain", "32", "--compactd", "http://127.0.0.1:1", "--model", "m"}, "--sweep-retain"},
		{[]string{"--api", "chat", "--shapes", "claude-code"}, "--shapes"},
		{[]string{"--api", "messages", "--sweep-retain", "32,512"}, "--sweep-retain"},
	} {
		var out, errb bytes.Buffer
		err := evalMain(append(slices.Clone(small), tc.args...), &out, &errb, false)
		var ue *usageError
		if !errors.As(err, &ue) || ue.cmd != "eval" || !strings.Contains(ue.msg, tc.flag) {
			t.Errorf("eval %v: err = %v, want a usage error of eval naming %s", tc.args, err, tc.flag)
		}
	}
	// The exit status of a usage error.
	if code := run([]string{"eval", "--compactions", "a"}); code != 2 {
		t.Errorf("compactd eval --compactions a: exit status %d, want 2", code)
	}
}

func TestEvalParseSeeds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []uint64
	}{
		{"", nil},
		{"5", []uint64{1, 2, 3, 4, 5}},
		{" 2 ", []uint64{1, 2}},
		{"1,2,3", []uint64{1, 2, 3}},
		{"7,", nil}, // an empty member is an error
		{"0,18446744073709551615", []uint64{0, 18446744073709551615}},
	} {
		got, err := parseSeeds(tc.in)
		if tc.in == "7," {
			if err == nil {
				t.Errorf("parseSeeds(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseSeeds(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestEvalCommandMeasures runs `compactd eval` with the new measures end to end against the
// built-in fake: --seeds (pooled recall with its spread, the per-kind minimum), --sweep-retain
// (the measured compaction ratio per budget), the grep row, and --api chat (chat-agent sessions
// on /v1/chat/completions under the Chat policy, with the route's own defaults), in the table,
// the JSON and the HTML report.
func TestEvalCommandMeasures(t *testing.T) {
	small := []string{"--sessions", "1", "--compactions", "1,2", "--configs", "a,d"}
	html := filepath.Join(t.TempDir(), "report.html")
	var stdout, stderr bytes.Buffer
	if err := evalMain(append(slices.Clone(small), "--seeds", "2", "--sweep-retain", "32,2048", "--html", html), &stdout, &stderr, false); err != nil {
		t.Fatalf("eval: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"seeds 1, 2", "pooled over 2 seeds", "%% [", "grep (raw log)", "replaced", "the lowest of 2 seeds", "retain sweep", "2048  (d) +recall"} {
		if !strings.Contains(stdout.String(), strings.ReplaceAll(want, "%%", "%")) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(page, []byte(`id="sweep-chart"`)) || bytes.Count(page, []byte(`class="kinds"`)) != 2 || !bytes.Contains(page, []byte(`id="sweep"`)) {
		t.Error("the HTML report lacks its sweep chart and table or its per-kind tables")
	}

	stdout.Reset()
	if err := evalMain(append(slices.Clone(small), "--api", "chat", "--json"), &stdout, &stderr, false); err != nil {
		t.Fatalf("eval --api chat: %v\n%s", err, stderr.String())
	}
	j := gjson.ParseBytes(stdout.Bytes())
	if j.Get("route").Str != "/v1/chat/completions" || j.Get("config.shapes.0").Str != "chat-agent" || j.Get("config.turns").Int() != 1 ||
		j.Get("config.threshold").Int() != 4000 || j.Get("config.steps").Int() != 48 {
		t.Fatalf("JSON: %s", stdout.String()[:min(stdout.Len(), 600)])
	}
	for _, r := range j.Get("rows").Array() {
		if r.Get("compaction_ratio.compactions").Int() != 2 || r.Get("points.1.grep").Int() != r.Get("points.1.facts").Int() || r.Get("points.1.facts").Int() != 6 {
			t.Errorf("(%s) ratio %s, grep %d of %d", r.Get("config.name").Str, r.Get("compaction_ratio").Raw, r.Get("points.1.grep").Int(), r.Get("points.1.facts").Int())
		}
	}
	if a, d := j.Get("rows.0.points.1.recall").Float(), j.Get("rows.1.points.1.recall").Float(); d <= a {
		t.Errorf("on chat (d) recall %.2f, (a) %.2f: want recall better", d, a)
	}
}
