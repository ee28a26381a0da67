package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// withRegistry gives the harness's compactd a fresh registry and returns it.
func withRegistry(reg *prometheus.Registry, more ...func(*proxy.Config)) func(*proxy.Config) {
	return func(c *proxy.Config) {
		c.Registry = reg
		for _, f := range more {
			f(c)
		}
	}
}

// series finds the one series of metric name whose labels include kv (name, value pairs).
func series(t *testing.T, g prometheus.Gatherer, name string, kv ...string) *dto.Metric {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(kv); i += 2 {
				if have[kv[i]] != kv[i+1] {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

// value is a counter's or gauge's value, or a histogram's sample count; 0 when absent.
func value(t *testing.T, g prometheus.Gatherer, name string, kv ...string) float64 {
	t.Helper()
	m := series(t, g, name, kv...)
	switch {
	case m == nil:
		return 0
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func histSum(t *testing.T, g prometheus.Gatherer, name string, kv ...string) float64 {
	t.Helper()
	m := series(t, g, name, kv...)
	if m == nil || m.Histogram == nil {
		t.Fatalf("no histogram %s%v", name, kv)
	}
	return m.Histogram.GetSampleSum()
}

// TestMetricsScriptedCompactions runs a scripted conversation — a threshold compaction, a
// handoff, a streamed compaction, the compact endpoint and a tampered item — and checks every
// metric family it should move, by the amount it should move.
func TestMetricsScriptedCompactions(t *testing.T) {
	reg := proxy.NewRegistry()
	h := newHarness(t, fakeupstream.Options{}, withRegistry(reg, retain(1000)))
	ctx := context.Background()

	// Turn 1: threshold compaction (JSON).
	items, resp := turnOne(t, h)
	if got := value(t, reg, "compactd_compactions_total", "api", "responses", "trigger", "threshold", "outcome", "ok"); got != 1 {
		t.Errorf("threshold compactions = %v, want 1", got)
	}
	saved := value(t, reg, "compactd_compaction_tokens_saved_total", "api", "responses")
	before := histSum(t, reg, "compactd_compaction_tokens", "api", "responses", "stage", "before")
	after := histSum(t, reg, "compactd_compaction_tokens", "api", "responses", "stage", "after")
	if saved <= 0 || saved != before-after {
		t.Errorf("tokens saved = %v, want before-after = %v-%v > 0", saved, before, after)
	}
	if n, sum := value(t, reg, "compactd_compaction_ratio", "api", "responses"), histSum(t, reg, "compactd_compaction_ratio", "api", "responses"); n != 1 || sum <= 0 || sum >= 1 || sum != after/before {
		t.Errorf("compression ratio: %v samples, sum %v; want 1 sample of after/before = %v", n, sum, after/before)
	}
	if got := value(t, reg, "compactd_summariser_requests_total", "outcome", "ok"); got != 1 {
		t.Errorf("summariser ok = %v, want 1", got)
	}
	if got := value(t, reg, "compactd_summariser_duration_seconds", "outcome", "ok"); got != 1 {
		t.Errorf("summariser duration samples = %v, want 1", got)
	}
	if got := value(t, reg, "compactd_summariser_tokens_total", "type", "input"); got <= 0 {
		t.Errorf("summariser input tokens = %v, want > 0", got)
	}
	if got := value(t, reg, "gen_ai_client_operation_duration_seconds", "gen_ai_operation_name", "compaction", "gen_ai_provider_name", "openai"); got != 1 {
		t.Errorf("gen_ai compaction operations = %v, want 1", got)
	}
	chat := []string{"gen_ai_operation_name", "chat", "gen_ai_provider_name", "openai", "gen_ai_request_model", testModel}
	if got := value(t, reg, "gen_ai_client_operation_duration_seconds", chat...); got != 1 {
		t.Errorf("gen_ai chat operations for %s = %v, want 1", testModel, got)
	}
	if got := value(t, reg, "gen_ai_client_token_usage", append(chat, "gen_ai_token_type", "input")...); got != 1 {
		t.Errorf("gen_ai chat input token samples = %v, want 1", got)
	}
	if got := value(t, reg, "compactd_upstream_requests_total", "upstream", "openai", "status_class", "2xx"); got != 1 {
		t.Errorf("upstream 2xx = %v, want 1 (the summariser has its own client)", got)
	}
	if got := value(t, reg, "compactd_http_requests_total", "route", "/v1/responses", "method", "POST", "code", "200"); got != 1 {
		t.Errorf("requests /v1/responses 200 = %v, want 1", got)
	}
	if got := value(t, reg, "compactd_proxy_overhead_seconds", "route", "/v1/responses"); got != 1 {
		t.Errorf("overhead samples = %v, want 1", got)
	}

	// Turn 2: the client sends the compaction item back: one handoff, no new compaction.
	next := append(append([]any{}, anySlice(items)...), json.RawMessage(resp.Output[0].RawJSON()),
		map[string]any{"type": "message", "role": "user", "content": "next"})
	if _, err := h.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", next)); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "compactd_handoffs_total", "api", "responses"); got != 1 {
		t.Errorf("handoffs = %v, want 1", got)
	}

	// Turn 3: a streamed threshold compaction.
	s := h.client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", history(6, 400)), threshold(2000))
	for s.Next() {
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "compactd_compactions_total", "api", "responses", "trigger", "threshold", "outcome", "ok"); got != 2 {
		t.Errorf("threshold compactions = %v, want 2", got)
	}
	if got := value(t, reg, "compactd_streams_in_flight", "route", "/v1/responses"); got != 0 {
		t.Errorf("streams in flight after a finished stream = %v, want 0", got)
	}

	// The compact endpoint.
	if err := h.client.Post(ctx, "responses/compact", map[string]any{"model": testModel, "input": history(4, 400)}, nil); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "compactd_compactions_total", "api", "responses", "trigger", "compact_endpoint", "outcome", "ok"); got != 1 {
		t.Errorf("compact_endpoint compactions = %v, want 1", got)
	}

	// A tampered item: 400, counted by reason.
	var item map[string]any
	_ = json.Unmarshal([]byte(resp.Output[0].RawJSON()), &item)
	item["id"] = "cmp_0123456789abcdef0123456789abcdef" // relabelled: the seal binds the real id
	_, err := h.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", []any{item, map[string]any{"type": "message", "role": "user", "content": "hi"}}))
	if err == nil {
		t.Fatal("tampered item accepted")
	}
	if got := value(t, reg, "compactd_item_open_failures_total", "api", "responses", "reason", "tampered"); got != 1 {
		t.Errorf("tampered open failures = %v, want 1", got)
	}
	if got := value(t, reg, "compactd_http_requests_total", "route", "/v1/responses", "code", "400"); got != 1 {
		t.Errorf("requests 400 = %v, want 1", got)
	}
	// Pre-created series exist at zero, so ratios in alerts have data before the first failure.
	if m := series(t, reg, "compactd_compactions_total", "api", "messages", "trigger", "policy", "outcome", "failed"); m == nil || m.Counter.GetValue() != 0 {
		t.Errorf("pre-created series missing or non-zero: %v", m)
	}
	if got := value(t, reg, "compactd_http_requests_in_flight"); got != 0 {
		t.Errorf("requests in flight at rest = %v, want 0", got)
	}
	if n, err := testutil.GatherAndCount(reg, "go_goroutines", "process_cpu_seconds_total"); err != nil || n != 2 {
		t.Errorf("Go/process collectors: %d series, %v", n, err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %v", problems, err)
	}
}

func anySlice(items []map[string]any) []any {
	out := make([]any, len(items))
	for i, it := range items {
		out[i] = it
	}
	return out
}

type failingSummarizer struct{}

func (failingSummarizer) Summarize(context.Context, summarizer.Request) (summarizer.Result, error) {
	return summarizer.Result{Calls: 1}, &summarizer.Error{Status: 500, Err: errors.New("boom")}
}

func TestMetricsSummariserFailure(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, fakeupstream.Options{}, withRegistry(reg, retain(1000), func(c *proxy.Config) { c.Summarizer = failingSummarizer{} }))
	_, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", history(6, 400)), threshold(2000))
	if err == nil {
		t.Fatal("turn succeeded with a failing summariser")
	}
	tests := []struct {
		name string
		kv   []string
		want float64
	}{
		{"compactd_compactions_total", []string{"api", "responses", "trigger", "threshold", "outcome", "failed"}, 1},
		{"compactd_compactions_total", []string{"api", "responses", "trigger", "threshold", "outcome", "ok"}, 0},
		{"compactd_summariser_requests_total", []string{"outcome", "failed"}, 1},
		{"compactd_summariser_llm_calls_total", nil, 1},
		{"compactd_http_requests_total", []string{"route", "/v1/responses", "code", "502"}, 1},
		{"compactd_upstream_requests_total", []string{"status_class", "2xx"}, 0},
	}
	for _, tt := range tests {
		if got := value(t, reg, tt.name, tt.kv...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.kv, got, tt.want)
		}
	}
}

// TestStreamGaugeClientCancel: a client that cancels mid-stream leaves the in-flight stream gauge
// at zero once compactd has finished with the request.
func TestStreamGaugeClientCancel(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, fakeupstream.Options{TokenDelay: 50 * time.Millisecond, Deltas: 200}, withRegistry(reg))
	ctx, cancel := context.WithCancel(context.Background())
	s := h.client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", "write a long story"))
	if !s.Next() {
		t.Fatalf("no first event: %v", s.Err())
	}
	// The stream's headers have reached the client, so the gauge was raised before this point.
	if got := value(t, reg, "compactd_streams_in_flight", "route", "/v1/responses"); got != 1 {
		t.Errorf("streams in flight mid-stream = %v, want 1", got)
	}
	cancel()
	_ = s.Close()
	waitFor(t, func() bool {
		return value(t, reg, "compactd_http_requests_in_flight") == 0
	})
	if got := value(t, reg, "compactd_streams_in_flight", "route", "/v1/responses"); got != 0 {
		t.Errorf("streams in flight after cancel = %v, want 0", got)
	}
	if got := value(t, reg, "compactd_http_requests_total", "route", "/v1/responses"); got != 1 {
		t.Errorf("requests counted = %v, want 1", got)
	}
}

// TestStreamGaugeUpstreamCut: an upstream that aborts mid-stream (the proxy panics with
// http.ErrAbortHandler) also releases the gauge.
func TestStreamGaugeUpstreamCut(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, fakeupstream.Options{}, withRegistry(reg))
	s := h.client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", "hi"), option.WithHeader(fakeupstream.HeaderCut, "2"))
	for s.Next() {
	}
	_ = s.Close()
	waitFor(t, func() bool { return value(t, reg, "compactd_http_requests_in_flight") == 0 })
	if got := value(t, reg, "compactd_streams_in_flight", "route", "/v1/responses"); got != 0 {
		t.Errorf("streams in flight after an upstream cut = %v, want 0", got)
	}
}

