package compact

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/handoff"
)

// Helpers that build items the way Codex sends them.

func jsonStr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func lUser(text string) string {
	return `{"type":"message","role":"user","content":[{"type":"input_text","text":` + jsonStr(text) + `}]}`
}

func lAssistant(text string) string {
	return `{"type":"message","role":"assistant","content":[{"type":"output_text","text":` + jsonStr(text) + `}]}`
}

func execCall(id, cmd string) string {
	return `{"type":"function_call","call_id":"` + id + `","name":"exec_command","arguments":` +
		jsonStr(`{"cmd":`+jsonStr(cmd)+`,"workdir":"/home/dev/project"}`) + `}`
}

func shellCall(id string, argv ...string) string {
	a, _ := json.Marshal(map[string]any{"command": argv, "workdir": "/home/dev/project"})
	return `{"type":"function_call","call_id":"` + id + `","name":"shell","arguments":` + jsonStr(string(a)) + `}`
}

func callOutput(id, out string) string {
	return `{"type":"function_call_output","call_id":"` + id + `","output":` + jsonStr(out) + `}`
}

func codexExecOutput(code int, out string) string {
	return fmt.Sprintf("Chunk ID: 7f3a\nWall time: 0.4120 seconds\nProcess exited with code %d\nOriginal token count: 42\nOutput:\n%s", code, out)
}

func patchCall(id, patch string) string {
	return `{"type":"custom_tool_call","call_id":"` + id + `","name":"apply_patch","input":` + jsonStr(patch) + `}`
}

func ledgerOf(raws ...string) string {
	items := make([]api.Item, len(raws))
	idx := make([]int, len(raws))
	for i, r := range raws {
		items[i] = item(r)
		idx[i] = i
	}
	return Ledger(items, idx, 1<<20)
}

// section returns the bullets of one category of a rendered ledger.
func section(ledger, title string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(ledger, "\n") {
		switch {
		case strings.HasPrefix(line, "### "):
			in = line == "### "+title
		case in && strings.HasPrefix(line, "- "):
			out = append(out, line[2:])
		}
	}
	return out
}

