package metrics

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

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

func TestLabelBoundsClientValues(t *testing.T) {
	tests := map[string]string{
		"":                   "",
		"pre_turn":           "pre_turn",
		"Pre-Turn":           "other",
		"01a22679-79f0-7c11": "other",
		"a_very_long_value_that_is_longer_than_32": "other",
	}
	for in, want := range tests {
		if got := Label(in); got != want {
			t.Errorf("Label(%q) = %q, want %q", in, got, want)
		}
	}
}

// The api label's values, whose series are made up front, are the dialects' names, one each.
func TestAPILabelsAreTheDialectNames(t *testing.T) {
	if got := []string{string(dialectname.Responses), string(dialectname.Messages), string(dialectname.Chat)}; !slices.Equal(metricAPIs, got) {
		t.Errorf("metricAPIs = %q, want %q", metricAPIs, got)
	}
}

// The per-request metric calls use series resolved once: after the first request of a label set
// they allocate nothing (before, every call formatted the code and hashed the labels into the
// vector's map; strconv of a status code alone allocated).
func TestRequestMetricsPreResolved(t *testing.T) {
	m := New(prometheus.NewRegistry(), nil)
	calls := map[string]func(){
		"request":  func() { m.Request("/v1/responses", "POST", 200, 0.01, 0.0001) },
		"upstream": func() { m.UpstreamRoundTrip("openai", 200, 0.01) },
		"canceled": func() { m.UpstreamCanceled("anthropic", 0.01) },
		"stream":   func() { m.StreamOpened("/v1/responses"); m.StreamClosed("/v1/responses") },
		"genai":    func() { m.GenAI("chat", "openai", "gpt-5.4", 0.1, 10, 5) },
	}
	for name, f := range calls {
		f()
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %.1f allocations per call, want 0", name, n)
		}
	}
}

// record calls every recording method once.
func record(m *Metrics) {
	m.Compaction(CompactionEvent{API: "responses", Trigger: "threshold", Outcome: "ok", TokensBefore: 1000, TokensAfter: 100})
	m.Skipped("messages", "policy", "min_saving")
	m.SummaryTruncated("chat")
	m.OpenFailure("responses", "tampered")
	m.ForeignItems("messages", "dropped", 2)
	m.HandoffApplied("responses")
	m.ClientCompaction("responses", "pre_turn", "")
	m.Fallback("responses", "extractive")
	m.Memo("hit")
	m.Speculative("started")
	m.Recall(true, 3)
	m.RequestStarted()
	m.StreamOpened("/v1/responses")
	m.StreamClosed("/v1/responses")
	m.Request("/v1/responses", "BREW", 1000, 0.5, 0.001)
	m.RequestDone()
	m.BudgetRefused()
	m.AuthFailure()
	m.AdminAuthFailure("throttled")
	m.UpstreamRoundTrip("openai", 503, 0.1)
	m.UpstreamRoundTrip("openai", 0, 0.1)
	m.UpstreamCanceled("anthropic", 0.2)
	m.GenAI("chat", "openai", "has space", 0.3, 10, 0)
	m.Summarised("ok", 1.5, 100, 20, 2)
}

// A nil *Metrics (no registry) records nothing and every method is safe on it.
func TestNilRecordsNothing(t *testing.T) {
	if m := New(nil, []string{"gpt-5.4"}); m != nil {
		t.Fatalf("New(nil) = %v, want nil", m)
	}
	record(nil) // panics if a method is not nil-safe
}

