package eval

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Shapes of agent traffic. A shape decides how the abstract steps of a session are rendered as
// wire items: which tools an agent calls and what their output looks like.
const (
	// ShapeCodex is a Codex CLI session: exec_command function calls whose output carries
	// Codex's "Chunk ID / Wall time / Process exited with code" header.
	ShapeCodex = "codex"
	// ShapeClaudeCode is a Claude Code session: Read (line-numbered file contents) and Bash
	// tool calls. It is rendered as Responses items (function_call / function_call_output):
	// the Messages route has no facts ledger, gap check or recall tool yet.
	ShapeClaudeCode = "claude-code"
)

// Shapes lists the shapes a run may name. A Chat Completions agent needs a /v1/chat/completions
// route in compactd first; its renderer would turn the same Steps into chat messages.
var Shapes = []string{ShapeCodex, ShapeClaudeCode}

// Fact kinds: the details chained summaries lose.
const (
	KindReturnType = "return type"
	KindLineNumber = "line number"
	KindConfig     = "config value"
	KindError      = "error message"
	KindRejected   = "rejected approach"
	KindCorrection = "user correction"
)

// Kinds lists the fact kinds in the order they are planted.
var Kinds = []string{KindReturnType, KindLineNumber, KindConfig, KindError, KindRejected, KindCorrection}

// Fact is one planted fact: a question asked through compactd as an ordinary turn, and the
// value the answer must equal.
type Fact struct {
	Kind     string `json:"kind"`
	Round    int    `json:"round"` // compaction round whose replaced items hold it (1-based)
	Question string `json:"question"`
	Answer   string `json:"answer"`
}

// Step is one abstract agent step, independent of the wire format.
type Step struct {
	Role string // "user", "assistant" or "tool"
	Text string // user or assistant text
	// A tool step: Action is "read" (Target is a path) or "run" (Target is a command line);
	// Output is what the tool printed, Exit its status.
	Action, Target, Output string
	Exit                   int
}

// Round is one compaction round: the turns the client sends before the round's compaction,
// each a list of steps, and the facts planted in them.
type Round struct {
	Turns [][]Step
	Facts []Fact
}

var (
	verbs = []string{"parse", "load", "flush", "merge", "resolve", "encode", "decode", "scan", "index", "rotate",
		"sync", "fetch", "apply", "build", "render", "split", "trim", "seal", "probe", "drain", "route", "stage",
		"emit", "prune", "claim", "replay", "verify", "hydrate", "shard", "lease"}
	nouns = []string{"Shard", "Manifest", "Segment", "Budget", "Cursor", "Window", "Tenant", "Route", "Lease",
		"Token", "Batch", "Frame", "Header", "Bucket", "Queue", "Snapshot", "Journal", "Replica", "Quota", "Schema",
		"Plan", "Digest", "Span", "Watermark", "Checkpoint", "Backlog", "Epoch", "Fence", "Offset", "Ticket"}
	pkgs       = []string{"store", "proxy", "index", "queue", "auth", "ingest", "sched", "cache", "wal", "gc", "raft", "api"}
	goTypes    = []string{"int", "int64", "uint32", "string", "bool", "error", "[]byte", "time.Duration", "*Options", "[]string"}
	cfgKeys    = []string{"read_timeout", "write_timeout", "max_conns", "pool_size", "flush_interval", "retry_limit", "batch_size", "log_level", "cache_ttl", "queue_depth", "shard_count", "replicas", "idle_timeout"}
	approaches = []string{"a sync.Map cache", "an mmap-backed reader", "a global mutex", "a goroutine per request",
		"a channel fan-out", "reflection-based decoding", "a bloom filter pre-check", "an LRU with TTL eviction",
		"optimistic locking with retries", "cgo bindings to zstd", "a lock-free ring buffer"}
	reasons = []string{
		"it deadlocked when two writers held the %s lock",
		"p99 latency of %s rose to %dms under contention",
		"it allocated %d bytes per call in %s",
		"%s lost writes after a crash in the fsync window",
		"the race detector flagged %s in %d of 20 runs",
		"%s needed %d MB of RSS at 10k tenants",
	}
	errorTmpls = []string{
		"dial tcp 127.0.0.1:%d: connect: connection refused",
		"open /var/lib/%s/segment-%d.db: permission denied",
		"lease %d expired before renewal in %s",
		"checksum mismatch in segment %d of %s",
		"context deadline exceeded after %dms waiting for %s",
	}
)

// gen is the seeded session generator: every byte of a session derives from its RNG.
type gen struct {
	r    *rand.Rand
	used map[string]bool
}

func newGen(seed uint64) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), used: map[string]bool{}}
}

