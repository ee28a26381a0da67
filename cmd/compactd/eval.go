package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"

	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/eval"
)

// maxEvalCompactions bounds --compactions: the run is that many rounds per session and
// configuration (ten by default), each a summariser call and its questions.
const maxEvalCompactions = 100

// maxEvalSeeds and maxEvalSweep bound --seeds and --sweep-retain: each seed and each budget is
// a whole run of every configuration.
const (
	maxEvalSeeds = 100
	maxEvalSweep = 10
)

// runEval runs `compactd eval`. Output: the table on stdout (or JSON with --json), an HTML report
// with --html, a progress bar on stderr when stderr is a terminal.
func runEval(args []string) error {
	return evalMain(args, os.Stdout, os.Stderr, isTerminal(os.Stderr))
}

func evalMain(args []string, stdout, stderr io.Writer, progress bool) error {
	d := eval.DefaultConfig()
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	upstream := fs.String("upstream", "", "model upstream base URL without /v1 (OpenAI, Anthropic, vLLM, Ollama, a gateway); empty: the built-in fake upstream")
	apiName := fs.String("api", string(dialect.Responses), "wire API of the sessions: responses (every shape on /v1/responses), messages (Claude Code sessions on /v1/messages, compacted with compact_20260112) or chat (chat-agent sessions on /v1/chat/completions, compacted by compactd's threshold policy chat=--threshold; defaults there: --turns 1 --threshold 4000 --steps 48)")
	compactdURL := fs.String("compactd", "", "measure an already running compactd at this base URL instead of in-process ones (one configuration: whatever it runs)")
	model := fs.String("model", d.Model, "model the sessions and questions are sent to")
	keyEnv := fs.String("api-key-env", "OPENAI_API_KEY", "environment variable holding the upstream API key, sent as a bearer token on responses and as x-api-key on messages (where ANTHROPIC_API_KEY is used unless this is set); an unset variable sends none")
	sumURL := fs.String("summarizer-url", "", "summariser base URL including /v1 (default: the upstream's /v1)")
	sumModel := fs.String("summarizer-model", "", "summariser model (default: the request's model)")
	sumAPI := fs.String("summarizer-api", string(dialect.Responses), "summariser wire API: responses or chat; with --api messages and --upstream, chat (Anthropic's OpenAI-compatible /v1/chat/completions) unless this is set")
	sumKeyEnv := fs.String("summarizer-key-env", "", "environment variable holding the summariser API key (default: forward the upstream key)")
	seed := fs.Uint64("seed", d.Seed, "seed: the same seed gives the same sessions, facts and (with the fake upstream) scores")
	seedList := fs.String("seeds", "", "run several seeds and report recall pooled over them with its spread (lowest–highest seed) and the lowest per-kind scores: a list (1,2,3) or a count N (seeds 1..N); session s of seed k is generated from seed k+s-1, so seeds closer than --sessions share sessions")
	sweep := fs.String("sweep-retain", "", "also run at each of these retain budgets (comma-separated token counts, e.g. 32,512,2048) and report per budget the compaction ratio compactd measured and the recall")
	sessions := fs.Int("sessions", d.Sessions, "sessions per configuration")
	shapes := fs.String("shapes", "", "session shapes, taken in turn: "+strings.Join(eval.Shapes, ", ")+" (default codex and claude-code on responses, claude-code on messages, chat-agent on chat)")
	checkpoints := fs.String("compactions", "1,3,10", "comma-separated compaction counts after which the facts are asked")
	steps := fs.Int("steps", d.Steps, "agent steps per compaction round")
	facts := fs.Int("facts", d.Facts, "facts planted per round")
	turns := fs.Int("turns", d.Turns, "client turns per round (the last carries compact_threshold)")
	threshold := fs.Int("threshold", d.Threshold, "compact_threshold of a round's last turn (tokens)")
	retain := fs.Int("retain-tokens", d.Retain, "newest user-message tokens compactd keeps verbatim")
	ledger := fs.Int("ledger-bytes", d.LedgerBytes, "facts ledger budget of configurations (b)-(d), bytes")
	summaryTokens := fs.Int("summarizer-max-output-tokens", summarizer.DefaultMaxOutputTokens, "the summariser's output budget (max_output_tokens; compactd cuts a longer summary at it and a quarter)")
	configs := fs.String("configs", "a,b,c,d", "configurations to run: a summary, b +ledger, c +gap check, d +recall")
	keep := fs.Float64("lossy-keep", d.Lossy.Keep, "fake upstream only: chance a detail line makes it into a summary")
	maxLines := fs.Int("lossy-max-lines", d.Lossy.MaxLines, "fake upstream only: detail lines a summary keeps at most")
	asJSON := fs.Bool("json", false, "print the report as JSON (every answer included) instead of the table")
	htmlPath := fs.String("html", "", "also write a self-contained HTML report with a chart to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// Every number is checked here: the eval package reads 0 (and below) as "the default", so an
	// unchecked --sessions 0 would run three sessions.
	for _, f := range []struct {
		name string
		v    int
	}{
		{"sessions", *sessions}, {"steps", *steps}, {"facts", *facts}, {"turns", *turns}, {"threshold", *threshold},
		{"retain-tokens", *retain}, {"ledger-bytes", *ledger}, {"lossy-max-lines", *maxLines},
		{"summarizer-max-output-tokens", *summaryTokens},
	} {
		if f.v < 1 {
			return usageErrorf("eval", "--%s must be positive (got %d)", f.name, f.v)
		}
	}
	if !(*keep >= 0 && *keep <= 1) {
		return usageErrorf("eval", "--lossy-keep is a chance, from 0 to 1 (got %v)", *keep)
	}
	var counts []int
	for _, s := range strings.Split(*checkpoints, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		switch {
		case err != nil || n < 1:
			return usageErrorf("eval", "--compactions: %q is not a positive count (a comma-separated list, e.g. 1,3,10)", s)
		case n > maxEvalCompactions:
			return usageErrorf("eval", "--compactions: %d is more than %d, the most eval runs: every compaction is a round of --steps agent steps in each session and configuration", n, maxEvalCompactions)
		}
		counts = append(counts, n)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	modelSet := set["model"]
	if dialect.Name(*apiName) == dialect.Chat { // the Chat route's own sizes (eval.DefaultConfigFor), unless given
		cd := eval.DefaultConfigFor(dialect.Chat)
		if !set["turns"] {
			*turns = cd.Turns
		}
		if !set["threshold"] {
			*threshold = cd.Threshold
		}
		if !set["steps"] {
			*steps = cd.Steps
		}
	}
	seeds, err := parseSeeds(*seedList)
	if err != nil {
		return usageErrorf("eval", "%v", err)
	}
	if len(seeds) > 0 && set["seed"] {
		return usageErrorf("eval", "--seed and --seeds: give one seed or several, not both")
	}
	var retains []int
	if *sweep != "" {
		for _, s := range strings.Split(*sweep, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 {
				return usageErrorf("eval", "--sweep-retain: %q is not a positive token count (a comma-separated list, e.g. 32,512,2048)", s)
			}
			retains = append(retains, n)
		}
		if len(retains) > maxEvalSweep {
			return usageErrorf("eval", "--sweep-retain: %d budgets is more than %d, the most eval sweeps: each is a whole run of every configuration", len(retains), maxEvalSweep)
		}
	}
	if dialect.Name(*apiName) == dialect.Messages {
		if !set["api-key-env"] {
			*keyEnv = "ANTHROPIC_API_KEY"
		}
		if !set["summarizer-api"] && *upstream != "" {
			*sumAPI = string(dialect.Chat)
		}
	}
	if (*upstream != "" || *compactdURL != "") && !modelSet {
		return usageErrorf("eval", "--model is required with --upstream or --compactd (the default %q is the fake upstream's)", d.Model)
	}
	cfg := eval.Config{Seed: *seed, Sessions: *sessions, Steps: *steps, Facts: *facts, Turns: *turns,
		Threshold: *threshold, Retain: *retain, LedgerBytes: *ledger, SummaryTokens: *summaryTokens, Model: *model, API: dialect.Name(*apiName),
		Upstream: strings.TrimRight(*upstream, "/"), Compactd: *compactdURL,
		SummarizerURL: *sumURL, SummarizerModel: *sumModel, SummarizerAPI: dialect.Name(*sumAPI),
		Lossy: d.Lossy, Seeds: seeds, SweepRetain: retains}
	cfg.Lossy.Keep, cfg.Lossy.MaxLines = *keep, *maxLines
	cfg.APIKey = os.Getenv(*keyEnv)
	if *sumKeyEnv != "" {
		if cfg.SummarizerKey = os.Getenv(*sumKeyEnv); cfg.SummarizerKey == "" {
			return fmt.Errorf("--summarizer-key-env: %s is not set", *sumKeyEnv)
		}
	}
	for _, s := range strings.Split(*shapes, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Shapes = append(cfg.Shapes, s)
		}
	}
	for _, s := range strings.Split(*configs, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Variants = append(cfg.Variants, s)
		}
	}
	cfg.Checkpoints = counts
	if err := cfg.Validate(); err != nil {
		return usageErrorf("eval", "%v", err)
	}
	if progress {
		cfg.Progress = func(done, total int) { drawProgress(stderr, done, total) }
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := eval.Run(ctx, cfg)
	if progress {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	if *htmlPath != "" {
		f, err := os.Create(*htmlPath)
		if err != nil {
			return err
		}
		if err := rep.WriteHTML(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if *asJSON {
		return rep.WriteJSON(stdout)
	}
	return rep.WriteText(stdout)
}

// parseSeeds reads --seeds: "" (none: --seed), a count N (seeds 1..N), or a comma-separated
// list of seeds.
func parseSeeds(s string) ([]uint64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if !strings.Contains(s, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--seeds: %q is neither a positive count nor a comma-separated list of seeds (e.g. 5, or 1,2,3)", s)
		}
		if n > maxEvalSeeds {
			return nil, fmt.Errorf("--seeds: %d seeds is more than %d, the most eval runs: each seed is a whole run of every configuration", n, maxEvalSeeds)
		}
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(i + 1)
		}
		return out, nil
	}
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds: %q is not a seed (a comma-separated list of non-negative integers, e.g. 1,2,3)", f)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("--seeds: seed %d is named twice", n)
		}
		out = append(out, n)
	}
	if len(out) > maxEvalSeeds {
		return nil, fmt.Errorf("--seeds: %d seeds is more than %d, the most eval runs: each seed is a whole run of every configuration", len(out), maxEvalSeeds)
	}
	return out, nil
}

// drawProgress redraws a one-line bar in place.
func drawProgress(w io.Writer, done, total int) {
	const width = 30
	filled := width * done / max(total, 1)
	fmt.Fprintf(w, "\r[%s%s] %d/%d rounds", strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, total)
}

// isTerminal reports whether f is a character device (a terminal), without a terminal library.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
