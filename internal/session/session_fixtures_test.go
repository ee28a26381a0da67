package session

// The fixture logs in testdata/sessions are generated from the stories below so they are
// reproducible: `go test ./handoff -run TestGenerateFixtures -update` rewrites them. The stories
// are also the tests' ground truth (which user messages and files must survive), and they are
// written in a neutral step form rendered twice — once as a Codex rollout, once as a Claude Code
// transcript — following the record shapes those tools write.

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var updateFixtures = flag.Bool("update", false, "rewrite testdata/sessions fixtures")

const (
	codexFixture  = "testdata/sessions/codex-rollout.jsonl"
	claudeFixture = "testdata/sessions/claude-session.jsonl"
)

type stepKind int

const (
	stUser stepKind = iota
	stReason
	stSay
	stShell
	stRead
	stPatch
	stBadPatch
	stPlan
	stCompact
)

type step struct {
	kind   stepKind
	text   string // user/reason/say/compact text, shell command, read path
	out    string // tool output
	exit   int
	path   string // patch target
	add    bool   // patch creates the file
	before string // replaced text (Claude Edit old_string)
	after  string
	plan   []PlanStep
	writes []string // files a shell step writes (the expected redirection targets)
}

type story struct {
	id, cwd, title string
	steps          []step
}

// wantUserMessages and wantFiles are what every reduction of a story must keep.
func (s story) wantUserMessages() []string {
	var out []string
	for _, st := range s.steps {
		if st.kind == stUser {
			out = append(out, st.text)
		}
	}
	return out
}

func (s story) wantFiles() []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, st := range s.steps {
		switch st.kind {
		case stPatch:
			add(st.path)
		case stShell:
			for _, f := range st.writes {
				add(f)
			}
		}
	}
	return out
}

// filler produces deterministic, realistic-looking tool output.
type filler struct{ r *rand.Rand }

func newFiller(seed uint64) *filler {
	return &filler{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

var words = strings.Fields(`bucket limiter token refill rate burst window request client key
	config store redis cache shard metric counter handler route header retry backoff deadline
	context cancel stream buffer encode decode export row column writer reader record field
	quote escape delimiter chunk page cursor query filter order limit offset tenant account`)

func (f *filler) ident() string {
	a, b := words[f.r.IntN(len(words))], words[f.r.IntN(len(words))]
	return a + strings.ToUpper(b[:1]) + b[1:]
}

// goFile renders a plausible Go source file of about n bytes.
func (f *filler) goFile(pkg string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "package %s\n\nimport (\n\t\"context\"\n\t\"fmt\"\n\t\"sync\"\n\t\"time\"\n)\n\n", pkg)
	for b.Len() < n {
		name := f.ident()
		fmt.Fprintf(&b, "// %s %s the %s for one %s; callers hold no lock.\n", name, words[f.r.IntN(len(words))]+"s", words[f.r.IntN(len(words))], words[f.r.IntN(len(words))])
		fmt.Fprintf(&b, "func %s(ctx context.Context, %s int, %s time.Duration) (int, error) {\n", name, f.ident(), f.ident())
		for i := 0; i < 3+f.r.IntN(8); i++ {
			switch f.r.IntN(4) {
			case 0:
				fmt.Fprintf(&b, "\tif err := ctx.Err(); err != nil {\n\t\treturn 0, fmt.Errorf(%q, err)\n\t}\n", name+": %w")
			case 1:
				fmt.Fprintf(&b, "\t%s := %d * time.Millisecond\n\t_ = %s\n", f.ident(), f.r.IntN(5000), f.ident())
			case 2:
				fmt.Fprintf(&b, "\tvar mu sync.Mutex\n\tmu.Lock()\n\tdefer mu.Unlock()\n")
			default:
				fmt.Fprintf(&b, "\tfor i := 0; i < %d; i++ {\n\t\t_ = i\n\t}\n", f.r.IntN(64))
			}
		}
		b.WriteString("\treturn 0, nil\n}\n\n")
	}
	return b.String()
}

// testRun renders `go test -v` output with n cases, failing the named ones.
func (f *filler) testRun(pkg string, n int, failing ...string) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("Test%s/case_%03d", strings.ToUpper(pkg[:1])+pkg[1:], i)
		fmt.Fprintf(&b, "=== RUN   %s\n", name)
		fmt.Fprintf(&b, "--- PASS: %s (0.%02ds)\n", name, f.r.IntN(90))
	}
	for _, fl := range failing {
		fmt.Fprintf(&b, "=== RUN   %s\n    %s\n--- FAIL: %s (0.01s)\n", strings.SplitN(fl, ":", 2)[0], fl, strings.SplitN(fl, ":", 2)[0])
	}
	if len(failing) > 0 {
		fmt.Fprintf(&b, "FAIL\nFAIL\tgithub.com/acme/%s\t0.%03ds\nFAIL\n", pkg, f.r.IntN(999))
	} else {
		fmt.Fprintf(&b, "PASS\nok  \tgithub.com/acme/%s\t0.%03ds\n", pkg, f.r.IntN(999))
	}
	return b.String()
}