func (g *gen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

// ident is a camelCase identifier never returned before in this session: each fact's subject is
// unique, so its question has exactly one answer.
func (g *gen) ident() string {
	for {
		s := g.pick(verbs) + g.pick(nouns) + g.pick(nouns)
		if !g.used[s] {
			g.used[s] = true
			return s
		}
	}
}

func (g *gen) noiseIdent() string { return g.pick(verbs) + g.pick(nouns) }
func (g *gen) typeName() string   { return g.pick(nouns) + g.pick(nouns) }
func (g *gen) path() string {
	return "internal/" + g.pick(pkgs) + "/" + strings.ToLower(g.pick(nouns)) + ".go"
}

func (g *gen) goFunc(name string) string {
	var params []string
	for i := range 1 + g.r.IntN(3) {
		params = append(params, fmt.Sprintf("%s%d %s", strings.ToLower(g.pick(nouns)[:1]), i, g.pick(goTypes)))
	}
	res := g.pick(goTypes)
	if g.r.IntN(2) == 0 {
		res = "(" + g.pick(goTypes) + ", error)"
	}
	return "func " + name + "(" + strings.Join(params, ", ") + ") " + res + " {"
}

// goSource is a plausible Go file; extra lines are spliced in at a random function position.
func (g *gen) goSource(pkg string, extra []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "package %s\n\nimport (\n\t\"context\"\n\t\"fmt\"\n\t\"time\"\n)\n\n", pkg)
	n := 3 + g.r.IntN(3)
	at := g.r.IntN(n)
	for i := range n {
		if i == at && extra != nil {
			for _, l := range extra {
				b.WriteString(l + "\n")
			}
			b.WriteString("\tif err := ctx.Err(); err != nil {\n\t\treturn nil, nil, err\n\t}\n\treturn nil, nil, nil\n}\n\n")
		}
		name := g.noiseIdent()
		fmt.Fprintf(&b, "// %s %ss the %s.\n%s\n", name, strings.ToLower(g.pick(verbs)), strings.ToLower(g.pick(nouns)), g.goFunc(name))
		fmt.Fprintf(&b, "\tif s.size > %d {\n\t\treturn fmt.Errorf(\"%s: too large: %%d\", s.size)\n\t}\n\treturn nil\n}\n\n", g.r.IntN(4096), strings.ToLower(name))
	}
	return b.String()
}

func (g *gen) testLog(pkg string) string {
	var b strings.Builder
	for range 3 + g.r.IntN(5) {
		name := "Test" + g.pick(nouns) + g.pick(nouns)
		fmt.Fprintf(&b, "=== RUN   %s\n--- PASS: %s (0.%02ds)\n", name, name, g.r.IntN(100))
	}
	fmt.Fprintf(&b, "PASS\nok  \tgithub.com/acme/svc/internal/%s\t0.%03ds\n", pkg, g.r.IntN(1000))
	return b.String()
}

func (g *gen) cfgValue(key string) string {
	switch {
	case strings.HasSuffix(key, "timeout") || strings.HasSuffix(key, "interval") || strings.HasSuffix(key, "ttl"):
		return fmt.Sprintf("%ds", 1+g.r.IntN(120))
	case key == "log_level":
		return g.pick([]string{"debug", "info", "warn"})
	}
	return fmt.Sprint(1 + g.r.IntN(512))
}