func TestLedgerCategories(t *testing.T) {
	cases := []struct {
		name    string
		items   []string
		section string
		want    []string // each must be a bullet of section
		notWant []string // none may appear anywhere in the ledger
	}{
		{
			name:    "decisions from user sentences",
			items:   []string{lUser("Fix the flaky test. Let's use a fake clock instead of sleeping. The CI box is slow.\nNever touch vendor/.")},
			section: "User said",
			want:    []string{"Let's use a fake clock instead of sleeping.", "Never touch vendor/."},
			notWant: []string{"Fix the flaky test.", "The CI box is slow."},
		},
		{
			name:    "no decisions from assistant or injected context",
			items:   []string{lAssistant("We must always refactor."), lUser("<environment_context>\n  <cwd>/home/dev/project</cwd> you must use bash\n</environment_context>"), lUser("The user is confused because of it.")},
			section: "User said",
			notWant: []string{"We must always refactor", "you must use bash", "The user is confused"},
		},
		{
			name: "errors verbatim from tool output, de-duplicated, code excluded",
			items: []string{
				execCall("c1", "go test ./internal/..."),
				callOutput("c1", codexExecOutput(1, "--- FAIL: TestParse (0.00s)\n    parse_test.go:41: got 3, want 4\nFAIL\tgithub.com/x/y/internal/parse\t0.012s\npanic: runtime error: index out of range [5] with length 5\n\treturn fmt.Errorf(\"wrap: %w\", err)\nok  \tgithub.com/x/y/internal/util\t0.003s\nimport (\n\t\"errors\"\n)")),
				execCall("c2", "python3 run.py"),
				callOutput("c2", codexExecOutput(1, "Traceback (most recent call last):\n  File \"run.py\", line 3, in <module>\nValueError: invalid literal for int() with base 10: 'x'\npanic: runtime error: index out of range [5] with length 5")),
			},
			section: "Errors",
			want: []string{
				"`--- FAIL: TestParse (0.00s)`", "`FAIL github.com/x/y/internal/parse 0.012s`",
				"`panic: runtime error: index out of range [5] with length 5`",
				"`Traceback (most recent call last):`", "`ValueError: invalid literal for int() with base 10: 'x'`",
			},
			notWant: []string{"fmt.Errorf", "ok  ", "`FAIL`", `"errors"`},
		},
		{
			name: "commands with exit status",
			items: []string{
				execCall("c1", "go build ./..."), callOutput("c1", codexExecOutput(0, "")),
				shellCall("c2", "bash", "-lc", "make lint"), callOutput("c2", `{"output":"lint failed\n","metadata":{"exit_code":2,"duration_seconds":1.2}}`),
				shellCall("c3", "rg", "-n", "retryBudget", "internal"), callOutput("c3", "Exit code: 1\nWall time: 0.1 seconds\nOutput:\n"),
				`{"type":"local_shell_call","call_id":"c4","status":"completed","action":{"type":"exec","command":["ls","-la"],"working_directory":"/tmp"}}`,
				callOutput("c4", "total 0\nexit status 0"),
			},
			section: "Commands",
			want:    []string{"`go build ./...` → exit 0", "`make lint` → exit 2", "`rg -n retryBudget internal` → exit 1", "`ls -la` → exit 0"},
		},
		{
			name: "paths from patches, arguments, commands and output",
			items: []string{
				patchCall("p1", "*** Begin Patch\n*** Update File: internal/config/parse.go\n@@\n-old\n+new\n*** Add File: docs/notes.md\n+hi\n*** Delete File: old/legacy.go\n*** End Patch"),
				`{"type":"function_call","call_id":"r1","name":"read_file","arguments":"{\"path\":\"cmd/server/main.go\"}"}`,
				execCall("c1", "sed -n 1,80p pkg/store/sqlite.go"),
				callOutput("c1", codexExecOutput(0, "see web/app.ts for details; visit https://example.com/x\nlisted.go")),
			},
			section: "Files",
			want:    []string{"`internal/config/parse.go`", "`docs/notes.md`", "`old/legacy.go`", "`cmd/server/main.go`", "`pkg/store/sqlite.go`", "`web/app.ts`"},
			notWant: []string{"example.com", "`listed.go`"},
		},
		{
			name: "apply_patch through the shell is a patch",
			items: []string{
				shellCall("s1", "apply_patch", "*** Begin Patch\n*** Update File: a/b.go\n+func Added(x int) (string, error) {\n*** End Patch"),
			},
			section: "Files",
			want:    []string{"`a/b.go`"},
			notWant: []string{"apply_patch"},
		},
		{
			name: "signatures from code output, grep output and patches",
			items: []string{
				execCall("c1", "sed -n 1,40p internal/config/parse.go"),
				callOutput("c1", codexExecOutput(0, "package config\n\ntype Config struct {\n\tPort int\n}\n\nfunc parseConfig(path string) (*Config, error) {\n\treturn nil, nil\n}\n\nfunc (s *Server) Start(ctx context.Context) error {")),
				execCall("c2", "rg -n 'def ' tools"),
				callOutput("c2", codexExecOutput(0, "tools/gen.py:12:def render(tmpl: str, *, strict: bool = False) -> str:\ntools/gen.py:40:class Renderer(Base):")),
				patchCall("p1", "*** Begin Patch\n*** Update File: web/api.ts\n+export async function fetchUser(id: string): Promise<User> {\n+export interface User {\n*** End Patch"),
			},
			section: "Signatures",
			want: []string{
				"`type Config struct`", "`func parseConfig(path string) (*Config, error)`", "`func (s *Server) Start(ctx context.Context) error`",
				// a grep line keeps where the declaration is
				"`tools/gen.py:12: def render(tmpl: str, *, strict: bool = False) -> str`", "`tools/gen.py:40: class Renderer(Base)`",
				"`export async function fetchUser(id: string): Promise<User>`", "`export interface User`",
			},
		},
		{
			name: "values: config lines, env, ports, versions, line refs",
			items: []string{
				execCall("c1", "PORT=8088 GOFLAGS=-mod=mod go run ./cmd/server"),
				callOutput("c1", codexExecOutput(0, "listening on 127.0.0.1:8088\ngo version go1.26.8 linux/amd64")),
				execCall("c2", "cat config/server.yaml"),
				callOutput("c2", codexExecOutput(0, "server:\n  read_timeout: 37s\n  max_body = 4MiB\n  tls: true\nlogging:\n  level: debug")),
				execCall("c3", "go test ./..."),
				callOutput("c3", codexExecOutput(1, "    budget_test.go:217: retry budget exhausted after 3 attempts\nrequires github.com/acme/lib v1.4.2-rc.1")),
			},
			section: "Values",
			want:    []string{"`PORT=8088`", "`GOFLAGS=-mod=mod`", "`127.0.0.1:8088`", "`go1.26.8`", "`read_timeout: 37s`", "`max_body = 4MiB`", "`level: debug`", "`budget_test.go:217`", "`v1.4.2-rc.1`"},
			notWant: []string{"Chunk ID", "Wall time", "Original token count"},
		},
		{
			name:    "carried-forward ledger from an earlier handoff",
			items:   []string{lUser("Summary of earlier work.\n\n" + LedgerHeading + "\n### Decisions\n- Don't use cgo.\n### Values\n- `read_timeout: 37s`\n\nafter the ledger"), lUser("Always run gofmt.")},
			section: "User said",
			want:    []string{"Always run gofmt.", "Don't use cgo."},
			notWant: []string{"after the ledger"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ledgerOf(tc.items...)
			bullets := section(got, tc.section)
			for _, w := range tc.want {
				found := false
				for _, b := range bullets {
					found = found || b == w
				}
				if !found {
					t.Errorf("%s lacks %q; ledger:\n%s", tc.section, w, got)
				}
			}
			for _, nw := range tc.notWant {
				if strings.Contains(got, nw) {
					t.Errorf("ledger holds %q:\n%s", nw, got)
				}
			}
		})
	}
}

