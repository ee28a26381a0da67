// Package eval measures what survives compaction: it drives seeded, realistic agent sessions
// through a real compactd in front of a real (or the fake) upstream, plants facts of the kinds
// summaries lose, and after 1, 3 and 10 compactions asks for them as ordinary turns, scoring the
// answers by exact match. Four configurations run side by side:
//
//	(a) summary       summary only (no facts ledger)
//	(b) +ledger       summary and the facts ledger
//	(c) +gap check    plus the summariser's second, gap-check pass
//	(d) +recall       plus the recall tool over the archive of replaced history
//
// Every configuration compacts the same history: the session's scripted steps play the agent,
// and the model's replies to session turns are not kept (only compaction items are), so the
// scores differ only by what compactd delivered upstream.
package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/english"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/proxy"
)

// Variant is one compactd configuration under test.
type Variant struct {
	Name   string `json:"name"` // "a".."d", or "external"
	Label  string `json:"label"`
	Ledger bool   `json:"ledger"`
	Gap    bool   `json:"gap_check"`
	Recall bool   `json:"recall"`
}

// Variants are the four configurations, in the order their recall is expected to rise.
var Variants = []Variant{
	{Name: "a", Label: "summary"},
	{Name: "b", Label: "+ledger", Ledger: true},
	{Name: "c", Label: "+gap check", Ledger: true, Gap: true},
	{Name: "d", Label: "+recall", Ledger: true, Gap: true, Recall: true},
}

// Config sizes and points a run. Zero fields take the defaults of DefaultConfig.
type Config struct {
	Seed        uint64   `json:"seed"`
	Sessions    int      `json:"sessions"`
	Shapes      []string `json:"shapes"`
	Checkpoints []int    `json:"checkpoints"` // compaction counts to ask after; the last is the rounds run
	Steps       int      `json:"steps"`       // agent steps per round
	Facts       int      `json:"facts"`       // facts planted per round
	Turns       int      `json:"turns"`       // client turns per round; the last carries the threshold
	Threshold   int      `json:"threshold"`   // compact_threshold of a round's last turn
	Retain      int      `json:"retain_tokens"`
	LedgerBytes int      `json:"ledger_bytes"`
	// SummaryTokens is the summariser's output budget: max_output_tokens on its requests, and the
	// bound compactd cuts a longer summary at (as serve's --summarizer-max-output-tokens). 0: the
	// summariser's default.
	SummaryTokens int    `json:"summary_tokens,omitempty"`
	Model         string `json:"model"`
	// API is the wire API of the sessions (one of dialect.All): dialect.Responses (default)
	// sends every shape to /v1/responses (Codex's and the OpenAI SDKs' route);
	// dialect.Messages sends Claude Code sessions (the only shape that speaks it) to
	// /v1/messages as Anthropic Messages requests, compacting with the compact_20260112
	// context-management edit at Config.messagesTrigger tokens; dialect.Chat sends chat-agent
	// sessions to /v1/chat/completions, where the in-process compactd compacts with the Chat
	// route's threshold policy at Threshold, transparently (chat.go).
	API dialect.Name `json:"api"`

	// Seeds, when it has more than one seed, runs every seed (Seed is ignored) and reports per
	// configuration the recall pooled over them, its spread (Point.Spread) and the lowest
	// per-kind score (Point.MinByKind); Report.Runs holds each seed's own report.
	Seeds []uint64 `json:"seeds,omitempty"`
	// SweepRetain runs the configurations again at each of these retain budgets (RetainTokens)
	// and reports, per budget, the compaction ratio compactd measured and the recall
	// (Report.Sweep). The main table stays the run at Retain.
	SweepRetain []int `json:"sweep_retain_tokens,omitempty"`

	// Upstream is the model's base URL (without /v1); "" runs the built-in fake upstream with
	// the Lossy summariser.
	Upstream string             `json:"upstream"`
	Lossy    fakeupstream.Lossy `json:"lossy"`
	// APIKey goes to compactd as a bearer token (compactd forwards it upstream).
	APIKey string `json:"-"`
	// Summariser of the in-process compactd: base URL with /v1 (default Upstream+"/v1"),
	// model (default the request's), key (default: forward APIKey), wire API (responses|chat).
	SummarizerURL, SummarizerModel, SummarizerKey string       `json:"-"`
	SummarizerAPI                                 dialect.Name `json:"-"`
	// Compactd is an external compactd's base URL; when set, one configuration ("external",
	// whatever that compactd runs) is measured and summariser costs are unknown.
	Compactd string `json:"compactd,omitempty"`
	// Variants limits the configurations (names "a".."d"); all four when empty.
	Variants []string `json:"variants,omitempty"`

	// Progress, when set, is called after every round of every session and configuration.
	Progress func(done, total int) `json:"-"`
	// Timeout bounds one HTTP call (default 10 minutes).
	Timeout time.Duration `json:"-"`

	// Test hooks: keep the built-in fake's request bodies, and hand the fake to the test.
	recordFake bool
	onFake     func(*fakeupstream.Server)
}