// grepHits renders rg output with n hits.
func (f *filler) grepHits(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "internal/%s/%s.go:%d:\t%s := %s(ctx, %d)\n", words[f.r.IntN(len(words))], words[f.r.IntN(len(words))], 1+f.r.IntN(400), f.ident(), f.ident(), f.r.IntN(100))
	}
	return b.String()
}

func (f *filler) listing(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "-rw-r--r-- 1 dev dev %6d Mar %2d 10:%02d internal/%s/%s_%d.go\n", 200+f.r.IntN(40000), 1+f.r.IntN(28), f.r.IntN(60), words[f.r.IntN(len(words))], words[f.r.IntN(len(words))], i)
	}
	return b.String()
}

func gatewayStory() story {
	f := newFiller(1)
	long := "Here is the panic from staging, full log below.\n" + strings.Repeat("goroutine 17 [running]:\ngithub.com/acme/gateway/internal/limit.(*Bucket).Take(0xc000123450, 0x1)\n\t/src/internal/limit/bucket.go:88 +0x1a4\n", 140) + "What I need: make Take never panic on a zero rate; return ErrNoCapacity instead."
	return story{
		id: "019a7c1e-5d2b-7a40-9c1f-3b8e2d4f6a10", cwd: "/home/dev/gateway", title: "token bucket rate limiter",
		steps: []step{
			{kind: stUser, text: "Add per-tenant rate limiting to the gateway: a token bucket per tenant key, configurable rate and burst in config.yaml, and a 429 with Retry-After when a tenant is over its limit. Keep the hot path allocation-free."},
			{kind: stReason, text: "**Exploring the gateway layout**\n\nI need to see how requests flow through internal/proxy and where tenant keys are resolved before deciding where the limiter hooks in."},
			{kind: stShell, text: "ls -la internal/ && rg -n \"tenant\" internal | head -200", out: f.listing(300) + f.grepHits(500)},
			{kind: stRead, text: "internal/proxy/handler.go", out: f.goFile("proxy", 32000)},
			{kind: stRead, text: "internal/config/config.go", out: f.goFile("config", 22000)},
			{kind: stPlan, plan: []PlanStep{{"Add limit.Bucket with refill math", "in_progress"}, {"Wire per-tenant buckets into proxy handler", "pending"}, {"Config: rate/burst per tenant", "pending"}, {"Tests and benchmarks", "pending"}}},
			{kind: stReason, text: "**Choosing the limiter design**\n\nA sync.Map of *Bucket keyed by tenant avoids a global lock; golang.org/x/time/rate would allocate a Reservation per call, so I will write a small CAS-based bucket instead."},
			{kind: stPatch, path: "internal/limit/bucket.go", add: true, after: f.goFile("limit", 3000)},
			{kind: stShell, text: "go test ./internal/limit/...", out: "# github.com/acme/gateway/internal/limit\ninternal/limit/bucket.go:41:9: undefined: nowFunc\nFAIL\tgithub.com/acme/gateway/internal/limit [build failed]\n", exit: 1},
			{kind: stPatch, path: "internal/limit/bucket.go", before: "now := time.Now()", after: "now := nowFunc()"},
			{kind: stPatch, path: "internal/limit/clock.go", add: true, after: "package limit\n\nimport \"time\"\n\n// nowFunc is swapped in tests.\nvar nowFunc = time.Now\n"},
			{kind: stShell, text: "go test -v ./internal/limit/...", out: f.testRun("limit", 180, "TestBucket/zero_rate: bucket_test.go:77: Take() panicked: integer divide by zero"), exit: 1},
			{kind: stUser, text: long},
			{kind: stReason, text: "**Fixing zero-rate division**\n\nRate 0 means the tenant is blocked entirely; Take should return ErrNoCapacity before computing the refill interval."},
			{kind: stBadPatch, path: "internal/limit/bucket.go", before: "interval := time.Second / time.Duration(b.rate)", after: "if b.rate == 0 {\n\t\treturn ErrNoCapacity\n\t}"},
			{kind: stRead, text: "internal/limit/bucket.go", out: f.goFile("limit", 18000)},
			{kind: stPatch, path: "internal/limit/bucket.go", before: "refill := time.Second / time.Duration(b.rate)", after: "if b.rate == 0 {\n\t\treturn ErrNoCapacity\n\t}\n\trefill := time.Second / time.Duration(b.rate)"},
			{kind: stShell, text: "go test -v ./internal/limit/...", out: f.testRun("limit", 181)},
			{kind: stSay, text: "The bucket is in place and the zero-rate case returns ErrNoCapacity. Next I will wire it into the proxy handler."},
			{kind: stUser, text: "Good. Use `X-Tenant-ID` as the key, fall back to the API key's tenant. Don't use golang.org/x/time/rate, we had allocation problems with it."},
			{kind: stCompact, text: "Summary of work so far: added internal/limit (Bucket, ErrNoCapacity, nowFunc clock); zero-rate fixed; tests pass. Remaining: proxy wiring keyed by X-Tenant-ID, config rate/burst, 429 Retry-After, benchmarks."},
			{kind: stPlan, plan: []PlanStep{{"Add limit.Bucket with refill math", "completed"}, {"Wire per-tenant buckets into proxy handler", "in_progress"}, {"Config: rate/burst per tenant", "pending"}, {"Tests and benchmarks", "pending"}}},
			{kind: stRead, text: "internal/proxy/handler.go", out: f.goFile("proxy", 32000)},
			{kind: stPatch, path: "internal/proxy/handler.go", before: "func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {", after: "func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {\n\tif !h.limits.Allow(tenantKey(r)) {\n\t\twriteTooMany(w, h.limits.RetryAfter(tenantKey(r)))\n\t\treturn\n\t}"},
			{kind: stPatch, path: "internal/config/config.go", before: "type Tenant struct {", after: "type Tenant struct {\n\tRate  int `yaml:\"rate\"`\n\tBurst int `yaml:\"burst\"`"},
			{kind: stShell, text: "go vet ./... && go test ./...", out: "# github.com/acme/gateway/internal/proxy\ninternal/proxy/handler.go:52:7: h.limits undefined (type *Handler has no field or method limits)\n", exit: 1},
			{kind: stPatch, path: "internal/proxy/limits.go", add: true, after: f.goFile("proxy", 2500)},
			{kind: stShell, text: "go vet ./... && go test ./...", out: f.testRun("proxy", 900)},
			{kind: stShell, text: "go test -run XXX -bench BenchmarkTake -benchmem ./internal/limit/ | tee bench.txt", writes: []string{"bench.txt"}, out: "goos: linux\ngoarch: amd64\nBenchmarkTake-2   \t48213912\t        24.81 ns/op\t       0 B/op\t       0 allocs/op\nPASS\n"},
			{kind: stShell, text: "cat > docs/rate-limits.md <<'EOF'\n# Rate limits\n\nEach tenant gets a token bucket: `rate` tokens per second, `burst` at most.\nOver the limit > 429 with Retry-After.\nEOF", writes: []string{"docs/rate-limits.md"}, out: ""},
			{kind: stShell, text: "git diff --stat && git status --short", out: strings.Repeat(" internal/limit/bucket.go | 120 +++++++++\n", 3) + f.listing(40)},
			{kind: stPlan, plan: []PlanStep{{"Add limit.Bucket with refill math", "completed"}, {"Wire per-tenant buckets into proxy handler", "completed"}, {"Config: rate/burst per tenant", "completed"}, {"Tests and benchmarks", "in_progress"}}},
			{kind: stUser, text: "Please also add a table-driven test for Retry-After rounding, e.g.\n```go\n{name: \"sub-second\", wait: 300 * time.Millisecond, want: \"1\"},\n```\nand then stop."},
			{kind: stReason, text: "**Retry-After rounding**\n\nRetry-After is whole seconds; round up so a client never retries early."},
			{kind: stPatch, path: "internal/proxy/limits_test.go", add: true, after: f.goFile("proxy", 2000)},
			{kind: stShell, text: "go test ./internal/proxy/ -run TestRetryAfter -v", out: f.testRun("proxy", 60)},
			{kind: stSay, text: "Done: per-tenant token buckets keyed by X-Tenant-ID (falling back to the API key's tenant), rate/burst in config.yaml, 429 with Retry-After rounded up, Take at 0 allocs/op. Tests pass; notes in docs/rate-limits.md."},
		},
	}
}

