package recallbench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/compactd/compactd/internal/api"
)

// Fact is one planted fact: a question whose answer is a string that occurs verbatim in exactly
// one raw item of the session, and the search query a model would issue to find it again.
type Fact struct {
	Kind     string // KindReturnType, KindLineNumber, KindConfigValue, KindRejected
	Round    int    // 1-based compaction round whose replaced items hold it
	Question string
	Answer   string
	Query    string
}

// Fact kinds: the four things the issue names that summaries lose.
const (
	KindReturnType  = "return type"
	KindLineNumber  = "line number"
	KindConfigValue = "config value"
	KindRejected    = "rejected approach"
)

var kinds = []string{KindReturnType, KindLineNumber, KindConfigValue, KindRejected}

var (
	verbs = []string{"parse", "load", "flush", "merge", "resolve", "encode", "decode", "scan", "index", "compact",
		"rotate", "sync", "fetch", "apply", "build", "render", "split", "trim", "seal", "probe", "drain", "route",
		"stage", "emit", "prune", "claim", "replay", "verify", "hydrate", "shard"}
	nouns = []string{"Shard", "Manifest", "Segment", "Ledger", "Budget", "Cursor", "Window", "Tenant", "Route",
		"Lease", "Token", "Batch", "Frame", "Header", "Bucket", "Queue", "Snapshot", "Journal", "Replica", "Quota",
		"Schema", "Plan", "Digest", "Span", "Watermark", "Checkpoint", "Backlog", "Epoch", "Fence", "Offset"}
	pkgs      = []string{"store", "proxy", "index", "queue", "auth", "ingest", "sched", "cache", "wal", "gc", "raft", "api"}
	goTypes   = []string{"int", "int64", "uint32", "string", "bool", "error", "[]byte", "time.Duration", "context.Context", "*Options", "[]string", "map[string]int"}
	cfgKeys   = []string{"read_timeout", "write_timeout", "max_conns", "pool_size", "flush_interval", "retry_limit", "batch_size", "log_level", "listen_addr", "cache_ttl", "max_body", "queue_depth", "gc_percent", "shard_count", "lease_ttl", "replicas", "compression", "tls", "metrics_port", "idle_timeout"}
	approachs = []string{"a sync.Map cache", "an mmap-backed reader", "a global mutex", "a goroutine per request", "a channel fan-out", "reflection-based decoding", "a bloom filter pre-check", "an LRU with TTL eviction", "optimistic locking with retries", "a background compactor goroutine", "cgo bindings to zstd", "a lock-free ring buffer"}
	reasons   = []string{
		"it deadlocked when two writers held the %s lock",
		"p99 latency of %s rose to %dms under contention",
		"it allocated %d bytes per call in %s",
		"%s lost writes after a crash in the fsync window",
		"the race detector flagged %s in %d of 20 runs",
		"it broke on Windows network drives used by %s",
		"%s needed %d MB of RSS at 10k tenants",
	}
)

// gen is the seeded session generator. Everything it emits derives from its RNG, so a seed fixes
// every byte of every session.
type gen struct {
	r      *rand.Rand
	used   map[string]bool
	callID int
}

func newGen(seed uint64) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), used: map[string]bool{}}
}

func (g *gen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

// ident returns a fresh camelCase identifier, never returned before in this session, so each
// planted fact's subject is unique.
func (g *gen) ident() string {
	for {
		s := g.pick(verbs) + g.pick(nouns) + g.pick(nouns)
		if !g.used[s] {
			g.used[s] = true
			return s
		}
	}
}

// noiseIdent is an identifier for noise; it may repeat.
func (g *gen) noiseIdent() string { return g.pick(verbs) + g.pick(nouns) }

func (g *gen) typeName() string { return g.pick(nouns) + g.pick(nouns) }

func (g *gen) path() string {
	return "internal/" + g.pick(pkgs) + "/" + strings.ToLower(g.pick(nouns)) + ".go"
}

func (g *gen) nextCall() string {
	g.callID++
	return fmt.Sprintf("call_%05d", g.callID)
}

func js(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func itemOf(typ, role string, v map[string]any) api.Item {
	return api.Item{Raw: js(v), Type: typ, Role: role}
}

func userItem(text string) api.Item {
	return itemOf("message", "user", map[string]any{"type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": text}}})
}