// DefaultConfig is the full-size run: three sessions per shape mix, ten compactions.
func DefaultConfig() Config {
	return Config{Seed: 1, Sessions: 3, Shapes: ShapesFor(dialect.Responses), Checkpoints: []int{1, 3, 10}, Steps: 24, Facts: 3,
		Turns: 3, Threshold: 2000, Retain: 32, LedgerBytes: proxy.DefaultLedgerBytes, Model: "fake-model",
		Lossy: fakeupstream.Lossy{Keep: 0.5, MaxLines: 40}}
}

// DefaultConfigFor is DefaultConfig for a run on api. On dialect.Chat every request is under the
// route's threshold policy, not only a round's last turn as on the other routes, so a round is
// one request (Turns 1: a round compacts once, where the other routes' rounds carry the
// threshold), and the threshold is 4000, above what a compacted conversation holds (the summary
// and a full 6 KiB ledger with its gap-check findings measured about 3,200 tokens), so that the
// turn after a compaction, a question among them, is not compacted again; Steps doubles with
// the threshold, keeping a round's tokens per threshold token as on Responses.
func DefaultConfigFor(api dialect.Name) Config {
	d := DefaultConfig()
	d.API, d.Shapes = api, ShapesFor(api)
	if api == dialect.Chat {
		d.Turns, d.Threshold, d.Steps = 1, 4000, 48
	}
	return d
}

func (c Config) withDefaults() Config {
	if c.API == "" {
		c.API = dialect.Responses
	}
	d := DefaultConfigFor(c.API)
	if c.Sessions <= 0 {
		c.Sessions = d.Sessions
	}
	if len(c.Shapes) == 0 {
		c.Shapes = ShapesFor(c.API)
	}
	if len(c.Checkpoints) == 0 {
		c.Checkpoints = d.Checkpoints
	}
	c.Checkpoints = slices.Clone(c.Checkpoints)
	slices.Sort(c.Checkpoints)
	c.Checkpoints = slices.Compact(c.Checkpoints)
	if c.Steps <= 0 {
		c.Steps = d.Steps
	}
	if c.Facts <= 0 {
		c.Facts = d.Facts
	}
	if c.Turns <= 0 {
		c.Turns = d.Turns
	}
	if c.Threshold <= 0 {
		c.Threshold = d.Threshold
	}
	if c.Retain <= 0 {
		c.Retain = d.Retain
	}
	if c.LedgerBytes <= 0 {
		c.LedgerBytes = d.LedgerBytes
	}
	if c.Model == "" {
		c.Model = d.Model
	}
	if c.Lossy.Keep == 0 && c.Lossy.MaxLines == 0 {
		c.Lossy = d.Lossy
	}
	if c.Lossy.Seed == 0 {
		c.Lossy.Seed = c.Seed
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Minute
	}
	return c
}

// Validate reports what Run would refuse in c (an unknown API, shape or configuration, or a
// shape the API does not speak), each error naming the flag of `compactd eval` that sets it.
func (c Config) Validate() error { return c.withDefaults().validate() }