func TestLedgerNewestFirstAndOrder(t *testing.T) {
	got := ledgerOf(
		lUser("Use sqlite for the archive."),
		execCall("c1", "go vet ./..."), callOutput("c1", codexExecOutput(0, "")),
		lUser("Don't add new dependencies."),
		execCall("c2", "go vet ./..."), callOutput("c2", codexExecOutput(1, "vet: error: bad printf")),
	)
	if d := section(got, "User said"); len(d) != 2 || d[0] != "Don't add new dependencies." || d[1] != "Use sqlite for the archive." {
		t.Errorf("decisions not newest first: %q", d)
	}
	// the repeated command keeps only its newest run
	if c := section(got, "Commands"); len(c) != 1 || c[0] != "`go vet ./...` → exit 1" {
		t.Errorf("commands = %q", c)
	}
	// categories in priority order
	last := -1
	for _, title := range ledgerTitles {
		if p := strings.Index(got, "### "+title+"\n"); p >= 0 {
			if p < last {
				t.Errorf("category %s out of order:\n%s", title, got)
			}
			last = p
		}
	}
	if !strings.HasPrefix(got, LedgerHeading+"\n") {
		t.Errorf("missing heading:\n%s", got)
	}
}

// A fact the summary states stays in the ledger: the ledger is carried from compaction to
// compaction while each summary is summarised again, and a fact left to this summary would hang
// on every later one keeping it.
func TestLedgerKeepsWhatTheSummaryStates(t *testing.T) {
	got := ledgerOf(
		lUser("Let's keep the old API. Prefer table-driven tests."),
		execCall("c1", "cat config.yaml"), callOutput("c1", codexExecOutput(0, "read_timeout: 37s\nwrite_timeout: 12s")),
	)
	for _, want := range []string{"Let's keep the old API.", "Prefer table-driven tests.", "read_timeout: 37s", "write_timeout: 12s"} {
		if !strings.Contains(got, want) {
			t.Errorf("ledger lacks %q:\n%s", want, got)
		}
	}
}

func TestLedgerBudget(t *testing.T) {
	items := []string{lUser("Never use reflection in hot paths.")}
	for i := range 40 {
		id := fmt.Sprintf("c%d", i)
		items = append(items, execCall(id, fmt.Sprintf("go test -run TestCase%d ./pkg%d", i, i)),
			callOutput(id, codexExecOutput(1, fmt.Sprintf("--- FAIL: TestCase%d (0.01s)\n    case_test.go:%d: value_%d: %d", i, 100+i, i, i))))
	}
	parsed := make([]api.Item, len(items))
	idx := make([]int, len(items))
	for i, r := range items {
		parsed[i], idx[i] = item(r), i
	}
	full := Ledger(parsed, idx, 1<<20)
	for _, budget := range []int{0, 10, 40, 120, 300, 1000, 4000, len(full), len(full) + 100} {
		got := Ledger(parsed, idx, budget)
		if len(got) > budget {
			t.Errorf("budget %d: ledger is %d bytes", budget, len(got))
		}
		if budget >= 120 && !strings.Contains(got, "Never use reflection in hot paths.") {
			t.Errorf("budget %d: the decision (top priority) is missing:\n%s", budget, got)
		}
		if budget >= 300 && !strings.Contains(got, "--- FAIL: TestCase39") {
			t.Errorf("budget %d: the newest error is missing:\n%s", budget, got)
		}
		if budget >= len(full) && got != full {
			t.Errorf("budget %d: ledger differs from the unbounded one", budget)
		}
	}
	if got := Ledger(parsed, idx, 1000); strings.Contains(got, "### Values") && !strings.Contains(got, "### Errors") {
		t.Errorf("values chosen over errors:\n%s", got)
	}
}