func assistantItem(text string) api.Item {
	return itemOf("message", "assistant", map[string]any{"type": "message", "role": "assistant", "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}})
}

// exec returns a Codex exec_command call and its output, as Codex 0.169 sends them.
func (g *gen) exec(cmd string, code int, out string) []api.Item {
	id := g.nextCall()
	args := string(js(map[string]any{"cmd": cmd, "workdir": "/home/dev/project", "yield_time_ms": 10000}))
	full := fmt.Sprintf("Chunk ID: %04x\nWall time: %.4f seconds\nProcess exited with code %d\nOriginal token count: %d\nOutput:\n%s",
		g.r.IntN(1<<16), g.r.Float64()*3, code, len(out)/4, out)
	return []api.Item{
		itemOf("function_call", "", map[string]any{"type": "function_call", "call_id": id, "name": "exec_command", "arguments": args}),
		itemOf("function_call_output", "", map[string]any{"type": "function_call_output", "call_id": id, "output": full}),
	}
}

func (g *gen) patch(path string, added []string) []api.Item {
	id := g.nextCall()
	var b strings.Builder
	b.WriteString("*** Begin Patch\n*** Update File: " + path + "\n@@\n")
	for _, l := range added {
		b.WriteString("-\t// TODO\n+" + l + "\n")
	}
	b.WriteString("*** End Patch")
	return []api.Item{
		itemOf("custom_tool_call", "", map[string]any{"type": "custom_tool_call", "call_id": id, "name": "apply_patch", "input": b.String()}),
		itemOf("custom_tool_call_output", "", map[string]any{"type": "custom_tool_call_output", "call_id": id,
			"output": string(js(map[string]any{"output": "Success. Updated the following files:\nM " + path + "\n", "metadata": map[string]any{"exit_code": 0}}))}),
	}
}

func (g *gen) reasoning() api.Item {
	return itemOf("reasoning", "", map[string]any{"type": "reasoning",
		"summary":           []any{map[string]any{"type": "summary_text", "text": "**Checking " + g.noiseIdent() + "** I'll look at how it is called first."}},
		"encrypted_content": "gAAAAAB" + strings.Repeat(fmt.Sprintf("%x", g.r.Uint64()), 24)})
}

// goFunc renders one function signature with a random receiver, parameters and results.
func (g *gen) goFunc(name string) string {
	var params []string
	for i := range 1 + g.r.IntN(3) {
		params = append(params, fmt.Sprintf("%s%d %s", strings.ToLower(g.pick(nouns)[:1]), i, g.pick(goTypes)))
	}
	res := g.pick(goTypes)
	if g.r.IntN(2) == 0 {
		res = "(" + g.pick(goTypes) + ", error)"
	}
	recv := ""
	if g.r.IntN(2) == 0 {
		recv = "(s *" + g.typeName() + ") "
	}
	return "func " + recv + name + "(" + strings.Join(params, ", ") + ") " + res + " {"
}

// goSource is a plausible Go file listing; extra is spliced in at a random function position.
func (g *gen) goSource(pkg string, extra []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "package %s\n\nimport (\n\t\"context\"\n\t\"errors\"\n\t\"fmt\"\n\t\"time\"\n)\n\n", pkg)
	fmt.Fprintf(&b, "// %s holds the state of one %s.\ntype %s struct {\n\tmu   sync.Mutex\n\tsize int\n\tnext *%s\n}\n\n",
		g.typeName(), strings.ToLower(g.pick(nouns)), g.typeName(), g.typeName())
	n := 4 + g.r.IntN(5)
	at := g.r.IntN(n)
	for i := range n {
		if i == at {
			for _, l := range extra {
				b.WriteString(l + "\n")
			}
			b.WriteString("\tif err := ctx.Err(); err != nil {\n\t\treturn nil, err\n\t}\n\treturn nil, nil\n}\n\n")
		}
		name := g.noiseIdent()
		fmt.Fprintf(&b, "// %s %ss the %s and returns early when the context is done.\n", name, strings.ToLower(g.pick(verbs)), strings.ToLower(g.pick(nouns)))
		b.WriteString(g.goFunc(name) + "\n")
		fmt.Fprintf(&b, "\tif s.size > %d {\n\t\treturn fmt.Errorf(\"%s: too large: %%d\", s.size)\n\t}\n", g.r.IntN(4096), strings.ToLower(name))
		fmt.Fprintf(&b, "\tdeadline := time.Now().Add(%d * time.Millisecond)\n\tfor time.Now().Before(deadline) {\n\t\ts.size--\n\t}\n\treturn nil\n}\n\n", 10+g.r.IntN(990))
	}
	return b.String()
}

func (g *gen) testLog(pkg string, fail bool) (string, int) {
	var b strings.Builder
	for range 3 + g.r.IntN(6) {
		name := "Test" + g.pick(nouns) + g.pick(nouns)
		fmt.Fprintf(&b, "=== RUN   %s\n--- PASS: %s (0.%02ds)\n", name, name, g.r.IntN(100))
	}
	code := 0
	if fail {
		name := "Test" + g.pick(nouns) + g.pick(nouns)
		fmt.Fprintf(&b, "=== RUN   %s\n    %s_test.go:%d: %s: got %d, want %d\n--- FAIL: %s (0.%02ds)\nFAIL\n",
			name, strings.ToLower(g.pick(nouns)), 10+g.r.IntN(400), strings.ToLower(g.noiseIdent()), g.r.IntN(100), g.r.IntN(100), name, g.r.IntN(100))
		fmt.Fprintf(&b, "FAIL\tgithub.com/acme/svc/internal/%s\t0.%03ds\n", pkg, g.r.IntN(1000))
		code = 1
	} else {
		fmt.Fprintf(&b, "PASS\nok  \tgithub.com/acme/svc/internal/%s\t0.%03ds\n", pkg, g.r.IntN(1000))
	}
	return b.String(), code
}

func (g *gen) cfgValue(key string) string {
	switch {
	case strings.HasSuffix(key, "timeout") || strings.HasSuffix(key, "interval") || strings.HasSuffix(key, "ttl"):
		return fmt.Sprintf("%ds", 1+g.r.IntN(120))
	case key == "log_level":
		return g.pick([]string{"debug", "info", "warn"})
	case key == "listen_addr":
		return fmt.Sprintf("0.0.0.0:%d", 8000+g.r.IntN(100))
	case key == "tls" || key == "compression":
		return g.pick([]string{"true", "false", "zstd", "off"})
	}
	return fmt.Sprint(1 + g.r.IntN(512))
}

// yamlConfig is a config file of noise keys, with extra lines spliced in at a random position.
func (g *gen) yamlConfig(extra []string) string {
	var lines []string
	for _, sec := range []string{"server", "storage", "limits"} {
		lines = append(lines, sec+":")
		for range 4 + g.r.IntN(4) {
			k := g.pick(cfgKeys)
			lines = append(lines, "  "+k+": "+g.cfgValue(k))
		}
	}
	at := 1 + g.r.IntN(len(lines)-1)
	lines = append(lines[:at], append(extra, lines[at:]...)...)
	return strings.Join(lines, "\n") + "\n"
}

func (g *gen) grepLines(ident string, extra []string) string {
	var lines []string
	for range 3 + g.r.IntN(6) {
		lines = append(lines, fmt.Sprintf("%s:%d:\t%s := %s(ctx, %s)", g.path(), 10+g.r.IntN(900), strings.ToLower(g.pick(nouns)), ident, strings.ToLower(g.pick(nouns))))
	}
	at := g.r.IntN(len(lines) + 1)
	lines = append(lines[:at], append(extra, lines[at:]...)...)
	return strings.Join(lines, "\n") + "\n"
}

// noiseStep is one ordinary agent step: read a file, run tests, grep, list, patch, or think out
// loud. Noise carries numbers, signatures, config values and errors of its own, so the ledger's
// budget is contended the way it is in real sessions.
func (g *gen) noiseStep() []api.Item {
	pkg := g.pick(pkgs)
	switch g.r.IntN(7) {
	case 0:
		p := g.path()
		return append([]api.Item{g.reasoning()}, g.exec("sed -n 1,200p "+p, 0, g.goSource(pkg, nil))...)
	case 1:
		out, code := g.testLog(pkg, g.r.IntN(3) == 0)
		return g.exec("go test ./internal/"+pkg+"/...", code, out)
	case 2:
		id := g.noiseIdent()
		return g.exec("rg -n "+id+" internal", 0, g.grepLines(id, nil))
	case 3:
		var b strings.Builder
		for range 8 + g.r.IntN(12) {
			fmt.Fprintf(&b, "-rw-r--r-- 1 dev dev %6d Nov 29 09:%02d %s\n", g.r.IntN(90000), g.r.IntN(60), strings.ToLower(g.pick(nouns))+".go")
		}
		return g.exec("ls -la internal/"+pkg, 0, b.String())
	case 4:
		return g.patch(g.path(), []string{g.goFunc(g.noiseIdent()), fmt.Sprintf("\tconst limit = %d", g.r.IntN(10000))})
	case 5:
		return g.exec("cat deploy/"+pkg+".yaml", 0, g.yamlConfig(nil))
	default:
		return []api.Item{assistantItem(fmt.Sprintf("The %s path looks fine; %s is only called from %s. I'll check the %s tests next.",
			strings.ToLower(g.pick(nouns)), g.noiseIdent(), g.path(), pkg))}
	}
}

// plant returns the items of one step that holds a fact of the given kind, and the fact.
func (g *gen) plant(kind string, round int) ([]api.Item, Fact) {
	pkg := g.pick(pkgs)
	switch kind {
	case KindReturnType:
		name := g.ident()
		t1, t2 := g.typeName(), g.typeName()
		ret := fmt.Sprintf("(*%s, []%s, error)", t1, t2)
		sig := fmt.Sprintf("func %s(ctx context.Context, src io.Reader) %s {", name, ret)
		p := g.path()
		items := append([]api.Item{g.reasoning()}, g.exec("sed -n 1,200p "+p, 0, g.goSource(pkg, []string{"// " + name + " reads one frame.", sig}))...)
		return items, Fact{Kind: kind, Round: round, Question: "What does " + name + " return?", Answer: ret, Query: "return type of " + name}
	case KindLineNumber:
		name := g.ident()
		p := g.path()
		line := 100 + g.r.IntN(1900)
		ref := fmt.Sprintf("%s:%d", p, line)
		def := fmt.Sprintf("%s:\tfunc %s(ctx context.Context) error {", ref, name)
		return g.exec("rg -n "+name+" internal", 0, g.grepLines(name, []string{def})),
			Fact{Kind: kind, Round: round, Question: "On which line of " + p + " is " + name + " defined?", Answer: ref, Query: name + " definition line"}
	case KindConfigValue:
		key := strings.ToLower(g.ident()[:3]) + "_" + strings.ToLower(g.pick(nouns)) + "_" + g.pick([]string{"timeout", "limit", "window", "threshold"})
		for g.used[key] {
			key += "_x"
		}
		g.used[key] = true
		val := fmt.Sprintf("%d%s", 1000+g.r.IntN(9000), g.pick([]string{"ms", "KiB", "", "s"}))
		ans := key + ": " + val
		return g.exec("cat deploy/"+pkg+".yaml", 0, g.yamlConfig([]string{"  " + ans})),
			Fact{Kind: kind, Round: round, Question: "What is " + key + " set to in deploy/" + pkg + ".yaml?", Answer: ans, Query: key + " config value"}
	default: // KindRejected
		subject := g.ident()
		approach := g.pick(approachs) + " in " + subject
		tmpl := g.pick(reasons)
		var reason string
		switch strings.Count(tmpl, "%") {
		case 1:
			reason = fmt.Sprintf(tmpl, subject)
		default:
			if strings.Index(tmpl, "%s") < strings.Index(tmpl, "%d") {
				reason = fmt.Sprintf(tmpl, subject, 2+g.r.IntN(900))
			} else {
				reason = fmt.Sprintf(tmpl, 2+g.r.IntN(900), subject)
			}
		}
		f := Fact{Kind: kind, Round: round, Question: "Why was " + approach + " rejected?", Answer: reason, Query: "why rejected " + approach}
		if g.r.IntN(2) == 0 { // the user rules it out (a decision the ledger can catch)
			return []api.Item{userItem(fmt.Sprintf("Please finish the %s work next. Don't use %s: %s. Keep the public API as it is.", pkg, approach, reason))}, f
		}
		return []api.Item{assistantItem(fmt.Sprintf("I tried %s and rejected it: %s. I'll keep the existing design and move on.", approach, reason))}, f
	}
}

// round generates the items of one compaction round: a user request, steps with planted facts
// at random positions, and a closing assistant message plus the user's next request, the tail
// that stays verbatim after the compaction.
func (g *gen) round(n, steps, facts int) (items []api.Item, tail []api.Item, planted []Fact) {
	items = append(items, userItem(fmt.Sprintf("Round %d: make %s handle %s correctly. It should also report %s errors to the caller.",
		n, g.noiseIdent(), strings.ToLower(g.pick(nouns)), strings.ToLower(g.pick(nouns)))))
	at := map[int]string{}
	for i := range facts {
		pos := g.r.IntN(steps)
		for at[pos] != "" {
			pos = (pos + 1) % steps
		}
		at[pos] = kinds[(n*facts+i)%len(kinds)]
	}
	for s := range steps {
		if k := at[s]; k != "" {
			its, f := g.plant(k, n)
			items = append(items, its...)
			planted = append(planted, f)
			continue
		}
		items = append(items, g.noiseStep()...)
	}
	tail = []api.Item{
		assistantItem(fmt.Sprintf("Done: %s now handles the %s case and the tests pass.", g.noiseIdent(), strings.ToLower(g.pick(nouns)))),
		userItem("Thanks. Next, look at the " + g.pick(pkgs) + " package."),
	}
	return items, tail, planted
}