func (c Config) validate() error {
	if !c.API.Valid() {
		return fmt.Errorf("--api: unknown API %q (have %s)", c.API, apiNames())
	}
	for _, s := range c.Shapes {
		if !slices.Contains(Shapes, s) {
			return fmt.Errorf("--shapes: unknown shape %q (have %s)", s, strings.Join(Shapes, ", "))
		}
		if spoken := ShapesFor(c.API); !slices.Contains(spoken, s) {
			var speaks []string
			for _, api := range dialect.All {
				if slices.Contains(ShapesFor(api), s) {
					speaks = append(speaks, apiTitle(api))
				}
			}
			return fmt.Errorf("--shapes: shape %q speaks only the %s API; the --api %s route runs %s sessions", s, strings.Join(speaks, " and "), c.API, strings.Join(spoken, ", "))
		}
	}
	seen := map[uint64]bool{}
	for _, sd := range c.Seeds {
		if seen[sd] {
			return fmt.Errorf("--seeds: seed %d is named twice", sd)
		}
		seen[sd] = true
	}
	for _, n := range c.SweepRetain {
		if n < 1 {
			return fmt.Errorf("--sweep-retain: %d is not a positive token count", n)
		}
	}
	if len(c.SweepRetain) > 0 && c.API == dialect.Messages {
		return errors.New("--sweep-retain: a Messages compaction summarises the whole conversation (nothing is retained verbatim), so the retain budget changes nothing on --api messages")
	}
	if len(c.SweepRetain) > 0 && c.Compactd != "" {
		return errors.New("--sweep-retain: an external compactd (--compactd) keeps its own retain budget; the sweep needs in-process ones")
	}
	if c.Checkpoints[0] < 1 {
		return errors.New("--compactions: compaction checkpoints must be positive")
	}
	for _, v := range c.Variants {
		if !slices.ContainsFunc(Variants, func(x Variant) bool { return x.Name == v }) {
			return fmt.Errorf("--configs: unknown configuration %q (have a, b, c, d)", v)
		}
	}
	return nil
}

// Point is the score after one checkpoint.
type Point struct {
	Compactions int            `json:"compactions"`
	Facts       int            `json:"facts"`
	Correct     int            `json:"correct"`
	Recall      float64        `json:"recall"` // Correct / Facts
	ByKind      map[string]int `json:"correct_by_kind"`
	KindFacts   map[string]int `json:"facts_by_kind"`
	// Grep counts the facts whose exact answer text was in the raw log or the question turn's
	// context (grep.go): the upper bound of Correct. GrepRecall is Grep / Facts.
	Grep       int            `json:"grep"`
	GrepRecall float64        `json:"grep_recall"`
	GrepByKind map[string]int `json:"grep_by_kind"`
	// Spread, on a report pooled over several seeds, is the lowest and highest recall of one
	// seed; MinByKind is, per kind, the score of the seed that answered the smallest share.
	Spread    *Spread          `json:"spread,omitempty"`
	MinByKind map[string]Score `json:"min_by_kind,omitempty"`
}

