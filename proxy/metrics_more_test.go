package proxy_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// The counters beyond the core set: the client's own reason for a compaction (Codex headers),
// speculative compaction outcomes, failure-policy fallbacks and refused client keys.
func TestMetricsForClientReasonsSpeculationFallbacksAndAuth(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, fakeupstream.Options{}, withRegistry(reg, retain(1000)))
	ctx := context.Background()

	// A Codex compaction turn labelled pre_turn / context_limit.
	input := append(toAny(history(3, 200)), map[string]any{"type": "compaction_trigger"})
	md := `{"request_kind":"compaction","session_id":"s-1","compaction":{"trigger":"auto","reason":"context_limit","phase":"pre_turn"}}`
	stream := h.client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", input),
		option.WithHeader("X-Codex-Turn-Metadata", md), option.WithHeader("Session-Id", "s-1"))
	for stream.Next() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if v := value(t, reg, "compactd_client_compactions_total", "api", "responses", "phase", "pre_turn", "reason", "context_limit"); v != 1 {
		t.Errorf("client compactions = %v, want 1", v)
	}
	if series(t, reg, "compactd_client_compactions_total", "phase", "s-1") != nil {
		t.Error("a session id became a label value")
	}

	// Speculation: a turn past 85% of its threshold starts one.
	if _, err := h.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", history(5, 400)), threshold(6000)); err != nil {
		t.Fatal(err)
	}
	if v := value(t, reg, "compactd_speculative_compactions_total", "outcome", "started"); v != 1 {
		t.Errorf("speculative started = %v, want 1", v)
	}

	// Auth failures and fallbacks, on a second server.
	reg2 := prometheus.NewRegistry()
	h2 := newHarness(t, fakeupstream.Options{}, withRegistry(reg2, func(c *proxy.Config) {
		c.Tenants = testTenants(t)
		c.Summarizer = downSummarizer{errOutage}
		c.FailurePolicies = proxy.FailurePolicies{dialect.Responses: proxy.PolicyPassthrough}
	}))
	req, _ := http.NewRequest("POST", h2.proxyURL+"/v1/responses", strings.NewReader(`{"model":"m","input":"hi"}`))
	req.Header.Set("Authorization", "Bearer nope")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	if v := value(t, reg2, "compactd_auth_failures_total"); v != 1 {
		t.Errorf("auth failures = %v, want 1", v)
	}
	body := mustJSON(t, map[string]any{"model": testModel, "input": history(6, 400), "context_management": []map[string]any{{"type": "compaction", "compact_threshold": 2000}}})
	req, _ = http.NewRequest("POST", h2.proxyURL+"/v1/responses", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer cpd-acme-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v := value(t, reg2, "compactd_summariser_fallbacks_total", "api", "responses", "policy", "passthrough"); v != 1 || resp.StatusCode != 200 {
		t.Errorf("passthrough fallbacks = %v (status %d), want 1", v, resp.StatusCode)
	}
}