// waitFor polls cond until it holds; the handler goroutine finishes shortly after the client
// goes away, at a moment the test cannot observe directly. Not a timing assertion: the bound
// only keeps a broken build from hanging.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRequestIDAndAccessLog(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := newHarness(t, fakeupstream.Options{}, withRegistry(prometheus.NewRegistry(), retain(1000), func(c *proxy.Config) { c.Logger = log }))

	// Echoed.
	turnOne(t, h)
	var raw *http.Response
	_, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", "hello SECRET-PROMPT-WORDS"), option.WithHeader("X-Request-Id", "my-id-1"), option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if got := raw.Header.Get("X-Request-Id"); got != "my-id-1" {
		t.Errorf("X-Request-Id = %q, want it echoed", got)
	}
	// Generated.
	r, err := http.Get(h.proxyURL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if got := r.Header.Get("X-Request-Id"); !strings.HasPrefix(got, "req_") {
		t.Errorf("generated X-Request-Id = %q", got)
	}

	// The access line is written after the response is complete: wait for the third.
	waitFor(t, func() bool { return strings.Count(buf.String(), `"msg":"request"`) >= 3 })
	out := buf.String()
	for _, secret := range []string{"sk-test", "SECRET-PROMPT-WORDS", "encrypted_content", "please refactor"} {
		if strings.Contains(out, secret) {
			t.Errorf("log contains %q", secret)
		}
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %s", l)
		}
		if m["msg"] == "request" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 3 {
		t.Fatalf("%d access lines, want 3 (two turns, one probe):\n%s", len(lines), out)
	}
	// Lines are written as handlers finish, not in request order: find each by what it is.
	var turn, compacting, probe map[string]any
	for _, l := range lines {
		switch {
		case l["request_id"] == "my-id-1":
			turn = l
		case l["route"] == "/healthz":
			probe = l
		default:
			compacting = l
		}
	}
	if turn == nil || probe == nil || compacting == nil {
		t.Fatalf("missing access lines:\n%s", out)
	}
	if turn["route"] != "/v1/responses" || turn["status"] != float64(200) || turn["model"] != testModel || turn["method"] != "POST" {
		t.Errorf("access line = %v", turn)
	}
	for _, k := range []string{"duration_ms", "upstream_ms", "summariser_ms", "overhead_ms", "bytes_in", "bytes_out"} {
		if _, ok := turn[k]; !ok {
			t.Errorf("access line lacks %s: %v", k, turn)
		}
	}
	if compacting["summariser_ms"].(float64) <= 0 || turn["summariser_ms"].(float64) != 0 {
		t.Errorf("summariser time: compacting turn %v, plain turn %v", compacting["summariser_ms"], turn["summariser_ms"])
	}
	if probe["level"] != "DEBUG" || !strings.HasPrefix(probe["request_id"].(string), "req_") {
		t.Errorf("probe line = %v, want DEBUG with a generated id", probe)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestHealthAndReadiness(t *testing.T) {
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := closed.Addr().String()
	closed.Close()
	dead, _ := url.Parse("http://" + deadAddr)

	tests := []struct {
		name      string
		upstreams func(fake *url.URL) []*url.URL
		wantReady int
	}{
		{"keys only", func(*url.URL) []*url.URL { return nil }, 200},
		{"upstream reachable", func(fake *url.URL) []*url.URL { return []*url.URL{fake} }, 200},
		{"upstream down", func(*url.URL) []*url.URL { return []*url.URL{dead} }, 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) {
				c.ReadyUpstreams = tt.upstreams(c.Upstream) // the fake upstream, already started
			})
			for _, p := range []struct {
				path string
				want int
			}{{"/healthz", 200}, {"/readyz", tt.wantReady}} {
				r, err := http.Get(h.proxyURL + p.path)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(r.Body)
				r.Body.Close()
				if r.StatusCode != p.want {
					t.Errorf("%s = %d %s, want %d", p.path, r.StatusCode, body, p.want)
				}
			}
		})
	}
}