func exportStory() story {
	f := newFiller(2)
	return story{
		id: "7c2f0a9e-41d6-4b8a-a3e5-95c0d1f2e8b7", cwd: "/home/dev/reports", title: "CSV export endpoint",
		steps: []step{
			{kind: stUser, text: "The reports service needs a streaming CSV export at GET /v1/reports/{id}/export.csv — rows come from the cursor API, must not buffer the whole report in memory, and fields with commas or quotes must be escaped per RFC 4180."},
			{kind: stReason, text: "Let me look at how reports are fetched today. The cursor API in internal/store returns pages of 500 rows; I can stream page by page into encoding/csv's Writer, flushing after each page so memory stays bounded by one page."},
			{kind: stShell, text: "rg -n \"Cursor\" internal/ | head -300", out: f.grepHits(300)},
			{kind: stRead, text: "internal/store/cursor.go", out: f.goFile("store", 30000)},
			{kind: stRead, text: "internal/api/routes.go", out: f.goFile("api", 24000)},
			{kind: stPlan, plan: []PlanStep{{"Add export handler streaming cursor pages", "in_progress"}, {"RFC 4180 escaping tests", "pending"}, {"Register route", "pending"}}},
			{kind: stPatch, path: "internal/api/export.go", add: true, after: f.goFile("api", 3500)},
			{kind: stShell, text: "go build ./... && go test ./internal/api/...", out: "internal/api/export.go:33:2: declared and not used: pageSize\n", exit: 1},
			{kind: stReason, text: "pageSize is unused because I hard-coded 500 in the loop. I considered making the page size a query parameter but rejected it: the cursor API caps pages at 500 anyway, so a parameter would only let clients ask for less. Use the constant."},
			{kind: stPatch, path: "internal/api/export.go", before: "for page := cur.Next(ctx, 500); page != nil;", after: "for page := cur.Next(ctx, pageSize); page != nil;"},
			{kind: stShell, text: "go build ./... && go test ./internal/api/...", out: f.testRun("api", 220, "TestExportEscaping/quote_in_field: export_test.go:58: got \"a\"b\", want \"\"\"a\"\"b\"\"\""), exit: 1},
			{kind: stUser, text: "Careful: Excel needs a UTF-8 BOM or it mangles the umlauts in customer names. Add it, but only when the client sends `Accept: text/csv; charset=utf-8; bom=1`."},
			{kind: stBadPatch, path: "internal/api/export.go", before: "w.Header().Set(\"Content-Type\", \"text/csv\")", after: "w.Header().Set(\"Content-Type\", \"text/csv; charset=utf-8\")"},
			{kind: stRead, text: "internal/api/export.go", out: f.goFile("api", 5000)},
			{kind: stPatch, path: "internal/api/export.go", before: "cw := csv.NewWriter(w)", after: "if wantBOM(r) {\n\t\tw.Write([]byte{0xEF, 0xBB, 0xBF})\n\t}\n\tcw := csv.NewWriter(w)"},
			{kind: stPatch, path: "internal/api/export_test.go", add: true, after: f.goFile("api", 2500)},
			{kind: stShell, text: "go test ./internal/api/... 2>&1 | tail -50", out: f.testRun("api", 224)},
			{kind: stCompact, text: "This session is being continued from a previous conversation that ran out of context. Summary: streaming CSV export in internal/api/export.go using encoding/csv over cursor pages of pageSize=500; BOM only on Accept bom=1; escaping tests pass. Pending: route registration, docs."},
			{kind: stPlan, plan: []PlanStep{{"Add export handler streaming cursor pages", "completed"}, {"RFC 4180 escaping tests", "completed"}, {"Register route", "in_progress"}}},
			{kind: stPatch, path: "internal/api/routes.go", before: "r.Get(\"/v1/reports/{id}\", h.getReport)", after: "r.Get(\"/v1/reports/{id}\", h.getReport)\n\tr.Get(\"/v1/reports/{id}/export.csv\", h.exportCSV)"},
			{kind: stShell, text: "go test ./... > /tmp/test.log 2>&1; echo $? > test-exit.txt; tail -5 /tmp/test.log", writes: []string{"/tmp/test.log", "test-exit.txt"}, out: f.testRun("reports", 300)},
			{kind: stUser, text: "ok"},
			{kind: stSay, text: "Route registered at GET /v1/reports/{id}/export.csv; all tests pass. The export streams one cursor page (500 rows) at a time and adds a UTF-8 BOM only for bom=1."},
		},
	}
}