func TestLedgerDeterministic(t *testing.T) {
	items := agentHistory(t, 256<<10)
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	first := Ledger(items, idx, 6<<10)
	if first == "" {
		t.Fatal("empty ledger for a realistic history")
	}
	for range 3 {
		if got := Ledger(items, idx, 6<<10); got != first {
			t.Fatalf("ledger not deterministic:\n%s\n----\n%s", first, got)
		}
	}
}

func TestLedgerEmpty(t *testing.T) {
	if got := ledgerOf(lAssistant("Done."), lUser("thanks")); got != "" {
		t.Errorf("ledger of nothing = %q", got)
	}
	if got := Ledger(nil, nil, 4096); got != "" {
		t.Errorf("ledger of no items = %q", got)
	}
	// out-of-range indexes are ignored, not a panic
	if got := Ledger([]api.Item{item(lUser("Use Go."))}, []int{-1, 0, 7}, 4096); !strings.Contains(got, "Use Go.") {
		t.Errorf("ledger = %q", got)
	}
}

func TestGapCheckPrompt(t *testing.T) {
	p := GapCheckPrompt()
	for _, want := range []string{"<summary>", "<ledger>", "<conversation>", "missing", "verbatim", "rejected"} {
		if !strings.Contains(p, want) {
			t.Errorf("gap-check prompt lacks %q", want)
		}
	}
}

func BenchmarkLedger1MB(b *testing.B) {
	items := agentHistory(b, 1<<20)
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	b.SetBytes(historyBytes(items))
	b.ReportAllocs()
	for b.Loop() {
		Ledger(items, idx, 6<<10)
	}
}