// gathered is the value of the series of name with exactly the labels kv (counter, gauge, or a
// histogram's sample count), and whether it exists.
func gathered(t *testing.T, g prometheus.Gatherer, name string, kv ...string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !labelsAre(m.GetLabel(), kv) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func labelsAre(lp []*dto.LabelPair, kv []string) bool {
	if len(lp) != len(kv)/2 {
		return false
	}
	for i := 0; i < len(kv); i += 2 {
		if !slices.ContainsFunc(lp, func(p *dto.LabelPair) bool { return p.GetName() == kv[i] && p.GetValue() == kv[i+1] }) {
			return false
		}
	}
	return true
}

// Each recording method lands in its metric under the labels it documents: clamped methods and
// codes, "unknown" for a phase or reason the client left out, "other" for a model name that does
// not look like one, the status class of an upstream answer, "error" for none.
func TestRecordingMethods(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, nil)
	record(m)
	for _, tc := range []struct {
		name string
		kv   []string
		want float64
	}{
		{"compactd_compactions_total", []string{"api", "responses", "trigger", "threshold", "outcome", "ok"}, 1},
		{"compactd_compaction_tokens_saved_total", []string{"api", "responses"}, 900},
		{"compactd_compaction_ratio", []string{"api", "responses"}, 1},
		{"compactd_compaction_tokens", []string{"api", "responses", "stage", "before"}, 1},
		{"compactd_compactions_total", []string{"api", "messages", "trigger", "policy", "outcome", "skipped"}, 1},
		{"compactd_compactions_skipped_total", []string{"api", "messages", "reason", "min_saving"}, 1},
		{"compactd_summaries_truncated_total", []string{"api", "chat"}, 1},
		{"compactd_item_open_failures_total", []string{"api", "responses", "reason", "tampered"}, 1},
		{"compactd_foreign_items_total", []string{"api", "messages", "action", "dropped"}, 2},
		{"compactd_handoffs_total", []string{"api", "responses"}, 1},
		{"compactd_client_compactions_total", []string{"api", "responses", "phase", "pre_turn", "reason", "unknown"}, 1},
		{"compactd_summariser_fallbacks_total", []string{"api", "responses", "policy", "extractive"}, 1},
		{"compactd_memo_total", []string{"outcome", "hit"}, 1},
		{"compactd_speculative_compactions_total", []string{"outcome", "started"}, 1},
		{"compactd_recall_searches_total", []string{"outcome", "ok"}, 1},
		{"compactd_recall_hits_total", nil, 3},
		{"compactd_http_requests_in_flight", nil, 0},
		{"compactd_streams_in_flight", []string{"route", "/v1/responses"}, 0},
		{"compactd_http_requests_total", []string{"route", "/v1/responses", "method", "other", "code", "other"}, 1},
		{"compactd_http_request_duration_seconds", []string{"route", "/v1/responses"}, 1},
		{"compactd_proxy_overhead_seconds", []string{"route", "/v1/responses"}, 1},
		{"compactd_inflight_body_refusals_total", nil, 1},
		{"compactd_auth_failures_total", nil, 1},
		{"compactd_admin_auth_failures_total", []string{"outcome", "throttled"}, 1},
		{"compactd_upstream_requests_total", []string{"upstream", "openai", "status_class", "5xx"}, 1},
		{"compactd_upstream_requests_total", []string{"upstream", "openai", "status_class", "error"}, 1},
		{"compactd_upstream_requests_total", []string{"upstream", "anthropic", "status_class", "canceled"}, 1},
		{"gen_ai_client_operation_duration_seconds", []string{"gen_ai_operation_name", "chat", "gen_ai_provider_name", "openai", "gen_ai_request_model", "other"}, 1},
		{"gen_ai_client_token_usage", []string{"gen_ai_operation_name", "chat", "gen_ai_provider_name", "openai", "gen_ai_request_model", "other", "gen_ai_token_type", "input"}, 1},
		{"compactd_summariser_requests_total", []string{"outcome", "ok"}, 1},
		{"compactd_summariser_duration_seconds", []string{"outcome", "ok"}, 1},
		{"compactd_summariser_tokens_total", []string{"type", "output"}, 20},
		{"compactd_summariser_llm_calls_total", nil, 2},
	} {
		got, ok := gathered(t, reg, tc.name, tc.kv...)
		if !ok || got != tc.want {
			t.Errorf("%s%q = %v (exists: %v), want %v", tc.name, tc.kv, got, ok, tc.want)
		}
	}
	// An output count of zero is not reported usage: no sample.
	if _, ok := gathered(t, reg, "gen_ai_client_token_usage", "gen_ai_operation_name", "chat", "gen_ai_provider_name", "openai", "gen_ai_request_model", "other", "gen_ai_token_type", "output"); ok {
		t.Error("an output token count of 0 was observed")
	}
}

// The fixed label values have their series before the first event, at zero, so dashboards and
// alerts have data from the start.
func TestSeriesMadeUpFront(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg, nil)
	for _, tc := range [][]string{
		{"compactd_compactions_total", "api", "chat", "trigger", "agent", "outcome", "failed"},
		{"compactd_compactions_total", "api", "messages", "trigger", "on_demand", "outcome", "skipped"},
		{"compactd_item_open_failures_total", "api", "responses", "reason", "expired"},
		{"compactd_compactions_skipped_total", "api", "chat", "reason", "not_smaller"},
		{"compactd_summariser_fallbacks_total", "api", "messages", "policy", "passthrough"},
		{"compactd_foreign_items_total", "api", "chat", "action", "rejected"},
		{"compactd_memo_total", "outcome", "spec_hit"},
		{"compactd_speculative_compactions_total", "outcome", "covered"},
		{"compactd_recall_searches_total", "outcome", "failed"},
		{"compactd_summariser_requests_total", "outcome", "canceled"},
		{"compactd_summariser_tokens_total", "type", "input"},
		{"compactd_admin_auth_failures_total", "outcome", "invalid_token"},
		{"compactd_auth_failures_total"},
		{"compactd_inflight_body_refusals_total"},
	} {
		if got, ok := gathered(t, reg, tc[0], tc[1:]...); !ok || got != 0 {
			t.Errorf("%s%q = %v (exists: %v), want a series at 0", tc[0], tc[1:], got, ok)
		}
	}
}
