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
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
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
	// API is the wire API of the sessions: APIResponses (default) sends every shape to
	// /v1/responses; APIMessages sends Claude Code sessions to /v1/messages (the only shape
	// that speaks it), compacting with compact_20260112 at Config.messagesTrigger tokens.
	API string `json:"api"`

	// Upstream is the model's base URL (without /v1); "" runs the built-in fake upstream with
	// the Lossy summariser.
	Upstream string             `json:"upstream"`
	Lossy    fakeupstream.Lossy `json:"lossy"`
	// APIKey goes to compactd as a bearer token (compactd forwards it upstream).
	APIKey string `json:"-"`
	// Summariser of the in-process compactd: base URL with /v1 (default Upstream+"/v1"),
	// model (default the request's), key (default: forward APIKey), wire API (responses|chat).
	SummarizerURL, SummarizerModel, SummarizerKey, SummarizerAPI string `json:"-"`
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
	return Config{Seed: 1, Sessions: 3, Shapes: Shapes, Checkpoints: []int{1, 3, 10}, Steps: 24, Facts: 3,
		Turns: 3, Threshold: 2000, Retain: 32, LedgerBytes: 6144, Model: "fake-model",
		Lossy: fakeupstream.Lossy{Keep: 0.5, MaxLines: 40}}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Sessions <= 0 {
		c.Sessions = d.Sessions
	}
	if c.API == "" {
		c.API = APIResponses
	}
	if len(c.Shapes) == 0 {
		c.Shapes = d.Shapes
		if c.API == APIMessages {
			c.Shapes = []string{ShapeClaudeCode}
		}
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
	if !slices.Contains(APIs, c.API) {
		return fmt.Errorf("--api: unknown API %q (have %s)", c.API, strings.Join(APIs, ", "))
	}
	if c.API == APIMessages {
		for _, s := range c.Shapes {
			if s != ShapeClaudeCode {
				return fmt.Errorf("--shapes: shape %q speaks only the Responses API; the Messages route runs %s sessions", s, ShapeClaudeCode)
			}
		}
	}
	for _, s := range c.Shapes {
		if !slices.Contains(Shapes, s) {
			return fmt.Errorf("--shapes: unknown shape %q (have %s)", s, strings.Join(Shapes, ", "))
		}
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
	// Answers are every question's answer, per checkpoint, in asking order.
	Answers []Asked `json:"answers"`
}

// Asked is one question and what came back.
type Asked struct {
	Session     int    `json:"session"`
	Shape       string `json:"shape"`
	Compactions int    `json:"compactions"`
	Fact        Fact   `json:"fact"`
	Got         string `json:"got"`
	Correct     bool   `json:"correct"`
}

// Report is a whole run.
type Report struct {
	Config   Config `json:"config"`
	Upstream string `json:"upstream_kind"` // "fake" or "url"
	// Route is the compactd route the sessions ran on: "/v1/responses" or "/v1/messages".
	Route string `json:"route"`
	Rows  []Row  `json:"rows"`
}

// Run drives the sessions through every configuration and scores them.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rep := &Report{Config: cfg, Upstream: "url", Route: "/v1/responses"}
	if cfg.API == APIMessages {
		rep.Route = "/v1/messages"
	}
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
	variants := Variants
	if cfg.Compactd != "" {
		variants = []Variant{{Name: "external", Label: "external compactd"}}
	} else if len(cfg.Variants) > 0 {
		variants = slices.DeleteFunc(slices.Clone(Variants), func(v Variant) bool { return !slices.Contains(cfg.Variants, v.Name) })
	}
	rounds := cfg.Checkpoints[len(cfg.Checkpoints)-1]
	runnable := 0
	for _, v := range variants {
		if cfg.API != APIMessages || messagesUnavailable(v) == "" {
			runnable++
		}
	}
	total, done := runnable*cfg.Sessions*rounds, 0
	client := &http.Client{Timeout: cfg.Timeout}
	for _, v := range variants {
		row := Row{Variant: v}
		if cfg.API == APIMessages && v.Name != "external" {
			if row.NA = messagesUnavailable(v); row.NA != "" {
				rep.Rows = append(rep.Rows, row)
				continue
			}
		}
		base, m, stop := cfg.Compactd, (*meter)(nil), func() {}
		if cfg.Compactd == "" {
			var err error
			if base, m, stop, err = startCompactd(ctx, cfg, upstream, v); err != nil {
				return nil, err
			}
		}
		points := make([]Point, len(cfg.Checkpoints))
		for i, k := range cfg.Checkpoints {
			points[i] = Point{Compactions: k, ByKind: map[string]int{}, KindFacts: map[string]int{}}
		}
		for s := range cfg.Sessions {
			sess := &session{cfg: cfg, client: client, base: strings.TrimRight(base, "/"), shape: cfg.Shapes[s%len(cfg.Shapes)],
				index: s, seed: cfg.Seed + uint64(s), variant: v, meter: m}
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
			}
			row.Answers = append(row.Answers, asked...)
		}
		stop()
		for i := range points {
			if points[i].Facts > 0 {
				points[i].Recall = float64(points[i].Correct) / float64(points[i].Facts)
			}
		}
		row.Points = points
		if m != nil {
			row.Cost = m.cost()
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

// meter wraps the summariser to account every call to the compaction that made it.
type meter struct {
	inner summarizer.Summarizer
	mu    sync.Mutex
	calls int
	in    int64
	out   int64
	took  time.Duration
	comps int
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

// startCompactd serves an in-process compactd for one configuration on a loopback port.
func startCompactd(ctx context.Context, cfg Config, upstream string, v Variant) (string, *meter, func(), error) {
	up, err := url.Parse(upstream)
	if err != nil || up.Scheme == "" || up.Host == "" {
		return "", nil, nil, fmt.Errorf("upstream %q is not an absolute URL", upstream)
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
}

func (s *session) run(ctx context.Context, roundDone func()) ([]Asked, error) {
	if s.cfg.API == APIMessages {
		return s.runMessages(ctx, roundDone)
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
		for _, f := range facts {
			got, err := s.ask(ctx, history, f.Question)
			if err != nil {
				return nil, fmt.Errorf("after %s, asking %q: %w", english.Count(k+1, "compaction"), f.Question, err)
			}
			asked = append(asked, Asked{Session: s.index + 1, Shape: s.shape, Compactions: k + 1, Fact: f, Got: got, Correct: Correct(got, f.Answer)})
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
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		msg := gjson.GetBytes(data, "error.message").Str
		if msg == "" {
			msg = strings.TrimSpace(string(data[:min(len(data), 300)]))
		}
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, msg)
	}
	if jsonx.Valid(data) != nil {
		return nil, errors.New("the response is not JSON")
	}
	return data, nil
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