// Facts of a chained compaction: what a gap check found, and what only the previous summary held,
// must survive the next compaction even when the new summary drops them (measured by
// `compactd eval`: without this the gap check scored below the ledger alone at 10 compactions).
func TestLedgerChainKeepsGapFindings(t *testing.T) {
	first := WithGapFindings(ledgerOf(lUser("Let's keep the old API.")),
		"## Missing\n- parseConfig returns (*Config, error)\n- nothing missing\n* Let's keep the old API.\n\n2) the flag is --dry-run")
	if got := section(first, GapCheckTitle); len(got) != 2 || got[0] != "parseConfig returns (*Config, error)" || got[1] != "the flag is --dry-run" {
		t.Fatalf("gap section = %q, want only the new finding\n%s", got, first)
	}
	// The next compaction replaces the handoff: previous summary + that ledger, then new work.
	handoff := api.Item{Raw: []byte(lUser("Summary: the server listens on 127.0.0.1:8443.\n\n" + first)), Type: "message", Role: "user", Handoff: true}
	items := []api.Item{handoff, item(lUser("Prefer table-driven tests."))}
	got := Ledger(items, []int{0, 1}, 1<<20)
	for _, want := range []string{"parseConfig returns (*Config, error)", "keep the old API", "Prefer table-driven tests."} {
		if !strings.Contains(got, want) {
			t.Errorf("chained ledger lost %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "127.0.0.1:8443") {
		t.Errorf("the previous summary's own line became a fact:\n%s", got)
	}
	if gap := section(got, GapCheckTitle); len(gap) != 2 {
		t.Errorf("carried gap section = %q", gap)
	}
	// A second gap pass adds to the same section, newest first, without repeating.
	again := WithGapFindings(got, "- retry budget is 3 attempts\n- parseConfig returns (*Config, error)")
	if gap := section(again, GapCheckTitle); len(gap) != 3 || gap[0] != "retry budget is 3 attempts" {
		t.Errorf("second gap pass: section = %q\n%s", gap, again)
	}
	if strings.Count(again, "### "+GapCheckTitle) != 1 {
		t.Errorf("two gap sections:\n%s", again)
	}
	if WithGapFindings("", "- nothing missing") != "" {
		t.Error("nothing missing made a ledger")
	}
}

// Claude Code's Read tool numbers lines as "    42→code"; the prefix is not part of the fact.
func TestLedgerClaudeCodeReadPrefix(t *testing.T) {
	out := "     1→package config\n     2→\n    42→func parseConfig(path string) (*Config, error) {\n    43→\treturn nil, errors.New(\"bad\")\n"
	got := ledgerOf(execCall("c1", "read config.go"), callOutput("c1", out))
	sigs := strings.Join(section(got, "Signatures"), "\n")
	if !strings.Contains(sigs, "func parseConfig(path string) (*Config, error)") || strings.Contains(sigs, "→") {
		t.Errorf("signature from a numbered Read output: %q\n%s", sigs, got)
	}
}

// TestLedgerWhatSurvives covers the facts a model asks for after many compactions, each by the
// words it would ask with: where a function is defined, what the user said, a path under a dot
// directory, a port stated in prose; and what is never a fact: a summary's own lines.
func TestLedgerWhatSurvives(t *testing.T) {
	prevSummary := handoff.Text("SUMMARY-7: the work so far touched the billing package.\nretry_backoff: 300ms was discussed.",
		LedgerHeading+"\n### Values\n- `batch_window: 2116ms`")
	cases := []struct {
		name    string
		items   []api.Item
		section string
		want    []string // each must be a bullet of section (substring)
		notWant []string // none may appear anywhere in the ledger
	}{
		{
			name: "a grep line that declares a function keeps its path:line with the declaration",
			items: []api.Item{item(execCall("c1", "rg -n retryAccountWebhook internal")), item(callOutput("c1", codexExecOutput(0,
				"internal/a/b.go:41:\tif err := h.retryAccountWebhook(ctx, id); err != nil {\ninternal/reports/order_client.go:1832:func retryAccountWebhook(ctx context.Context) error {\n")))},
			section: "Signatures",
			want:    []string{"`internal/reports/order_client.go:1832: func retryAccountWebhook(ctx context.Context) error`"},
		},
		{
			name:    "a dot directory stays in a path",
			items:   []api.Item{item(execCall("c1", "cat notes.txt")), item(callOutput("c1", codexExecOutput(0, "the transcript is in /home/u/.claude/projects/x.txt and ~/.config/app/settings.yaml\n")))},
			section: "Files",
			want:    []string{"`/home/u/.claude/projects/x.txt`", "`~/.config/app/settings.yaml`"},
		},
		{
			name:    "a number the user gave is kept, with no decision word",
			items:   []api.Item{item(lUser("The staging database listens on 5433 and the deploy window is Tuesday 14:00 UTC. Thanks!"))},
			section: "User said",
			want:    []string{"The staging database listens on 5433 and the deploy window is Tuesday 14:00 UTC."},
			notWant: []string{"Thanks!"},
		},
		{
			name:    "a name the user gave is kept",
			items:   []api.Item{item(lUser("The flag is called `--dry-run-billing` and the job is reconcileLedgerNightly."))},
			section: "User said",
			want:    []string{"The flag is called `--dry-run-billing` and the job is reconcileLedgerNightly."},
		},
		{
			name:    "a port stated in prose in a file",
			items:   []api.Item{item(execCall("c1", "cat README.md")), item(callOutput("c1", codexExecOutput(0, "# Deploy\nThe service port is 8443 behind the gateway.\n")))},
			section: "Values",
			want:    []string{"port is 8443"},
		},
		{
			name: "a summary's own lines are not facts; its ledger is carried",
			items: []api.Item{
				{Raw: []byte(lUser(prevSummary)), Type: "message", Role: "user", Handoff: true},
				item(lUser("Prefer table-driven tests.")),
			},
			section: "Values",
			want:    []string{"`batch_window: 2116ms`"},
			notWant: []string{"SUMMARY-7", "retry_backoff: 300ms", "billing package"},
		},
		{
			name: "an agent's summary that compactd wrote is not the user's word",
			items: []api.Item{item(lUser("This session is being continued from a previous conversation. Summary:\n<summary>\nWe must use port 9000 for the 3 workers.\n" +
				LedgerHeading + "\n### Decisions\n- Don't use cgo.\n</summary>"))},
			section: "User said",
			want:    []string{"Don't use cgo."},
			notWant: []string{"port 9000", "3 workers", "being continued"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			idx := make([]int, len(tc.items))
			for i := range idx {
				idx[i] = i
			}
			got := Ledger(tc.items, idx, 1<<20)
			bullets := strings.Join(section(got, tc.section), "\n")
			for _, w := range tc.want {
				if !strings.Contains(bullets, w) {
					t.Errorf("%s lacks %q; ledger:\n%s", tc.section, w, got)
				}
			}
			for _, nw := range tc.notWant {
				if strings.Contains(got, nw) {
					t.Errorf("ledger holds %q:\n%s", nw, got)
				}
			}
		})
	}
}