// ---- Codex rollout writer ----

type jsonlWriter struct {
	b    strings.Builder
	t    time.Time
	n    int
	skew *rand.Rand
}

func (w *jsonlWriter) tick() string {
	w.t = w.t.Add(time.Duration(200+w.skew.IntN(4000)) * time.Millisecond)
	return w.t.UTC().Format("2006-01-02T15:04:05.000Z")
}

func (w *jsonlWriter) line(v any) {
	// Neither Codex (serde_json) nor Claude Code (JSON.stringify) escapes <, > and &.
	enc := json.NewEncoder(&w.b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
}

func (w *jsonlWriter) id(prefix string) string {
	w.n++
	return fmt.Sprintf("%s%04d%08x", prefix, w.n, w.skew.Uint32())
}

type obj = map[string]any

func codexRollout(s story) string {
	w := &jsonlWriter{t: time.Date(2026, 3, 14, 9, 30, 0, 0, time.UTC), skew: rand.New(rand.NewPCG(7, 7))}
	rec := func(typ string, payload obj) { w.line(obj{"timestamp": w.tick(), "type": typ, "payload": payload}) }
	item := func(payload obj) { rec("response_item", payload) }
	event := func(payload obj) { rec("event_msg", payload) }
	rec("session_meta", obj{"id": s.id, "timestamp": w.t.Format(time.RFC3339), "cwd": s.cwd, "originator": "codex_cli_rs",
		"cli_version": "0.169.0", "instructions": nil, "source": "cli", "model_provider": "openai",
		"git": obj{"commit_hash": "4f1c2d9e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e", "branch": "main", "repository_url": "git@github.com:acme/gateway.git"}})
	userItem := func(text string) {
		item(obj{"type": "message", "role": "user", "content": []obj{{"type": "input_text", "text": text}}})
	}
	userItem("# AGENTS.md instructions for " + s.cwd + "\n\n<INSTRUCTIONS>\nRun gofmt and go vet before finishing. Prefer table-driven tests.\n</INSTRUCTIONS>")
	userItem("<environment_context>\n  <cwd>" + s.cwd + "</cwd>\n  <approval_policy>on-request</approval_policy>\n  <sandbox_mode>workspace-write</sandbox_mode>\n  <network_access>restricted</network_access>\n  <shell>bash</shell>\n</environment_context>")
	turnContext := func() {
		rec("turn_context", obj{"cwd": s.cwd, "approval_policy": "on-request",
			"sandbox_policy": obj{"type": "workspace-write", "network_access": false, "exclude_tmpdir_env_var": false, "exclude_slash_tmp": false},
			"model":          "gpt-5.1-codex", "effort": "medium", "summary": "auto"})
	}
	tokens := 4000
	call := func(name, args string, output string) {
		id := w.id("call_")
		item(obj{"type": "function_call", "name": name, "arguments": args, "call_id": id})
		item(obj{"type": "function_call_output", "call_id": id, "output": output})
		tokens += len(output) / 4
		event(obj{"type": "token_count", "info": obj{"total_token_usage": obj{"input_tokens": tokens, "cached_input_tokens": tokens * 9 / 10, "output_tokens": 120, "reasoning_output_tokens": 64, "total_tokens": tokens + 120}, "model_context_window": 272000}})
	}
	shellArgs := func(cmd string) string {
		a, _ := json.Marshal(obj{"command": cmd, "workdir": s.cwd, "timeout_ms": 120000})
		return string(a)
	}
	patchOut := func(ok bool, path, msg string) string {
		o := obj{"output": "Success. Updated the following files:\nM " + path + "\n", "metadata": obj{"exit_code": 0, "duration_seconds": 0.0}}
		if !ok {
			o = obj{"output": msg, "metadata": obj{"exit_code": 1, "duration_seconds": 0.0}}
		}
		data, _ := json.Marshal(o)
		return string(data)
	}
	customPatch := func(body, out string) {
		id := w.id("call_")
		item(obj{"type": "custom_tool_call", "status": "completed", "call_id": id, "name": "apply_patch", "input": body})
		item(obj{"type": "custom_tool_call_output", "call_id": id, "output": out})
	}
	nShell := 0
	for _, st := range s.steps {
		switch st.kind {
		case stUser:
			turnContext()
			userItem(st.text)
			event(obj{"type": "user_message", "message": st.text, "images": []any{}})
		case stReason:
			item(obj{"type": "reasoning", "summary": []obj{{"type": "summary_text", "text": st.text}}, "content": nil,
				"encrypted_content": "gAAAAAB" + strings.Repeat("q9Zx", 60+w.skew.IntN(200))})
			event(obj{"type": "agent_reasoning", "text": st.text})
		case stSay:
			item(obj{"type": "message", "role": "assistant", "content": []obj{{"type": "output_text", "text": st.text}}})
			event(obj{"type": "agent_message", "message": st.text})
		case stShell:
			nShell++
			switch nShell % 3 {
			case 0: // older shell tool: argv and JSON output with metadata
				a, _ := json.Marshal(obj{"command": []string{"bash", "-lc", st.text}, "workdir": s.cwd, "timeout_ms": 120000})
				o, _ := json.Marshal(obj{"output": st.out, "metadata": obj{"exit_code": st.exit, "duration_seconds": 1.2}})
				call("shell", string(a), string(o))
			case 1: // unified exec
				a, _ := json.Marshal(obj{"cmd": st.text, "workdir": s.cwd, "yield_time_ms": 10000})
				call("exec_command", string(a), fmt.Sprintf("Chunk ID: %06x\nWall time: 1.%d seconds\nProcess exited with code %d\nOriginal token count: %d\nOutput:\n%s", w.skew.Uint32()&0xffffff, w.skew.IntN(9), st.exit, len(st.out)/4, st.out))
			default:
				call("shell_command", shellArgs(st.text), fmt.Sprintf("Exit code: %d\nWall time: 0.%d seconds\nOutput:\n%s", st.exit, w.skew.IntN(9), st.out))
			}
		case stRead:
			call("shell_command", shellArgs("sed -n '1,400p' "+st.text), "Exit code: 0\nWall time: 0.1 seconds\nOutput:\n"+st.out)
		case stPatch:
			var body string
			if st.add {
				body = "*** Begin Patch\n*** Add File: " + st.path + "\n+" + strings.ReplaceAll(strings.TrimRight(st.after, "\n"), "\n", "\n+") + "\n*** End Patch\n"
			} else {
				body = "*** Begin Patch\n*** Update File: " + st.path + "\n@@\n-" + strings.ReplaceAll(st.before, "\n", "\n-") + "\n+" + strings.ReplaceAll(st.after, "\n", "\n+") + "\n*** End Patch\n"
			}
			customPatch(body, patchOut(true, st.path, ""))
		case stBadPatch:
			body := "*** Begin Patch\n*** Update File: " + st.path + "\n@@\n-" + st.before + "\n+" + strings.ReplaceAll(st.after, "\n", "\n+") + "\n*** End Patch\n"
			customPatch(body, patchOut(false, st.path, "apply_patch verification failed: Failed to find expected lines in "+st.path+":\n"+st.before))
		case stPlan:
			plan := make([]obj, len(st.plan))
			for i, p := range st.plan {
				plan[i] = obj{"step": p.Step, "status": p.Status}
			}
			a, _ := json.Marshal(obj{"explanation": "Tracking progress", "plan": plan})
			call("update_plan", string(a), "Plan updated")
		case stCompact:
			rec("compacted", obj{"message": st.text, "replacement_history": []obj{{"type": "message", "role": "user", "content": []obj{{"type": "input_text", "text": s.steps[0].text}}}}})
			event(obj{"type": "context_compacted"})
		}
	}
	event(obj{"type": "task_complete", "last_agent_message": nil})
	return w.b.String()
}

// ---- Claude Code transcript writer ----

func claudeTranscript(s story) string {
	w := &jsonlWriter{t: time.Date(2026, 3, 15, 14, 0, 0, 0, time.UTC), skew: rand.New(rand.NewPCG(11, 11))}
	parent := any(nil)
	base := func(typ string) obj {
		u := fmt.Sprintf("%08x-%04x-4%03x-a%03x-%012x", w.skew.Uint32(), w.skew.IntN(0xffff), w.skew.IntN(0xfff), w.skew.IntN(0xfff), w.skew.Uint64()&0xffffffffffff)
		o := obj{"parentUuid": parent, "isSidechain": false, "userType": "external", "cwd": s.cwd, "sessionId": s.id,
			"version": "2.1.37", "gitBranch": "main", "type": typ, "uuid": u, "timestamp": w.tick()}
		parent = u
		return o
	}
	user := func(content any, extra obj) {
		o := base("user")
		o["message"] = obj{"role": "user", "content": content}
		for k, v := range extra {
			o[k] = v
		}
		w.line(o)
	}
	msgN := 0
	assistant := func(block obj) {
		msgN++
		o := base("assistant")
		o["requestId"] = fmt.Sprintf("req_011C%016x", w.skew.Uint64())
		o["message"] = obj{"model": "claude-opus-4-5-20251101", "id": fmt.Sprintf("msg_01%020x", msgN), "type": "message", "role": "assistant",
			"content": []obj{block}, "stop_reason": nil, "stop_sequence": nil,
			"usage": obj{"input_tokens": 4, "cache_creation_input_tokens": 1200, "cache_read_input_tokens": 30000 + msgN*900, "output_tokens": 180}}
		w.line(o)
	}
	tool := func(name string, input obj, out string, isErr bool, result any) {
		id := w.id("toolu_01")
		assistant(obj{"type": "tool_use", "id": id, "name": name, "input": input})
		tr := obj{"tool_use_id": id, "type": "tool_result", "content": out}
		if isErr {
			tr["is_error"] = true
		}
		user([]obj{tr}, obj{"toolUseResult": result})
	}
	w.line(obj{"type": "summary", "summary": strings.ToUpper(s.title[:1]) + s.title[1:], "leafUuid": "00000000-0000-4000-a000-000000000000"})
	user("Caveat: The messages below were generated by the user while running local commands. DO NOT respond to these messages or otherwise consider them in your response unless the user explicitly asks you to.", obj{"isMeta": true})
	user("<command-name>/model</command-name>\n<command-message>model</command-message>\n<command-args></command-args>", nil)
	user("<local-command-stdout>Set model to opus</local-command-stdout>", nil)
	abs := func(p string) string { return filepath.ToSlash(filepath.Join(s.cwd, p)) }
	var todos []obj
	for _, st := range s.steps {
		switch st.kind {
		case stUser:
			user(st.text, nil)
		case stReason:
			assistant(obj{"type": "thinking", "thinking": st.text, "signature": "EqQBCkgIBxABGAIi" + strings.Repeat("Qm9", 40+w.skew.IntN(80))})
		case stSay:
			assistant(obj{"type": "text", "text": st.text})
		case stShell:
			out, isErr := st.out, false
			if st.exit != 0 {
				out, isErr = fmt.Sprintf("Exit code %d\n%s", st.exit, st.out), true
			}
			tool("Bash", obj{"command": st.text, "description": "Run " + strings.Fields(st.text)[0]}, out, isErr,
				obj{"stdout": st.out, "stderr": "", "interrupted": false, "isImage": false})
		case stRead:
			numbered := strings.Builder{}
			for i, l := range strings.Split(st.out, "\n") {
				fmt.Fprintf(&numbered, "%6d→%s\n", i+1, l)
			}
			tool("Read", obj{"file_path": abs(st.text)}, numbered.String(), false,
				obj{"type": "text", "file": obj{"filePath": abs(st.text), "content": st.out, "numLines": strings.Count(st.out, "\n"), "startLine": 1, "totalLines": strings.Count(st.out, "\n")}})
		case stPatch:
			if st.add {
				tool("Write", obj{"file_path": abs(st.path), "content": st.after}, "File created successfully at: "+abs(st.path), false,
					obj{"type": "create", "filePath": abs(st.path), "content": st.after, "structuredPatch": []any{}})
			} else if strings.Contains(st.after, "\n\t\t") {
				tool("MultiEdit", obj{"file_path": abs(st.path), "edits": []obj{{"old_string": st.before, "new_string": st.after}}},
					"Applied 1 edit to "+abs(st.path)+":\n1. Replaced \""+st.before+"\" with \""+st.after+"\"", false,
					obj{"filePath": abs(st.path), "edits": []obj{{"old_string": st.before, "new_string": st.after}}, "userModified": false})
			} else {
				tool("Edit", obj{"file_path": abs(st.path), "old_string": st.before, "new_string": st.after},
					"The file "+abs(st.path)+" has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n"+st.after, false,
					obj{"filePath": abs(st.path), "oldString": st.before, "newString": st.after, "replaceAll": false, "userModified": false})
			}
		case stBadPatch:
			tool("Edit", obj{"file_path": abs(st.path), "old_string": st.before, "new_string": st.after},
				"<tool_use_error>String to replace not found in file.\nString: "+st.before+"</tool_use_error>", true,
				"Error: String to replace not found in file.")
		case stPlan:
			todos = todos[:0]
			for _, p := range st.plan {
				todos = append(todos, obj{"content": p.Step, "status": p.Status, "activeForm": p.Step})
			}
			tool("TodoWrite", obj{"todos": todos}, "Todos have been modified successfully. Ensure that you continue to use the todo list to track your progress.", false,
				obj{"oldTodos": []any{}, "newTodos": todos})
		case stCompact:
			sys := base("system")
			sys["subtype"], sys["content"], sys["isMeta"], sys["level"] = "compact_boundary", "Conversation compacted", false, "info"
			sys["compactMetadata"] = obj{"trigger": "auto", "preTokens": 155034}
			w.line(sys)
			user(st.text, obj{"isCompactSummary": true, "isVisibleInTranscriptOnly": true})
		}
	}
	return w.b.String()
}

func TestGenerateFixtures(t *testing.T) {
	if !*updateFixtures {
		t.Skip("run with -update to regenerate testdata/sessions")
	}
	if err := os.MkdirAll("testdata/sessions", 0o755); err != nil {
		t.Fatal(err)
	}
	for path, data := range map[string]string{
		codexFixture:  codexRollout(gatewayStory()),
		claudeFixture: claudeTranscript(exportStory()),
	} {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", path, len(data))
	}
}

// TestFixturesUpToDate keeps the committed fixtures in step with their generator.
func TestFixturesUpToDate(t *testing.T) {
	for path, want := range map[string]string{
		codexFixture:  codexRollout(gatewayStory()),
		claudeFixture: claudeTranscript(exportStory()),
	} {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s is stale: run go test ./handoff -run TestGenerateFixtures -update", path)
		}
	}
}