func (g *gen) yamlConfig(extra []string) string {
	var lines []string
	for _, sec := range []string{"server", "storage", "limits"} {
		lines = append(lines, sec+":")
		for range 3 + g.r.IntN(3) {
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
	for range 2 + g.r.IntN(5) {
		lines = append(lines, fmt.Sprintf("%s:%d:\t%s := %s(ctx, %s)", g.path(), 10+g.r.IntN(900), strings.ToLower(g.pick(nouns)), ident, strings.ToLower(g.pick(nouns))))
	}
	at := g.r.IntN(len(lines) + 1)
	lines = append(lines[:at], append(extra, lines[at:]...)...)
	return strings.Join(lines, "\n") + "\n"
}

func read(path, out string) Step {
	return Step{Role: "tool", Action: "read", Target: path, Output: out}
}
func run(cmd string, exit int, out string) Step {
	return Step{Role: "tool", Action: "run", Target: cmd, Output: out, Exit: exit}
}

// noise is one ordinary step. It carries numbers, signatures, config values and paths of its
// own, so summaries and the ledger's budget are contended the way real sessions contend them.
func (g *gen) noise() Step {
	pkg := g.pick(pkgs)
	switch g.r.IntN(6) {
	case 0:
		return read(g.path(), g.goSource(pkg, nil))
	case 1:
		return run("go test ./internal/"+pkg+"/...", 0, g.testLog(pkg))
	case 2:
		id := g.noiseIdent()
		return run("grep -rn "+id+" internal", 0, g.grepLines(id, nil))
	case 3:
		var b strings.Builder
		for range 6 + g.r.IntN(8) {
			fmt.Fprintf(&b, "-rw-r--r-- 1 dev dev %6d Nov 29 09:%02d %s\n", g.r.IntN(90000), g.r.IntN(60), strings.ToLower(g.pick(nouns))+".go")
		}
		return run("ls -la internal/"+pkg, 0, b.String())
	case 4:
		return read("deploy/"+pkg+".yaml", g.yamlConfig(nil))
	}
	return Step{Role: "assistant", Text: fmt.Sprintf("The %s path looks fine; %s is only called from %s. I'll check the %s tests next.",
		strings.ToLower(g.pick(nouns)), g.noiseIdent(), g.path(), pkg)}
}

// plant returns the steps holding one fact of the given kind, and the fact. The questions name
// their subject in backticks; Answer (answer.go) reads the value back out of a context.
func (g *gen) plant(kind string, round int) ([]Step, Fact) {
	pkg := g.pick(pkgs)
	f := Fact{Kind: kind, Round: round}
	switch kind {
	case KindReturnType:
		name := g.ident()
		f.Answer = fmt.Sprintf("(*%s, []%s, error)", g.typeName(), g.typeName())
		sig := fmt.Sprintf("func %s(ctx context.Context, src io.Reader) %s {", name, f.Answer)
		f.Question = "What does the function `" + name + "` return? Reply with only its return type, exactly as declared."
		return []Step{read(g.path(), g.goSource(pkg, []string{"// " + name + " reads one frame.", sig}))}, f
	case KindLineNumber:
		name := g.ident()
		p := g.path()
		f.Answer = fmt.Sprintf("%s:%d", p, 100+g.r.IntN(1900))
		def := fmt.Sprintf("%s:func %s(ctx context.Context) error {", f.Answer, name)
		f.Question = "Where is the function `" + name + "` defined? Reply with only path:line."
		return []Step{run("grep -rn "+name+" internal", 0, g.grepLines(name, []string{def}))}, f
	case KindConfig:
		key := strings.ToLower(g.ident()[:4]) + "_" + strings.ToLower(g.pick(nouns)) + "_" + g.pick([]string{"timeout", "limit", "window", "threshold"})
		for g.used[key] {
			key += "_x"
		}
		g.used[key] = true
		f.Answer = fmt.Sprintf("%d%s", 1000+g.r.IntN(9000), g.pick([]string{"ms", "KiB", "s", ""}))
		f.Question = "What is `" + key + "` set to in deploy/" + pkg + ".yaml? Reply with only the value."
		return []Step{read("deploy/"+pkg+".yaml", g.yamlConfig([]string{"  " + key + ": " + f.Answer}))}, f
	case KindError:
		name := g.ident()
		tmpl := g.pick(errorTmpls)
		if strings.Index(tmpl, "%d") < strings.Index(tmpl, "%s") || !strings.Contains(tmpl, "%s") {
			if strings.Contains(tmpl, "%s") {
				f.Answer = fmt.Sprintf(tmpl, 1000+g.r.IntN(60000), strings.ToLower(name))
			} else {
				f.Answer = fmt.Sprintf(tmpl, 1000+g.r.IntN(60000))
			}
		} else {
			f.Answer = fmt.Sprintf(tmpl, strings.ToLower(name), 1000+g.r.IntN(60000))
		}
		out := fmt.Sprintf("go: downloading github.com/acme/svc v1.%d.0\n%s: error: %s\nexit status 1\n", g.r.IntN(20), name, f.Answer)
		f.Question = "What exact error did `" + name + "` fail with? Reply with only the error message."
		return []Step{run("go run ./cmd/"+strings.ToLower(name), 1, out)}, f
	case KindRejected:
		subject := g.ident()
		approach := g.pick(approaches) + " in " + subject
		tmpl := g.pick(reasons)
		switch {
		case strings.Count(tmpl, "%") == 1:
			f.Answer = fmt.Sprintf(tmpl, subject)
		case strings.Index(tmpl, "%s") < strings.Index(tmpl, "%d"):
			f.Answer = fmt.Sprintf(tmpl, subject, 2+g.r.IntN(900))
		default:
			f.Answer = fmt.Sprintf(tmpl, 2+g.r.IntN(900), subject)
		}
		f.Question = "Why was `" + approach + "` rejected? Reply with only the reason."
		if g.r.IntN(2) == 0 { // the user rules it out
			return []Step{{Role: "user", Text: fmt.Sprintf("Please finish the %s work next. Don't use %s: %s. Keep the public API as it is.", pkg, approach, f.Answer)}}, f
		}
		return []Step{{Role: "assistant", Text: fmt.Sprintf("I tried %s and rejected it: %s. I'll keep the existing design and move on.", approach, f.Answer)}}, f
	default: // KindCorrection
		subject := g.ident()
		old := 8 << g.r.IntN(5)
		f.Answer = fmt.Sprint(old + 1 + g.r.IntN(200))
		f.Question = "What did the user say the batch limit for `" + subject + "` must be? Reply with only the value."
		return []Step{
			{Role: "assistant", Text: fmt.Sprintf("I'll set the batch limit for %s to %d, as in the other workers.", subject, old)},
			{Role: "user", Text: fmt.Sprintf("Wait, that is wrong. Correction: the batch limit for %s must be %s, not %d.", subject, f.Answer, old)},
		}, f
	}
}

// round generates compaction round n: a user request, steps with facts planted at random
// positions, and the closing exchange, split into turns.
func (g *gen) round(n, steps, facts, turns int) Round {
	var all []Step
	all = append(all, Step{Role: "user", Text: fmt.Sprintf("Round %d: make %s handle %s correctly and report %s errors to the caller.",
		n, g.noiseIdent(), strings.ToLower(g.pick(nouns)), strings.ToLower(g.pick(nouns)))})
	at := map[int]string{}
	for i := range min(facts, steps) {
		pos := g.r.IntN(steps)
		for at[pos] != "" {
			pos = (pos + 1) % steps
		}
		at[pos] = Kinds[((n-1)*facts+i)%len(Kinds)]
	}
	var r Round
	for s := range steps {
		if k := at[s]; k != "" {
			st, f := g.plant(k, n)
			all = append(all, st...)
			r.Facts = append(r.Facts, f)
			continue
		}
		all = append(all, g.noise())
	}
	all = append(all,
		Step{Role: "assistant", Text: fmt.Sprintf("Done: %s now handles the %s case and the tests pass.", g.noiseIdent(), strings.ToLower(g.pick(nouns)))},
		Step{Role: "user", Text: "Thanks. Next, look at the " + g.pick(pkgs) + " package."})
	turns = max(1, min(turns, len(all)))
	per := (len(all) + turns - 1) / turns
	for i := 0; i < len(all); i += per {
		r.Turns = append(r.Turns, all[i:min(len(all), i+per)])
	}
	return r
}

// Session generates rounds rounds of one session. The same seed gives the same session.
func Session(seed uint64, rounds, steps, facts, turns int) []Round {
	g := newGen(seed)
	out := make([]Round, rounds)
	for n := range out {
		out[n] = g.round(n+1, steps, facts, turns)
	}
	return out
}

// Render turns steps into Responses input items for a shape. callSeq numbers the call ids so
// they are unique within a session.
func Render(shape string, steps []Step, callSeq *int) []json.RawMessage {
	var out []json.RawMessage
	for _, s := range steps {
		switch s.Role {
		case "user":
			out = append(out, js(map[string]any{"type": "message", "role": "user",
				"content": []any{map[string]any{"type": "input_text", "text": s.Text}}}))
		case "assistant":
			out = append(out, js(map[string]any{"type": "message", "role": "assistant", "status": "completed",
				"content": []any{map[string]any{"type": "output_text", "text": s.Text, "annotations": []any{}}}}))
		case "tool":
			*callSeq++
			id := fmt.Sprintf("call_%05d", *callSeq)
			name, args, output := toolCall(shape, s, *callSeq)
			out = append(out,
				js(map[string]any{"type": "function_call", "call_id": id, "name": name, "arguments": string(js(args))}),
				js(map[string]any{"type": "function_call_output", "call_id": id, "output": output}))
		}
	}
	return out
}

// toolCall is a tool step as the shape's agent calls it and sees its output.
func toolCall(shape string, s Step, seq int) (name string, args map[string]any, output string) {
	if shape == ShapeClaudeCode {
		if s.Action == "read" {
			var b strings.Builder
			for i, l := range strings.Split(strings.TrimSuffix(s.Output, "\n"), "\n") {
				fmt.Fprintf(&b, "%6d→%s\n", i+1, l)
			}
			return "Read", map[string]any{"file_path": "/home/dev/project/" + s.Target}, b.String()
		}
		out := s.Output
		if s.Exit != 0 {
			out = fmt.Sprintf("Error: Exit code %d\n%s", s.Exit, out)
		}
		return "Bash", map[string]any{"command": s.Target, "description": "Run " + strings.Fields(s.Target)[0]}, out
	}
	cmd := s.Target
	if s.Action == "read" {
		cmd = "sed -n 1,200p " + s.Target
	}
	out := fmt.Sprintf("Chunk ID: %04x\nWall time: %d.%04d seconds\nProcess exited with code %d\nOriginal token count: %d\nOutput:\n%s",
		seq*7919%65536, seq%3, seq*31%10000, s.Exit, len(s.Output)/4, s.Output)
	return "exec_command", map[string]any{"cmd": cmd, "workdir": "/home/dev/project", "yield_time_ms": 10000}, out
}

func js(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of strings and numbers are encoded
	}
	return b
}