// Spread is the range of one seed's recall over the seeds of a pooled report.
type Spread struct {
	Seeds int     `json:"seeds"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
}

// Score is a count of correct answers out of facts asked.
type Score struct {
	Correct int `json:"correct"`
	Facts   int `json:"facts"`
}

// Cost is the summariser's spend per compaction, averaged (gap-check passes included).
type Cost struct {
	Known        bool    `json:"known"` // false for an external compactd
	Compactions  int     `json:"compactions"`
	Calls        float64 `json:"calls_per_compaction"`
	InputTokens  float64 `json:"input_tokens_per_compaction"`
	OutputTokens float64 `json:"output_tokens_per_compaction"`
	LatencyMS    float64 `json:"latency_ms_per_compaction"`
}

// Row is one configuration's results.
type Row struct {
	Variant Variant `json:"config"`
	// NA, when set, says why the configuration cannot be measured on this run's route: the row
	// has no points, and every report shows "n/a" rather than a number.
	NA     string  `json:"unavailable,omitempty"`
	Points []Point `json:"points"`
	Cost   Cost    `json:"summariser"`
	// Ratio is the compaction ratio compactd measured (its event log's tokens before and after
	// each compaction); unknown for an external compactd.
	Ratio Ratio `json:"compaction_ratio"`
	// ExtraCompactions counts compactions past the first of a round (the Chat route's policy
	// compacts whenever a turn crosses the threshold, which can be twice in a round); the
	// checkpoints count rounds.
	ExtraCompactions int `json:"extra_compactions,omitempty"`
	// QuestionCompactions counts question turns compactd compacted (on the Chat route, a
	// threshold below what a compacted conversation holds): their answers read a context
	// compacted once more than the checkpoint says.
	QuestionCompactions int `json:"question_compactions,omitempty"`
	// Answers are every question's answer, per checkpoint, in asking order (in each of Runs on
	// a report pooled over several seeds).
	Answers []Asked `json:"answers"`
}

// Ratio is how much of the conversation compactions replaced: 1 - tokens after / tokens before
// per compaction, as compactd counted them (archive.Event Before and After), over Compactions.
type Ratio struct {
	Known       bool    `json:"known"`
	Compactions int     `json:"compactions"`
	Mean        float64 `json:"mean"`
	Min         float64 `json:"min"`
	Max         float64 `json:"max"`
	// TokensBefore and TokensAfter are the means of compactd's counts.
	TokensBefore float64 `json:"tokens_before"`
	TokensAfter  float64 `json:"tokens_after"`
}

// Asked is one question and what came back.
type Asked struct {
	Session     int    `json:"session"`
	Shape       string `json:"shape"`
	Compactions int    `json:"compactions"`
	Fact        Fact   `json:"fact"`
	Got         string `json:"got"`
	Correct     bool   `json:"correct"`
	// Grep: the answer text was in the raw log or the question turn's context (grep.go).
	Grep bool `json:"grep"`
	// InContext: the answer text was in what compactd sent the model on the question turn
	// (unknown, false, for an external compactd).
	InContext bool `json:"in_context"`
}

// Report is a whole run.
type Report struct {
	Config   Config `json:"config"`
	Upstream string `json:"upstream_kind"` // "fake" or "url"
	// Route is the compactd route the sessions ran on: "/v1/responses", "/v1/messages" or
	// "/v1/chat/completions".
	Route string `json:"route"`
	// GrepScope says what the grep column searched: "raw log or the question turn's context", or
	// "raw log" for an external compactd (whose upstream traffic the eval cannot see).
	GrepScope string `json:"grep_scope"`
	// Rows are the configurations at Config.Retain: one seed's, or pooled over Config.Seeds.
	Rows []Row `json:"rows"`
	// Runs are the single-seed reports Rows pools, when Config.Seeds has several.
	Runs []*Report `json:"runs,omitempty"`
	// Sweep is the run at each of Config.SweepRetain, pooled over the seeds like Rows.
	Sweep []Setting `json:"sweep,omitempty"`
}

// Setting is one retain budget of a sweep.
type Setting struct {
	Retain int   `json:"retain_tokens"`
	Rows   []Row `json:"rows"`
}

// Run drives the sessions through every configuration and scores them: once, or once per seed
// of Config.Seeds and per budget of Config.SweepRetain.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	full := cfg.withDefaults()
	if err := full.validate(); err != nil {
		return nil, err
	}
	seeds := full.Seeds
	if len(seeds) == 0 {
		seeds = []uint64{full.Seed}
	}
	retains := []int{full.Retain}
	for _, n := range full.SweepRetain {
		if !slices.Contains(retains, n) {
			retains = append(retains, n)
		}
	}
	if len(seeds) == 1 && len(full.SweepRetain) == 0 {
		one := cfg
		one.Seed, one.Seeds = seeds[0], nil
		return runOne(ctx, one.withDefaults())
	}
	runs, done := map[int][]*Report{}, 0
	progress := cfg.Progress
	for _, retain := range retains {
		for _, sd := range seeds {
			one := cfg // not defaulted: a lossy seed left 0 follows each run's seed
			one.Seed, one.Seeds, one.SweepRetain, one.Retain = sd, nil, nil, retain
			offset := done
			if progress != nil {
				one.Progress = func(d, t int) { progress(offset+d, t*len(seeds)*len(retains)) }
			}
			rep, err := runOne(ctx, one.withDefaults())
			if err != nil {
				if len(seeds) > 1 {
					err = fmt.Errorf("seed %d: %w", sd, err)
				}
				if len(retains) > 1 {
					err = fmt.Errorf("retain %d tokens: %w", retain, err)
				}
				return nil, err
			}
			done += full.rounds() * rep.runnable() * full.Sessions
			runs[retain] = append(runs[retain], rep)
		}
	}
	main := runs[full.Retain]
	out := &Report{Config: full, Upstream: main[0].Upstream, Route: main[0].Route, GrepScope: main[0].GrepScope, Rows: main[0].Rows}
	if len(seeds) > 1 {
		out.Rows, out.Runs = pool(main), main
	} else {
		out.Config.Seed = seeds[0]
	}
	for _, n := range full.SweepRetain {
		rows := runs[n][0].Rows
		if len(seeds) > 1 {
			rows = pool(runs[n])
		}
		out.Sweep = append(out.Sweep, Setting{Retain: n, Rows: rows})
		if n != full.Retain && len(seeds) > 1 {
			out.Runs = append(out.Runs, runs[n]...)
		}
	}
	return out, nil
}

func (c Config) rounds() int { return c.Checkpoints[len(c.Checkpoints)-1] }

// runnable counts the rows that ran.
func (r *Report) runnable() int {
	n := 0
	for _, row := range r.Rows {
		if row.NA == "" {
			n++
		}
	}
	return n
}

// runOne is one seed at one retain budget; cfg has its defaults.
func runOne(ctx context.Context, cfg Config) (*Report, error) {
	rep := &Report{Config: cfg, Upstream: "url", Route: cfg.route(), GrepScope: "raw log or the question turn's context"}
	upstream := cfg.Upstream
	var fake *fakeupstream.Server
	if upstream == "" && cfg.Compactd == "" {
		fake = fakeupstream.New(fakeupstream.Options{DropBodies: !cfg.recordFake, Summaries: fakeupstream.LossySummaries(cfg.Lossy), Answer: Answer})
		if cfg.onFake != nil {
			cfg.onFake(fake)
		}
		base, stop, err := fake.Start()
		if err != nil {
			return nil, err
		}
		defer stop()
		upstream, rep.Upstream = base, "fake"
		if cfg.SummarizerModel == "" {
			cfg.SummarizerModel = "fake-summariser"
		}
	}
	var tp *tap
	if cfg.Compactd == "" {
		var err error
		if tp, err = startTap(upstream); err != nil {
			return nil, err
		}
		defer tp.close() // before the fake stops: deferred calls run last first
	} else {
		rep.GrepScope = "raw log"
	}
	variants := Variants
	if cfg.Compactd != "" {
		variants = []Variant{{Name: "external", Label: "external compactd"}}
	} else if len(cfg.Variants) > 0 {
		variants = slices.DeleteFunc(slices.Clone(Variants), func(v Variant) bool { return !slices.Contains(cfg.Variants, v.Name) })
	}
	rounds := cfg.rounds()
	runnable := 0
	for _, v := range variants {
		if cfg.API != dialect.Messages || messagesUnavailable(v) == "" {
			runnable++
		}
	}
	total, done := runnable*cfg.Sessions*rounds, 0
	client := &http.Client{Timeout: cfg.Timeout}
	for _, v := range variants {
		row := Row{Variant: v}
		if cfg.API == dialect.Messages && v.Name != "external" {
			if row.NA = messagesUnavailable(v); row.NA != "" {
				rep.Rows = append(rep.Rows, row)
				continue
			}
		}
		base, m, stop := cfg.Compactd, (*meter)(nil), func() {}
		if cfg.Compactd == "" {
			var err error
			if base, m, stop, err = startCompactd(ctx, cfg, upstream, tp.base, v); err != nil {
				return nil, err
			}
		}
		points := make([]Point, len(cfg.Checkpoints))
		for i, k := range cfg.Checkpoints {
			points[i] = Point{Compactions: k, ByKind: map[string]int{}, KindFacts: map[string]int{}, GrepByKind: map[string]int{}}
		}
		for s := range cfg.Sessions {
			sess := &session{cfg: cfg, client: client, base: strings.TrimRight(base, "/"), shape: cfg.Shapes[s%len(cfg.Shapes)],
				index: s, seed: cfg.Seed + uint64(s), variant: v, meter: m, tap: tp}
			asked, err := sess.run(ctx, func() {
				done++
				if cfg.Progress != nil {
					cfg.Progress(done, total)
				}
			})
			if err != nil {
				stop()
				return nil, fmt.Errorf("configuration (%s) %s, session %d (%s): %w", v.Name, v.Label, s+1, sess.shape, err)
			}
			for _, a := range asked {
				p := &points[slices.Index(cfg.Checkpoints, a.Compactions)]
				p.Facts++
				p.KindFacts[a.Fact.Kind]++
				if a.Correct {
					p.Correct++
					p.ByKind[a.Fact.Kind]++
				}
				if a.Grep {
					p.Grep++
					p.GrepByKind[a.Fact.Kind]++
				}
			}
			row.Answers = append(row.Answers, asked...)
			row.ExtraCompactions += sess.extra
			row.QuestionCompactions += sess.asking
		}
		stop()
		for i := range points {
			points[i].score()
		}
		row.Points = points
		if m != nil {
			row.Cost = m.cost()
			row.Ratio = m.ratio()
		}
		rep.Rows = append(rep.Rows, row)
	}
	if fake != nil {
		// The fake is strict: a request it refused is one the real API would have refused, and
		// the scores of a run that sent one do not describe a working deployment.
		if r := fake.Refusals(); len(r) > 0 {
			return rep, fmt.Errorf("the fake upstream refused %d requests compactd sent, as the real API would (first: %s %s: %s)", len(r), r[0].Method, r[0].Path, r[0].Refused)
		}
	}
	return rep, nil
}

// score sets the shares from the counts.
func (p *Point) score() {
	if p.Facts > 0 {
		p.Recall = float64(p.Correct) / float64(p.Facts)
		p.GrepRecall = float64(p.Grep) / float64(p.Facts)
	}
}

// route is the compactd route the sessions of cfg.API go to.
func (c Config) route() string {
	switch c.API {
	case dialect.Messages:
		return "/v1/messages"
	case dialect.Chat:
		return "/v1/chat/completions"
	}
	return "/v1/responses"
}

// apiNames is dialect.All as --api lists it.
func apiNames() string {
	names := make([]string, len(dialect.All))
	for i, n := range dialect.All {
		names[i] = string(n)
	}
	return strings.Join(names, ", ")
}

func apiTitle(api dialect.Name) string {
	switch api {
	case dialect.Messages:
		return "Anthropic Messages"
	case dialect.Chat:
		return "Chat Completions"
	}
	return "Responses"
}

// meter wraps the summariser to account every call to the compaction that made it, and is the
// compactd's event log (proxy.EventSink), where compactd reports each compaction's tokens
// before and after.
type meter struct {
	inner summarizer.Summarizer
	mu    sync.Mutex
	calls int
	in    int64
	out   int64
	took  time.Duration
	comps int
	sizes [][2]int // tokens before and after, per compaction compactd reported
}

// Append takes compactd's events; a compaction's sizes are kept.
func (m *meter) Append(_ context.Context, evs []archive.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range evs {
		if e.Kind == archive.EventCompaction && e.Before > 0 {
			m.sizes = append(m.sizes, [2]int{e.Before, e.After})
		}
	}
	return nil
}

// ratio is the compaction ratio of the sizes compactd reported. Call it after the compactd
// closed: its event log is written in the background and flushed on Close.
func (m *meter) ratio() Ratio {
	m.mu.Lock()
	defer m.mu.Unlock()
	return ratioOf(m.sizes)
}

func ratioOf(sizes [][2]int) Ratio {
	r := Ratio{Known: true, Compactions: len(sizes)}
	if len(sizes) == 0 {
		return r
	}
	r.Min = 1
	var before, after, sum float64
	for _, sz := range sizes {
		x := 1 - float64(sz[1])/float64(sz[0])
		sum += x
		r.Min, r.Max = min(r.Min, x), max(r.Max, x)
		before += float64(sz[0])
		after += float64(sz[1])
	}
	n := float64(len(sizes))
	r.Mean, r.TokensBefore, r.TokensAfter = sum/n, before/n, after/n
	return r
}

func (m *meter) Summarize(ctx context.Context, req summarizer.Request) (summarizer.Result, error) {
	start := time.Now()
	res, err := m.inner.Summarize(ctx, req)
	m.mu.Lock()
	m.calls += res.Calls
	m.in += res.Usage.InputTokens
	m.out += res.Usage.OutputTokens
	m.took += time.Since(start)
	m.mu.Unlock()
	return res, err
}

func (m *meter) compacted() {
	m.mu.Lock()
	m.comps++
	m.mu.Unlock()
}

func (m *meter) cost() Cost {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := Cost{Known: true, Compactions: m.comps}
	if m.comps > 0 {
		n := float64(m.comps)
		c.Calls = float64(m.calls) / n
		c.InputTokens = float64(m.in) / n
		c.OutputTokens = float64(m.out) / n
		c.LatencyMS = float64(m.took.Microseconds()) / 1000 / n
	}
	return c
}

// startCompactd serves an in-process compactd for one configuration on a loopback port. Its
// model traffic goes to model (the tap in front of upstream, or upstream itself), its
// summariser straight to upstream unless Config.SummarizerURL says otherwise.
func startCompactd(ctx context.Context, cfg Config, upstream, model string, v Variant) (string, *meter, func(), error) {
	up, err := url.Parse(model)
	if err != nil || up.Scheme == "" || up.Host == "" {
		return "", nil, nil, fmt.Errorf("upstream %q is not an absolute URL", model)
	}
	key, err := crypto.GenerateKey() // a throwaway key: nothing outlives the run
	if err != nil {
		return "", nil, nil, err
	}
	ring, err := crypto.NewKeyring(key)
	if err != nil {
		return "", nil, nil, err
	}
	sumURL := cfg.SummarizerURL
	if sumURL == "" {
		sumURL = strings.TrimRight(upstream, "/") + "/v1"
	}
	sum, err := summarizer.New(summarizer.Config{BaseURL: sumURL, APIKey: cfg.SummarizerKey, Model: cfg.SummarizerModel, API: cfg.SummarizerAPI,
		MaxOutputTokens: cfg.SummaryTokens})
	if err != nil {
		return "", nil, nil, err
	}
	m := &meter{inner: sum}
	pc := proxy.Config{
		// The one upstream serves both routes: without AnthropicUpstream, compactd would send
		// Messages turns to Anthropic whatever --upstream says.
		Upstream: up, AnthropicUpstream: up, Sealer: ring, Summarizer: m, RetainTokens: cfg.Retain, LedgerBytes: -1,
		GapCheck: v.Gap, Recall: proxy.RecallConfig{Disabled: !v.Recall},
		Speculative:      proxy.SpeculativeConfig{Fraction: -1}, // compactions happen where the round ends, nowhere else
		MaxSummaryTokens: cfg.SummaryTokens * 5 / 4,             // as serve bounds it: the output budget and a quarter
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		Events:           m, // the compaction ratio: compactd's own counts before and after
	}
	if cfg.API == dialect.Chat {
		// Chat Completions has no compaction protocol: the route compacts with the operator's
		// policy, as serve's --compact-threshold chat=N sets it.
		pc.Policy = compact.Policy{Routes: map[dialect.Name]int{dialect.Chat: cfg.Threshold}}
	}
	if v.Ledger {
		pc.LedgerBytes = cfg.LedgerBytes
	}
	var cleanup []func()
	if v.Recall {
		dir, err := os.MkdirTemp("", "compactd-eval-")
		if err != nil {
			return "", nil, nil, err
		}
		cleanup = append(cleanup, func() { os.RemoveAll(dir) })
		sealer, err := archive.KeyringSealer(ring, "")
		if err == nil {
			pc.Archive, err = archive.Open(ctx, "sqlite:"+filepath.Join(dir, "archive.db"), sealer)
		}
		if err != nil {
			os.RemoveAll(dir)
			return "", nil, nil, err
		}
	}
	srv, err := proxy.New(pc)
	if err != nil {
		if pc.Archive != nil {
			pc.Archive.Close()
		}
		for _, f := range cleanup {
			f()
		}
		return "", nil, nil, err
	}
	// The Server owns the archive: Close closes it before the directory goes.
	cleanup = append([]func(){func() { _ = srv.Close(context.Background()) }}, cleanup...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	stop := func() {
		_ = hs.Close()
		for _, f := range cleanup {
			f()
		}
	}
	return "http://" + ln.Addr().String(), m, stop, nil
}

// session is one seeded session driven through one configuration.
type session struct {
	cfg     Config
	client  *http.Client
	base    string
	shape   string
	index   int
	seed    uint64
	variant Variant
	meter   *meter
	tap     *tap // nil for an external compactd
	extra   int  // compactions past the first of a round
	asking  int  // compactions of question turns
}

// armTap starts recording what compactd sends the model for a question turn.
func (s *session) armTap() {
	if s.tap != nil {
		s.tap.arm()
	}
}

// disarmTap returns what compactd sent the model since armTap.
func (s *session) disarmTap() [][]byte {
	if s.tap == nil {
		return nil
	}
	return s.tap.disarm()
}

func (s *session) run(ctx context.Context, roundDone func()) ([]Asked, error) {
	switch s.cfg.API {
	case dialect.Messages:
		return s.runMessages(ctx, roundDone)
	case dialect.Chat:
		return s.runChat(ctx, roundDone)
	}
	rounds := Session(s.seed, s.cfg.Checkpoints[len(s.cfg.Checkpoints)-1], s.cfg.Steps, s.cfg.Facts, s.cfg.Turns)
	history := []json.RawMessage{js(map[string]any{"type": "message", "role": "developer",
		"content": "You are a coding agent working in the shopco/billing repository. Answer questions about this session with the exact value only."})}
	var facts []Fact
	var asked []Asked
	seq := 0
	for k, round := range rounds {
		compacted := false
		for j, turn := range round.Turns {
			history = append(history, Render(s.shape, turn, &seq)...)
			last := j == len(round.Turns)-1
			out, err := s.post(ctx, history, last)
			if err != nil {
				return nil, fmt.Errorf("round %d turn %d: %w", k+1, j+1, err)
			}
			for _, it := range gjson.GetBytes(out, "output").Array() {
				if it.Get("type").Str == "compaction" {
					history = append(history, json.RawMessage(it.Raw))
					if !compacted && s.meter != nil {
						s.meter.compacted()
					}
					compacted = true
				}
			}
		}
		if !compacted {
			return nil, fmt.Errorf("round %d did not compact: its history stayed under --threshold %d; lower it or raise --steps", k+1, s.cfg.Threshold)
		}
		facts = append(facts, round.Facts...)
		roundDone()
		if !slices.Contains(s.cfg.Checkpoints, k+1) {
			continue
		}
		raw := rawLogText(history)
		for _, f := range facts {
			s.armTap()
			got, err := s.ask(ctx, history, f.Question)
			turn := s.disarmTap()
			if err != nil {
				return nil, fmt.Errorf("after %s, asking %q: %w", english.Count(k+1, "compaction"), f.Question, err)
			}
			asked = append(asked, Asked{Session: s.index + 1, Shape: s.shape, Compactions: k + 1, Fact: f, Got: got,
				Correct: Correct(got, f.Answer)}.grepped(raw, turn))
		}
	}
	return asked, nil
}

// agentTools are the tools the shape's agent declares, as it sends them every turn.
func agentTools(shape string) []any {
	str := map[string]any{"type": "string"}
	if shape == ShapeClaudeCode {
		return []any{
			map[string]any{"type": "function", "name": "Read", "description": "Read a file", "parameters": map[string]any{"type": "object", "properties": map[string]any{"file_path": str}, "required": []string{"file_path"}}},
			map[string]any{"type": "function", "name": "Bash", "description": "Run a shell command", "parameters": map[string]any{"type": "object", "properties": map[string]any{"command": str, "description": str}, "required": []string{"command"}}},
		}
	}
	return []any{map[string]any{"type": "function", "name": "exec_command", "description": "Runs a command in a PTY",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"cmd": str, "workdir": str, "yield_time_ms": map[string]any{"type": "number"}}, "required": []string{"cmd"}}}}
}

func (s *session) body(input []json.RawMessage, threshold bool) []byte {
	b := map[string]any{
		"model": s.cfg.Model, "input": input, "store": false, "stream": false,
		"tools": agentTools(s.shape), "prompt_cache_key": fmt.Sprintf("eval-%s-%d-%s", s.shape, s.seed, s.variant.Name),
	}
	if threshold {
		b["context_management"] = []any{map[string]any{"type": "compaction", "compact_threshold": s.cfg.Threshold}}
	}
	return js(b)
}

// post sends one Responses turn through compactd and returns the response body.
func (s *session) post(ctx context.Context, input []json.RawMessage, threshold bool) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/v1/responses", bytes.NewReader(s.body(input, threshold)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if s.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.cfg.APIKey)
	}
	return s.do(req)
}

// do sends one turn and returns the response body: an error names the HTTP status and the
// error message of either dialect's envelope, and a body that is not JSON (checked with the depth
// bound: the endpoint is the user's, not ours) is an error too.
func (s *session) do(req *http.Request) ([]byte, error) {
	data, _, err := s.doHeader(req)
	return data, err
}

// doHeader is do, with the response's headers.
func (s *session) doHeader(req *http.Request) ([]byte, http.Header, error) {
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		msg := gjson.GetBytes(data, "error.message").Str
		if msg == "" {
			msg = strings.TrimSpace(string(data[:min(len(data), 300)]))
		}
		return nil, nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, msg)
	}
	if jsonx.Valid(data) != nil {
		return nil, nil, errors.New("the response is not JSON")
	}
	return data, resp.Header, nil
}

// ask asks one question as an ordinary turn after the history and returns the reply's text.
// The question is not kept: later checkpoints ask of the session, not of earlier questions.
func (s *session) ask(ctx context.Context, history []json.RawMessage, q string) (string, error) {
	input := append(slices.Clip(history), js(map[string]any{"type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": q}}}))
	out, err := s.post(ctx, input, false)
	if err != nil {
		return "", err
	}
	var text strings.Builder
	for _, it := range gjson.GetBytes(out, "output").Array() {
		if it.Get("type").Str != "message" {
			continue
		}
		it.Get("content").ForEach(func(_, c gjson.Result) bool {
			if c.Get("type").Str == "output_text" {
				text.WriteString(c.Get("text").Str)
			}
			return true
		})
	}
	return text.String(), nil
}
