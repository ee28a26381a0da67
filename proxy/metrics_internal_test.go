package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	dialectname "github.com/compactd/compactd/internal/dialect"
)

func TestModelLabels(t *testing.T) {
	ml := newModelLabels([]string{"gpt-5.1-codex", "bad model!"}, 2)
	tests := []struct{ in, want string }{
		{"gpt-5.1-codex", "gpt-5.1-codex"}, // configured
		{"", "unknown"},
		{"has space", "other"},
		{strings.Repeat("x", 65), "other"},
		{"claude-sonnet-4-5@20250929", "claude-sonnet-4-5@20250929"}, // first seen
		{"org/model:tag", "org/model:tag"},                           // second seen: cap reached
		{"gpt-4o", "other"},
		{"claude-sonnet-4-5@20250929", "claude-sonnet-4-5@20250929"}, // still known
		{"gpt-5.1-codex", "gpt-5.1-codex"},
	}
	for _, tt := range tests {
		if got := ml.label(tt.in); got != tt.want {
			t.Errorf("label(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestLabelClamps(t *testing.T) {
	tests := []struct{ got, want string }{
		{methodLabel("POST"), "POST"},
		{methodLabel("BREW"), "other"},
		{codeLabel(499), "499"},
		{codeLabel(1000), "other"},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("case %d: %q, want %q", i, tt.got, tt.want)
		}
	}
}

// The api label is the dialect's name, one value per dialect: every dialect's String() is its
// name and one of metricAPIs, whose series are made up front.
func TestAPILabelIsTheDialectName(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range []dialect{dialectOpenAI, dialectAnthropic, dialectChat} {
		if apiName(d) != string(d.Name()) || !d.Name().Valid() {
			t.Errorf("%T: String %q, name %q: want the dialect's name", d, apiName(d), d.Name())
		}
		if !slices.Contains(metricAPIs, apiName(d)) {
			t.Errorf("%T: api label %q is not in metricAPIs %q", d, apiName(d), metricAPIs)
		}
		seen[apiName(d)] = true
	}
	if len(seen) != 3 || len(metricAPIs) != 3 {
		t.Errorf("api labels %v, metricAPIs %q: want one per dialect", seen, metricAPIs)
	}
	if got := []string{string(dialectname.Responses), string(dialectname.Messages), string(dialectname.Chat)}; !slices.Equal(metricAPIs, got) {
		t.Errorf("metricAPIs = %q, want %q", metricAPIs, got)
	}
}

func TestRequestID(t *testing.T) {
	tests := []struct {
		header string
		keep   bool
	}{
		{"abc-123_x.y:z", true},
		{"", false},
		{"has space", false},
		{"new\nline", false},
		{strings.Repeat("a", 129), false},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.header != "" {
			h["X-Request-Id"] = []string{tt.header}
		}
		got := requestID(h)
		if tt.keep && got != tt.header {
			t.Errorf("requestID(%q) = %q, want it echoed", tt.header, got)
		}
		if !tt.keep && (got == tt.header || !strings.HasPrefix(got, "req_")) {
			t.Errorf("requestID(%q) = %q, want a generated req_ id", tt.header, got)
		}
	}
}

// TestUpstreamBodyUsage feeds usage-bearing bodies through upstreamBody one byte at a time (the
// worst split) and checks the tokens it finds.
func TestUpstreamBodyUsage(t *testing.T) {
	tests := []struct {
		name    string
		sse     bool
		body    string
		in, out int64
	}{
		{"responses json", false, `{"id":"resp_1","output":[],"usage":{"input_tokens":120,"output_tokens":7}}`, 120, 7},
		{"chat json", false, `{"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":5}}`, 50, 5},
		{"responses sse", true, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":900,\"output_tokens\":40}}}\n\n", 900, 40},
		{"anthropic sse", true, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":90,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":33}}\n\n", 100, 33},
		{"responses sse CRLF", true, "event: response.created\r\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\r\n\r\n" +
			"event: response.completed\r\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":900,\"output_tokens\":40}}}\r\n\r\n", 900, 40},
		{"anthropic sse multi-line data", true, "event: message_start\ndata: {\"type\":\"message_start\",\ndata: \"message\":{\"usage\":{\"input_tokens\":10,\ndata: \"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\ndata: \"usage\":{\"output_tokens\":33}}\n\n", 10, 33},
		{"sse last event without its blank line", true, "data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}", 5, 2},
		{"no usage", true, "data: {\"type\":\"x\"}\n\n", 0, 0},
		{"not json", false, `not json`, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &upstreamBody{rc: io.NopCloser(strings.NewReader(tt.body)), turn: true, scan: true, sse: tt.sse}
			got, err := io.ReadAll(iotest.OneByteReader(b))
			if err != nil || string(got) != tt.body {
				t.Fatalf("body changed or failed: %v", err)
			}
			if b.in != tt.in || b.out != tt.out {
				t.Errorf("usage = %d in / %d out, want %d / %d", b.in, b.out, tt.in, tt.out)
			}
		})
	}
}

// TestStreamGaugeOnPanic: a handler that aborts (http.ErrAbortHandler, as a cut upstream stream
// does) still releases the stream gauge.
func TestStreamGaugeOnPanic(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := &Server{cfg: Config{Registry: reg}, metrics: newMetrics(Config{Registry: reg})}
	s.log = discardLogger()
	r := chi.NewRouter()
	r.Use(s.instrument)
	r.Get("/s", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		if got := testutil.ToFloat64(s.metrics.streams.WithLabelValues("/s")); got != 1 {
			t.Errorf("streams during the stream = %v, want 1", got)
		}
		panic(http.ErrAbortHandler)
	})
	func() {
		defer func() { _ = recover() }()
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/s", nil))
	}()
	if got := testutil.ToFloat64(s.metrics.streams.WithLabelValues("/s")); got != 0 {
		t.Errorf("streams after abort = %v, want 0", got)
	}
	if got := testutil.ToFloat64(s.metrics.inFlight); got != 0 {
		t.Errorf("in-flight requests after abort = %v, want 0", got)
	}
}

func BenchmarkInstrument(b *testing.B) {
	reg := prometheus.NewRegistry()
	s := &Server{cfg: Config{Registry: reg}, metrics: newMetrics(Config{Registry: reg})}
	s.log = discardLogger()
	r := chi.NewRouter()
	r.Use(s.instrument)
	r.Post("/v1/responses", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
	body := `{"model":"gpt-test","input":"hello"}`
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", "/v1/responses", strings.NewReader(body))
		r.ServeHTTP(httptest.NewRecorder(), req)
	}
}

func BenchmarkUpstreamBodySSE(b *testing.B) {
	var sb strings.Builder
	for i := 0; i < 200; i++ {
		sb.WriteString("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"token \"}\n\n")
	}
	sb.WriteString("event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":900,\"output_tokens\":40}}}\n\n")
	stream := sb.String()
	buf := make([]byte, 4096)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		ub := &upstreamBody{rc: io.NopCloser(strings.NewReader(stream)), turn: true, scan: true, sse: true}
		for {
			if _, err := ub.Read(buf); err != nil {
				break
			}
		}
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
