package eval

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/compactd/compactd/internal/dialect"
)

// Shapes of agent traffic. A shape decides how the abstract steps of a session are rendered as
// wire items: which tools an agent calls and what their output looks like.
const (
	// ShapeCodex is a Codex CLI session: exec_command function calls whose output carries
	// Codex's "Chunk ID / Wall time / Process exited with code" header.
	ShapeCodex = "codex"
	// ShapeClaudeCode is a Claude Code session: Read (line-numbered file contents) and Bash
	// tool calls. On dialect.Responses it is rendered as Responses items (function_call /
	// function_call_output); on dialect.Messages as Messages tool_use / tool_result blocks
	// (RenderMessages).
	ShapeClaudeCode = "claude-code"
	// ShapeChatAgent is a generic Chat Completions agent (Qwen Code, Aider, Cline and their kin
	// on local models): system, user and assistant string messages, read_file and
	// run_shell_command tool_calls and their "tool" messages (RenderChat). It speaks only
	// dialect.Chat, and dialect.Chat runs only it.
	ShapeChatAgent = "chat-agent"
)

// Shapes lists the shapes a run may name.
var Shapes = []string{ShapeCodex, ShapeClaudeCode, ShapeChatAgent}

// ShapesFor lists the shapes an API's sessions may have, the default of a run on it first.
func ShapesFor(api dialect.Name) []string {
	switch api {
	case dialect.Messages:
		return []string{ShapeClaudeCode}
	case dialect.Chat:
		return []string{ShapeChatAgent}
	}
	return []string{ShapeCodex, ShapeClaudeCode}
}

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

// The vocabulary of a billing service's code base, where the sessions happen.
var (
	verbs = []string{"handle", "compute", "validate", "refresh", "publish", "collect", "restore", "migrate",
		"reconcile", "schedule", "encrypt", "compress", "throttle", "dispatch", "register", "evict", "persist",
		"normalize", "forward", "retry", "settle", "accrue", "prorate", "void"}
	nouns = []string{"Invoice", "Account", "Webhook", "Session", "Cart", "Refund", "Coupon", "Payout", "Customer",
		"Order", "Receipt", "Meter", "Usage", "Credit", "Charge", "Dispute", "Tax", "Price", "Catalog", "Wallet",
		"Voucher", "Profile", "Region", "Currency", "Mandate", "Subscription"}
	pkgs    = []string{"billing", "payments", "tax", "ledgerdb", "webhooks", "pricing", "accounts", "notify", "fx", "reports"}
	argType = []string{"string", "int64", "uuid.UUID", "time.Time", "money.Amount", "*Request", "[]LineItem", "bool"}
	retType = []string{"error", "(int64, error)", "(*Invoice, error)", "bool", "money.Amount", "([]Charge, error)"}
	cfgKeys = []string{"dsn", "max_open_conns", "statement_timeout", "retry_backoff", "webhook_secret_ref", "currency",
		"rounding", "grace_period", "batch_window", "rate_limit", "log_format", "region"}
	approaches = []string{"a per-tenant goroutine pool", "caching prices in Redis", "a single advisory lock",
		"storing amounts as float64", "an outbox table poller", "server-sent events for webhooks",
		"a materialised view refreshed hourly", "two-phase commit across shards", "optimistic row versions",
		"JSONB columns for line items", "a retry queue in memory"}
	reasons = []string{
		"%s double-charged %d customers when a retry raced the first attempt",
		"rounding drift in %s reached %d cents per thousand invoices",
		"the lock on %s stalled checkout for %dms at peak",
		"%s lost events when the pod was evicted mid-batch",
		"migrating %s would have locked the table for %d minutes",
		"%s made the nightly report %d times slower",
	}
	errorTmpls = []string{
		"pq: duplicate key value violates unique constraint \"%s_pkey\" (row %d)",
		"stripe: card_declined for charge %d in %s",
		"dial tcp 10.0.%d.7:5432: i/o timeout in %s",
		"invoice %d: currency mismatch in %s: EUR vs USD",
		"webhook signature check failed after %dms for %s",
	}
)

// gen is the seeded session generator: every byte of a session derives from its RNG.
type gen struct {
	r    *rand.Rand
	used map[string]bool
}

func newGen(seed uint64) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed^0x5eed, seed+0x2545f4914f6cdd1d)), used: map[string]bool{}}
}