func TestMetricsEndpointAuth(t *testing.T) {
	tests := []struct {
		name   string
		cfg    func(*proxy.Config)
		header func(*http.Request)
		want   int
	}{
		{"open", func(*proxy.Config) {}, func(*http.Request) {}, 200},
		{"bearer ok", func(c *proxy.Config) { c.MetricsToken = "tok" }, func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok") }, 200},
		{"bearer wrong", func(c *proxy.Config) { c.MetricsToken = "tok" }, func(r *http.Request) { r.Header.Set("Authorization", "Bearer nope") }, 401},
		{"bearer missing", func(c *proxy.Config) { c.MetricsToken = "tok" }, func(*http.Request) {}, 401},
		{"basic ok", func(c *proxy.Config) { c.MetricsUser, c.MetricsPassword = "u", "p" }, func(r *http.Request) { r.SetBasicAuth("u", "p") }, 200},
		{"basic wrong", func(c *proxy.Config) { c.MetricsUser, c.MetricsPassword = "u", "p" }, func(r *http.Request) { r.SetBasicAuth("u", "x") }, 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, fakeupstream.Options{}, withRegistry(proxy.NewRegistry(), tt.cfg))
			req, _ := http.NewRequest("GET", h.proxyURL+"/metrics", nil)
			tt.header(req)
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode != tt.want {
				t.Fatalf("status %d, want %d", r.StatusCode, tt.want)
			}
			if tt.want == 200 && !bytes.Contains(body, []byte("compactd_compactions_total")) {
				t.Errorf("scrape lacks compactd metrics")
			}
		})
	}
}

// TestMetricsSeparate: with a separate admin listener, /metrics is served there and not on the API
// handler (where it falls through to the upstream like any unknown path).
func TestMetricsSeparate(t *testing.T) {
	reg := proxy.NewRegistry()
	h := newHarness(t, fakeupstream.Options{}, withRegistry(reg, func(c *proxy.Config) { c.MetricsSeparate = true }))
	r, err := http.Get(h.proxyURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if bytes.Contains(body, []byte("compactd_compactions_total")) {
		t.Error("API listener serves /metrics with MetricsSeparate")
	}

	s, err := proxy.New(proxy.Config{Registry: prometheus.NewRegistry(), MetricsSeparate: true, Sealer: h.ring, Summarizer: failingSummarizer{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer closeServer(t, s)
	admin := httptest.NewServer(s.OpsHandler())
	defer admin.Close()
	for path, want := range map[string]string{"/metrics": "compactd_compactions_total", "/healthz": "ok", "/readyz": `"status":"ok"`} {
		r, err := http.Get(admin.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("admin %s = %d %.100s", path, r.StatusCode, body)
		}
	}
}
