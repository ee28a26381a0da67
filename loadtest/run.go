package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// Config sizes a run. Zero values take the defaults noted.
type Config struct {
	Conversations int // concurrent conversations (default 40)
	Turns         int // turns per conversation (default 4)
	Faults        Faults
	// MaxAttempts bounds how often a client tries one turn, as agents retry (default 8).
	MaxAttempts int
	// Threshold is the context_management compact_threshold each request carries (default 1000,
	// the smallest OpenAI accepts); every turn's new user message alone is sized to cross it, so
	// every turn compacts.
	Threshold int
	// KeepAlive is compactd's keep-alive interval (default 100ms, short so that slow summariser
	// calls exercise the committed-stream error path).
	KeepAlive time.Duration
	// Logger receives compactd's logs (default: discarded).
	Logger *slog.Logger
}

// Report is what a run observed.
type Report struct {
	Conversations int
	Turns         int // turns attempted to completion or give-up
	TurnsOK       int // turns that ended in a complete stream (response.completed)
	TurnsFailed   int // turns given up after MaxAttempts, each attempt a clean error
	// ClosingTurns are the extra turns (no context_management, so no new compaction) that carry
	// a conversation's last compaction item back, so every item issued is checked.
	ClosingTurns int
	Attempts     int // requests sent, retries included
	Compactions  int // compaction items issued to clients (in completed streams)
	ItemsOpened  int // items carried into the next turn that compactd opened (the turn completed)
	// ItemsLost counts items compactd refused on the next turn (400 invalid_encrypted_content).
	// It must be 0.
	ItemsLost int
	// ItemsUnverified are items whose next turn never completed (given up after MaxAttempts).
	ItemsUnverified int
	// CleanErrors counts failed attempts by how they failed cleanly: "http <status> <type>" for an
	// error response with a proper envelope, "sse <type/code>" for an error event in the stream.
	CleanErrors map[string]int
	// Unclean lists attempts that ended neither in a complete stream nor in a clean error
	// (transport errors, truncated streams, broken envelopes, sequence numbers going back), with
	// the reason. It must be empty.
	Unclean map[string]int
	// Faults counts upstream requests by injected fault kind.
	Faults map[string]int64
	// UpstreamRequests counts model and summariser calls the fake upstream answered (or began to).
	UpstreamRequests map[string]int
	// UpstreamRefused counts, by reason, the requests the strict fake upstream refused because
	// the real API would have (fakeupstream strict mode). It must be empty.
	UpstreamRefused map[string]int
	Duration        time.Duration
	// HeapInuse is runtime.MemStats.HeapInuse after a GC once the run is over and torn down.
	HeapInuse uint64
}

// UncleanTotal sums Unclean.
func (r *Report) UncleanTotal() int {
	n := 0
	for _, v := range r.Unclean {
		n += v
	}
	return n
}

// String renders the report as a Markdown table, one figure per row.
func (r *Report) String() string {
	var b strings.Builder
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	b.WriteString("| figure | value |\n|---|---|\n")
	row("conversations", r.Conversations)
	row("turns (completed / given up)", fmt.Sprintf("%d (%d / %d)", r.Turns, r.TurnsOK, r.TurnsFailed))
	row("closing turns (carry the last item back)", r.ClosingTurns)
	row("requests (retries included)", r.Attempts)
	row("compaction items issued", r.Compactions)
	row("items opened on the next turn", r.ItemsOpened)
	row("items lost (400 invalid_encrypted_content)", r.ItemsLost)
	row("items unverified (next turn given up)", r.ItemsUnverified)
	row("clean errors seen by clients", mapString(r.CleanErrors))
	row("unclean endings", mapString(r.Unclean))
	faults := make(map[string]int, len(r.Faults))
	for k, v := range r.Faults {
		faults[k] = int(v)
	}
	row("upstream requests by fault injected", mapString(faults))
	row("upstream requests by kind", mapString(r.UpstreamRequests))
	row("upstream refusals (strict fake; must be none)", mapString(r.UpstreamRefused))
	row("duration", r.Duration.Round(10*time.Millisecond))
	row("heap in use after GC", fmt.Sprintf("%.1f MiB", float64(r.HeapInuse)/(1<<20)))
	return b.String()
}