func (g *gen) one(xs []string) string { return xs[g.r.IntN(len(xs))] }
func (g *gen) num(lo, hi int) int     { return lo + g.r.IntN(hi-lo) }

// ident is a camelCase identifier never returned before in this session: each fact's subject is
// unique, so its question has exactly one answer. Noise uses two-word names, facts three.
func (g *gen) ident() string {
	for {
		s := g.one(verbs) + g.one(nouns) + g.one(nouns)
		if !g.used[s] {
			g.used[s] = true
			return s
		}
	}
}

func (g *gen) word() string { return g.one(verbs) + g.one(nouns) }
func (g *gen) typeName() string {
	return g.one(nouns) + g.one([]string{"Record", "Batch", "Event", "Line", "Row"})
}
func (g *gen) path() string {
	return "internal/" + g.one(pkgs) + "/" + strings.ToLower(g.one(nouns)) + "_" + g.one([]string{"store", "handler", "job", "client"}) + ".go"
}

// method is one Go method of the service's handler type.
func (g *gen) method(name string) string {
	args := []string{"ctx context.Context"}
	for i := range g.r.IntN(3) {
		args = append(args, fmt.Sprintf("%s %s", []string{"id", "at", "amt"}[i], g.one(argType)))
	}
	return fmt.Sprintf("func (h *%sHandler) %s(%s) %s {", g.one(nouns), name, strings.Join(args, ", "), g.one(retType))
}

// goFile is a plausible Go file of the service; extra lines go in at a random position.
func (g *gen) goFile(pkg string, extra []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "package %s\n\nimport (\n\t\"context\"\n\t\"log/slog\"\n)\n\n", pkg)
	n := g.num(3, 6)
	at := g.r.IntN(n)
	for i := range n {
		if i == at && extra != nil {
			b.WriteString(strings.Join(extra, "\n") + "\n\treturn nil, nil, ctx.Err()\n}\n\n")
		}
		name := g.word()
		fmt.Fprintf(&b, "%s\n\tslog.DebugContext(ctx, %q, \"attempt\", %d)\n\treturn h.store.Save(ctx, %q)\n}\n\n",
			g.method(name), strings.ToLower(name), g.num(1, 9), strings.ToLower(g.one(nouns)))
	}
	return b.String()
}

func (g *gen) testRun(pkg string) string {
	var b strings.Builder
	for range g.num(2, 7) {
		fmt.Fprintf(&b, "ok  \tgithub.com/shopco/billing/internal/%s/%s\t0.%03ds\n", pkg, strings.ToLower(g.one(nouns)), g.num(1, 999))
	}
	fmt.Fprintf(&b, "?   \tgithub.com/shopco/billing/internal/%s/testdata\t[no test files]\n", pkg)
	return b.String()
}

func (g *gen) cfgLine(key string) string {
	var v string
	switch key {
	case "statement_timeout", "retry_backoff", "grace_period", "batch_window":
		v = fmt.Sprintf("%dms", g.num(50, 5000))
	case "currency":
		v = g.one([]string{"EUR", "USD", "GBP"})
	case "region":
		v = g.one([]string{"eu-west-1", "us-east-2"})
	case "dsn":
		v = "postgres://billing@db:5432/billing"
	default:
		v = fmt.Sprint(g.num(2, 400))
	}
	return "  " + key + ": " + v
}

// yaml is a deploy config of noise keys, with extra lines spliced in at a random position.
func (g *gen) yaml(extra []string) string {
	lines := []string{"apiVersion: v1", "kind: ConfigMap", "data:"}
	for range g.num(5, 10) {
		lines = append(lines, g.cfgLine(g.one(cfgKeys)))
	}
	at := 3 + g.r.IntN(len(lines)-2)
	lines = append(lines[:at], append(extra, lines[at:]...)...)
	return strings.Join(lines, "\n") + "\n"
}

