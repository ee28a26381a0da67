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

	dialectname "github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/metrics"
)

// The api label is the dialect's name, one value per dialect: every dialect's String() is its
// name, and its series (and those of the agent trigger, whose word proxy owns) are made up front.
func TestAPILabelIsTheDialectName(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg, nil)
	seen := map[string]bool{}
	for _, d := range []dialect{dialectOpenAI, dialectAnthropic, dialectChat} {
		if apiName(d) != string(d.Name()) || !d.Name().Valid() {
			t.Errorf("%T: String %q, name %q: want the dialect's name", d, apiName(d), d.Name())
		}
		if _, ok := gatheredValue(t, reg, "compactd_compactions_total", "api", apiName(d), "trigger", agentTrigger, "outcome", "ok"); !ok {
			t.Errorf("%T: no compactions series made up front for api %q, trigger %q", d, apiName(d), agentTrigger)
		}
		seen[apiName(d)] = true
	}
	if len(seen) != 3 || len(dialectname.All) != 3 {
		t.Errorf("api labels %v, dialects %q: want one per dialect", seen, dialectname.All)
	}
}

// gatheredValue is the value of the series of name with exactly the labels kv (a counter's or a
// gauge's value, a histogram's sample sum), and whether it exists.
func gatheredValue(t testing.TB, g prometheus.Gatherer, name string, kv ...string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(kv)/2 {
				continue
			}
			for _, lp := range m.GetLabel() {
				if i := slices.Index(kv, lp.GetName()); i < 0 || i%2 != 0 || kv[i+1] != lp.GetValue() {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Histogram != nil:
				return m.Histogram.GetSampleSum(), true
			}
		}
	}
	return 0, false
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

// TestUpstreamBodyUsage reads usage-bearing bodies through upstreamBody one byte at a time (the
// worst split): the body passes unchanged and, once it ends, the GenAI chat operation is recorded
// with the tokens found (internal/metrics' TestUsage has the usage shapes). A body closed before
// its end was read still records the operation, but not a JSON usage: only a whole body counts.
func TestUpstreamBodyUsage(t *testing.T) {
	tests := []struct {
		name    string
		sse     bool
		body    string
		cut     bool // closed before the end of the body was read (every byte, but not io.EOF)
		in, out float64
	}{
		{"json", false, `{"id":"resp_1","output":[],"usage":{"input_tokens":120,"output_tokens":7}}`, false, 120, 7},
		{"sse", true, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":33}}\n\n", false, 10, 33},
		{"json cut", false, `{"id":"resp_1","output":[],"usage":{"input_tokens":120,"output_tokens":7}}`, true, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			b := &upstreamBody{rc: io.NopCloser(strings.NewReader(tt.body)), m: metrics.New(reg, nil), provider: "anthropic", model: "claude-x",
				turn: true, scan: true, usage: metrics.Usage{SSE: tt.sse}}
			var got []byte
			var err error
			if tt.cut {
				got, err = io.ReadAll(io.LimitReader(iotest.OneByteReader(b), int64(len(tt.body))))
				_ = b.Close()
			} else {
				got, err = io.ReadAll(iotest.OneByteReader(b))
			}
			if err != nil || string(got) != tt.body {
				t.Fatalf("body changed or failed: %v", err)
			}
			op := []string{"gen_ai_operation_name", "chat", "gen_ai_provider_name", "anthropic", "gen_ai_request_model", "claude-x"}
			if _, ok := gatheredValue(t, reg, "gen_ai_client_operation_duration_seconds", op...); !ok {
				t.Error("no GenAI chat operation recorded")
			}
			in, _ := gatheredValue(t, reg, "gen_ai_client_token_usage", append(op, "gen_ai_token_type", "input")...)
			out, _ := gatheredValue(t, reg, "gen_ai_client_token_usage", append(op, "gen_ai_token_type", "output")...)
			if in != tt.in || out != tt.out {
				t.Errorf("usage = %v in / %v out, want %v / %v", in, out, tt.in, tt.out)
			}
		})
	}
}

// TestStreamGaugeOnPanic: a handler that aborts (http.ErrAbortHandler, as a cut upstream stream
// does) still releases the stream gauge.
func TestStreamGaugeOnPanic(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := &Server{cfg: Config{Registry: reg}, metrics: metrics.New(reg, nil)}
	s.log = discardLogger()
	r := chi.NewRouter()
	r.Use(s.instrument)
	r.Get("/s", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		if got, _ := gatheredValue(t, reg, "compactd_streams_in_flight", "route", "/s"); got != 1 {
			t.Errorf("streams during the stream = %v, want 1", got)
		}
		panic(http.ErrAbortHandler)
	})
	func() {
		defer func() { _ = recover() }()
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/s", nil))
	}()
	if got, ok := gatheredValue(t, reg, "compactd_streams_in_flight", "route", "/s"); !ok || got != 0 {
		t.Errorf("streams after abort = %v (exists: %v), want 0", got, ok)
	}
	if got, ok := gatheredValue(t, reg, "compactd_http_requests_in_flight"); !ok || got != 0 {
		t.Errorf("in-flight requests after abort = %v, want 0", got)
	}
}

func BenchmarkInstrument(b *testing.B) {
	reg := prometheus.NewRegistry()
	s := &Server{cfg: Config{Registry: reg}, metrics: metrics.New(reg, nil)}
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
		ub := &upstreamBody{rc: io.NopCloser(strings.NewReader(stream)), turn: true, scan: true, usage: metrics.Usage{SSE: true}}
		for {
			if _, err := ub.Read(buf); err != nil {
				break
			}
		}
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