func mapString[V int | int64](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// Run starts a fault-injecting fake upstream and an in-process compactd on 127.0.0.1, drives
// cfg.Conversations concurrent streaming conversations through it with the openai-go SDK, tears
// everything down and reports. It returns an error only when the rig itself cannot start; what
// the conversations saw is in the Report for the caller to judge.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Conversations <= 0 {
		cfg.Conversations = 40
	}
	if cfg.Turns <= 0 {
		cfg.Turns = 4
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 8
	}
	if cfg.Threshold < 1000 {
		cfg.Threshold = 1000
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	start := time.Now()

	// Upstream: the fake model and summariser behind the fault injector.
	fake := fakeupstream.New(fakeupstream.Options{DropBodies: true, Deltas: 6})
	faults := NewFaultInjector(fake, cfg.Faults)
	upURL, stopUp, err := serve(faults)
	if err != nil {
		return nil, err
	}
	defer stopUp()

	// compactd, with transports of its own so teardown can close their idle connections.
	upTransport := proxy.DefaultTransport()
	defer upTransport.CloseIdleConnections()
	sumTransport := proxy.DefaultTransport()
	defer sumTransport.CloseIdleConnections()
	sum, err := summarizer.New(summarizer.Config{BaseURL: upURL + "/v1", API: dialect.Responses,
		HTTPClient: &http.Client{Transport: sumTransport}, Timeout: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	key, err := crypto.GenerateKey()
	if err != nil {
		return nil, err
	}
	ring, err := crypto.NewKeyring(key)
	if err != nil {
		return nil, err
	}
	counter := compact.NewCounter(compact.CounterOptions{})
	defer counter.Close()
	u, _ := url.Parse(upURL)
	srv, err := proxy.New(proxy.Config{
		Upstream: u, Transport: upTransport, Sealer: ring, Summarizer: sum, Counter: counter,
		RetainTokens: 200, KeepAlive: cfg.KeepAlive, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	defer srv.Close(context.Background()) // after stopProxy, deferred below
	proxyURL, stopProxy, err := serve(srv)
	if err != nil {
		return nil, err
	}
	defer stopProxy()

	clientTransport := proxy.DefaultTransport()
	defer clientTransport.CloseIdleConnections()
	client := openai.NewClient(
		option.WithBaseURL(proxyURL+"/v1"), option.WithAPIKey("sk-loadtest"),
		option.WithHTTPClient(&http.Client{Transport: clientTransport}), option.WithMaxRetries(0),
	)

	rep := &Report{Conversations: cfg.Conversations, CleanErrors: map[string]int{}, Unclean: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var seed atomic.Uint64
	seed.Store(cfg.Faults.Seed)
	for c := range cfg.Conversations {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conv := &conversation{id: c, cfg: cfg, client: client, rng: rand.New(rand.NewPCG(seed.Add(1), uint64(c)))}
			conv.run(ctx)
			mu.Lock()
			conv.stats.addTo(rep)
			mu.Unlock()
		}()
	}
	wg.Wait()

	stopProxy()
	stopUp()
	faults.Wait()
	rep.Faults = faults.Counts()
	rep.UpstreamRequests = map[string]int{}
	for _, r := range fake.Requests() {
		rep.UpstreamRequests[string(r.Kind)]++
	}
	rep.UpstreamRefused = map[string]int{}
	for _, r := range fake.Refusals() {
		rep.UpstreamRefused[r.Refused]++
	}
	fake.Reset()
	rep.Duration = time.Since(start)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rep.HeapInuse = ms.HeapInuse
	return rep, nil
}

// discardLog keeps net/http's own complaints (aborted handlers, resets) out of test output.
var discardLog = log.New(io.Discard, "", 0)

// serve runs h on 127.0.0.1 at a free port; stop closes every connection and may be called
// more than once.
func serve(h http.Handler) (baseURL string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: discardLog}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	var once sync.Once
	return "http://" + ln.Addr().String(), func() {
		once.Do(func() {
			_ = srv.Close()
			<-done
		})
	}, nil
}

// stats is one conversation's share of the Report.
type stats struct {
	turns, ok, failed, attempts, closing  int
	compactions, opened, lost, unverified int
	clean, unclean                        map[string]int
}

func (s *stats) addTo(r *Report) {
	r.Turns += s.turns
	r.ClosingTurns += s.closing
	r.TurnsOK += s.ok
	r.TurnsFailed += s.failed
	r.Attempts += s.attempts
	r.Compactions += s.compactions
	r.ItemsOpened += s.opened
	r.ItemsLost += s.lost
	r.ItemsUnverified += s.unverified
	for k, v := range s.clean {
		r.CleanErrors[k] += v
	}
	for k, v := range s.unclean {
		r.Unclean[k] += v
	}
}

type conversation struct {
	id     int
	cfg    Config
	client openai.Client
	rng    *rand.Rand
	stats  stats
}

// outcome is how one attempt at a turn ended.
type outcome struct {
	output     []json.RawMessage // the completed response's output items
	clean      string            // set for a clean error
	unclean    string            // set for anything else
	lost       bool              // 400 invalid_encrypted_content
	retryAfter time.Duration
}

// run plays the conversation: each turn sends the whole history so far (every earlier input and
// output item, compaction items included) plus a new user message, as Codex does.
func (c *conversation) run(ctx context.Context) {
	c.stats.clean, c.stats.unclean = map[string]int{}, map[string]int{}
	history := []json.RawMessage{json.RawMessage(`{"type":"message","role":"developer","content":"You are a careful coding agent working through a load test."}`)}
	carrying := false // history holds a compaction item issued by the previous turn
	for turn := range c.cfg.Turns {
		input := append(history[:len(history):len(history)], c.userMessage(turn))
		body := requestBody(input, c.cfg.Threshold)
		var o outcome
		for attempt := 1; ; attempt++ {
			c.stats.attempts++
			o = c.attempt(ctx, body)
			switch {
			case o.clean != "":
				c.stats.clean[o.clean]++
			case o.unclean != "":
				c.stats.unclean[o.unclean]++
			}
			if o.output != nil || o.lost || attempt >= c.cfg.MaxAttempts || ctx.Err() != nil {
				break
			}
			c.backoff(ctx, attempt, o.retryAfter)
		}
		c.stats.turns++
		if o.output == nil {
			c.stats.failed++
			if carrying {
				if o.lost {
					c.stats.lost++
				} else {
					c.stats.unverified++
				}
			}
			return // an agent whose turn keeps failing stops; its history is not extended
		}
		c.stats.ok++
		if carrying {
			c.stats.opened++
		}
		carrying = false
		for _, it := range o.output {
			if gjson.GetBytes(it, "type").Str == api.TypeCompaction {
				c.stats.compactions++
				carrying = true
			}
		}
		history = append(input, o.output...)
	}
	if carrying {
		c.verify(ctx, history)
	}
}

// verify sends one closing turn, without context_management so that it cannot compact again,
// to check that the last turn's compaction item opens too.
func (c *conversation) verify(ctx context.Context, history []json.RawMessage) {
	input := append(history[:len(history):len(history)], api.UserMessage("thanks, that is all"))
	body := requestBody(input, 0)
	c.stats.closing++
	for attempt := 1; ; attempt++ {
		c.stats.attempts++
		o := c.attempt(ctx, body)
		switch {
		case o.output != nil:
			c.stats.opened++
			return
		case o.lost:
			c.stats.clean[o.clean]++
			c.stats.lost++
			return
		case o.clean != "":
			c.stats.clean[o.clean]++
		case o.unclean != "":
			c.stats.unclean[o.unclean]++
		}
		if attempt >= c.cfg.MaxAttempts || ctx.Err() != nil {
			c.stats.unverified++
			return
		}
		c.backoff(ctx, attempt, o.retryAfter)
	}
}

// userMessage is a new user message large enough on its own to cross the threshold.
func (c *conversation) userMessage(turn int) json.RawMessage {
	var b strings.Builder
	fmt.Fprintf(&b, "conversation %d turn %d: ", c.id, turn)
	words := []string{"refactor", "the", "parser", "in", "parse.go", "so", "that", "line", "42", "handles", "escapes", "and", "run", "go", "test", "again"}
	for b.Len() < 6*c.cfg.Threshold {
		b.WriteString(words[c.rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return api.UserMessage(b.String())
}

func requestBody(input []json.RawMessage, threshold int) []byte {
	in, _ := json.Marshal(input)
	b := []byte(`{"model":"fake-model","stream":true,"store":false,"input":`)
	b = append(b, in...)
	if threshold <= 0 {
		return append(b, '}')
	}
	b = append(b, `,"context_management":[{"type":"compaction","compact_threshold":`...)
	b = strconv.AppendInt(b, int64(threshold), 10)
	return append(b, `}]}`...)
}

// backoff waits as an agent would: Retry-After when the server sent one (capped), else
// exponential backoff with full jitter.
func (c *conversation) backoff(ctx context.Context, attempt int, retryAfter time.Duration) {
	d := retryAfter
	if d <= 0 {
		d = time.Duration(c.rng.Int64N(int64(25*time.Millisecond) << min(attempt, 5)))
	}
	d = min(d, 2*time.Second)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// attempt sends one streaming request and classifies how it ended.
func (c *conversation) attempt(ctx context.Context, body []byte) outcome {
	stream := c.client.Responses.NewStreaming(ctx, responses.ResponseNewParams{}, option.WithRequestBody("application/json", body))
	defer stream.Close()
	lastSeq := int64(-1)
	var o outcome
	for stream.Next() {
		ev := stream.Current()
		raw := ev.RawJSON()
		if !gjson.Valid(raw) {
			return outcome{unclean: "invalid event JSON"}
		}
		if sq := gjson.Get(raw, "sequence_number"); sq.Exists() {
			if sq.Int() <= lastSeq {
				return outcome{unclean: "sequence_number not increasing"}
			}
			lastSeq = sq.Int()
		}
		switch ev.Type {
		case "error":
			if gjson.Get(raw, "message").Str == "" {
				return outcome{unclean: "error event without message"}
			}
			return outcome{clean: "sse error " + firstNonEmpty(gjson.Get(raw, "code").Str, "-")}
		case "response.failed", "response.incomplete":
			return outcome{clean: "sse " + ev.Type}
		case "response.completed":
			out := gjson.Get(raw, "response.output")
			if !out.IsArray() {
				return outcome{unclean: "response.completed without output"}
			}
			o.output = []json.RawMessage{}
			for _, it := range out.Array() {
				o.output = append(o.output, json.RawMessage(it.Raw))
			}
		}
	}
	err := stream.Err()
	if o.output != nil && err == nil {
		return o
	}
	return classify(err, o.output != nil)
}

func classify(err error, completed bool) outcome {
	var apiErr *openai.Error
	var streamErr *ssestream.StreamError
	switch {
	case err == nil && completed:
		return outcome{}
	case err == nil:
		return outcome{unclean: "stream ended without a terminal event"}
	case errors.As(err, &apiErr):
		o := outcome{}
		if apiErr.Response != nil {
			if s, err := strconv.Atoi(apiErr.Response.Header.Get("Retry-After")); err == nil {
				o.retryAfter = time.Duration(s) * time.Second
			}
		}
		raw := apiErr.RawJSON()
		if !gjson.Valid(raw) || apiErr.Message == "" || apiErr.Type == "" {
			o.unclean = fmt.Sprintf("http %d without an OpenAI error envelope", apiErr.StatusCode)
			return o
		}
		if apiErr.StatusCode == http.StatusBadRequest && apiErr.Code == "invalid_encrypted_content" {
			o.lost = true
		}
		o.clean = fmt.Sprintf("http %d %s", apiErr.StatusCode, firstNonEmpty(apiErr.Code, apiErr.Type))
		return o
	case errors.As(err, &streamErr):
		return outcome{clean: "sse error (error object)"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return outcome{unclean: "stream cut (unexpected EOF)"}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outcome{unclean: "cancelled"}
	default:
		return outcome{unclean: "transport: " + errKind(err)}
	}
}

// errKind reduces an error to a stable label for counting (no addresses or ports).
func errKind(err error) string {
	s := err.Error()
	for _, k := range []string{"connection reset", "EOF", "broken pipe", "timeout", "refused"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