// grep is ripgrep-style output for an identifier, with extra lines at a random position.
func (g *gen) grep(ident string, extra []string) string {
	var lines []string
	for range g.num(2, 6) {
		lines = append(lines, fmt.Sprintf("%s:%d:\tif err := h.%s(ctx, id); err != nil {", g.path(), g.num(20, 700), ident))
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
	pkg := g.one(pkgs)
	switch g.r.IntN(6) {
	case 0:
		return read(g.path(), g.goFile(pkg, nil))
	case 1:
		return run("go test ./internal/"+pkg+"/...", 0, g.testRun(pkg))
	case 2:
		id := g.word()
		return run("rg -n "+id+" internal", 0, g.grep(id, nil))
	case 3:
		var b strings.Builder
		for range g.num(4, 12) {
			fmt.Fprintf(&b, "%s_%s.go\n", strings.ToLower(g.one(nouns)), g.one([]string{"store", "handler", "job", "client", "test"}))
		}
		return run("ls internal/"+pkg, 0, b.String())
	case 4:
		return read("deploy/"+pkg+".yaml", g.yaml(nil))
	}
	return Step{Role: "assistant", Text: fmt.Sprintf("%s only runs after %s commits, so the %s path is safe. Next I'll look at %s.",
		g.word(), g.word(), strings.ToLower(g.one(nouns)), g.path())}
}

// plant returns the steps holding one fact of the given kind, and the fact. The questions name
// their subject in backticks; Answer (answer.go) reads the value back out of a context.
func (g *gen) plant(kind string, round int) ([]Step, Fact) {
	pkg := g.one(pkgs)
	f := Fact{Kind: kind, Round: round}
	switch kind {
	case KindReturnType:
		name := g.ident()
		f.Answer = fmt.Sprintf("(*%s, []%s, error)", g.typeName(), g.typeName())
		sig := fmt.Sprintf("func %s(ctx context.Context, src io.Reader) %s {", name, f.Answer)
		f.Question = "What does the function `" + name + "` return? Reply with only its return type, exactly as declared."
		return []Step{read(g.path(), g.goFile(pkg, []string{"// " + name + " loads the billing period.", sig}))}, f
	case KindLineNumber:
		name := g.ident()
		p := g.path()
		f.Answer = fmt.Sprintf("%s:%d", p, 100+g.r.IntN(1900))
		def := fmt.Sprintf("%s:func %s(ctx context.Context) error {", f.Answer, name)
		f.Question = "Where is the function `" + name + "` defined? Reply with only path:line."
		return []Step{run("rg -n "+name+" internal", 0, g.grep(name, []string{def}))}, f
	case KindConfig:
		key := strings.ToLower(g.ident()[:4]) + "_" + strings.ToLower(g.one(nouns)) + "_" + g.one([]string{"timeout", "limit", "window", "threshold"})
		for g.used[key] {
			key += "_x"
		}
		g.used[key] = true
		f.Answer = fmt.Sprintf("%d%s", 1000+g.r.IntN(9000), g.one([]string{"ms", "KiB", "s", ""}))
		f.Question = "What is `" + key + "` set to in deploy/" + pkg + ".yaml? Reply with only the value."
		return []Step{read("deploy/"+pkg+".yaml", g.yaml([]string{"  " + key + ": " + f.Answer}))}, f
	case KindError:
		name := g.ident()
		tmpl := g.one(errorTmpls)
		if strings.Index(tmpl, "%d") < strings.Index(tmpl, "%s") || !strings.Contains(tmpl, "%s") {
			if strings.Contains(tmpl, "%s") {
				f.Answer = fmt.Sprintf(tmpl, 1000+g.r.IntN(60000), strings.ToLower(name))
			} else {
				f.Answer = fmt.Sprintf(tmpl, 1000+g.r.IntN(60000))
			}
		} else {
			f.Answer = fmt.Sprintf(tmpl, strings.ToLower(name), 1000+g.r.IntN(60000))
		}
		out := fmt.Sprintf("go: downloading github.com/shopco/money v1.%d.0\n%s: error: %s\nexit status 1\n", g.r.IntN(20), name, f.Answer)
		f.Question = "What exact error did `" + name + "` fail with? Reply with only the error message."
		return []Step{run("go run ./cmd/"+strings.ToLower(name), 1, out)}, f
	case KindRejected:
		subject := g.ident()
		approach := g.one(approaches) + " in " + subject
		tmpl := g.one(reasons)
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
		n, g.word(), strings.ToLower(g.one(nouns)), strings.ToLower(g.one(nouns)))})
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
		Step{Role: "assistant", Text: fmt.Sprintf("Done: %s now handles the %s case and the tests pass.", g.word(), strings.ToLower(g.one(nouns)))},
		Step{Role: "user", Text: "Thanks. Next, look at the " + g.one(pkgs) + " package."})
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
