package proxy_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	openaiopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// Config.MessagesSummarizer writes every Messages-route compaction: threshold, on-demand and
// Claude Code's /compact (with MessagesAgentSummarizer for the latter); the Responses route keeps
// Summarizer (issue 23, defect 4).
func TestMessagesSummarizerRoutes(t *testing.T) {
	var mainCalls, msgCalls, msgAgentCalls int
	h := newMsgHarness(t, func(c *proxy.Config) {
		c.Summarizer = countingSummariser{n: &mainCalls, summary: "MAIN-SUMMARY"}
		c.MessagesSummarizer = countingSummariser{n: &msgCalls, summary: "MESSAGES-SUMMARY"}
		c.MessagesAgentSummarizer = countingSummariser{n: &msgAgentCalls, summary: "MESSAGES-AGENT-SUMMARY"}
		c.RetainTokens = 1000
	})
	ctx := context.Background()

	msg, err := h.ant.Beta.Messages.New(ctx, params(append(longHistory(16), userText("next?")), compactEdit(50_000, false)))
	if err != nil || msg.Content[0].Type != "compaction" || !strings.Contains(msg.Content[0].RawJSON(), "MESSAGES-SUMMARY") {
		t.Fatalf("threshold compaction: %v %+v", err, msg)
	}
	status, _, resp := rawMessages(t, h.proxyURL, mustBody(t, agentParams(ccPrompt), nil), map[string]string{"X-Claude-Code-Session-Id": sessionID})
	if status != http.StatusOK || !strings.Contains(string(resp), "MESSAGES-AGENT-SUMMARY") {
		t.Fatalf("/compact: %d %.300s", status, resp)
	}
	if mainCalls != 0 || msgCalls == 0 || msgAgentCalls == 0 {
		t.Fatalf("calls: main %d, messages %d, messages agent %d; want only the Messages route's", mainCalls, msgCalls, msgAgentCalls)
	}
	if _, err := h.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel},
		openaiopt.WithJSONSet("input", history(6, 400)), threshold(2000)); err != nil {
		t.Fatal(err)
	}
	if mainCalls == 0 {
		t.Error("the Responses route did not use Summarizer")
	}
}

// A Messages-API summariser on the Messages route gets the tenant's Anthropic key as x-api-key,
// never its OpenAI key nor the client's compactd key; the Responses route's OpenAI-API
// summariser keeps the tenant's OpenAI key.
func TestMessagesSummariserGetsTenantAnthropicKey(t *testing.T) {
	h := newMsgHarness(t, func(c *proxy.Config) {
		c.Tenants = testTenants(t)
		c.RetainTokens = 1000
		ms, err := summarizer.New(summarizer.Config{BaseURL: c.Upstream.String(), API: dialect.Messages})
		if err != nil {
			t.Fatal(err)
		}
		c.MessagesSummarizer = ms
	})
	ant := anthropic.NewClient(option.WithBaseURL(h.proxyURL), option.WithAPIKey("cpd-acme-1"), option.WithMaxRetries(0))
	msg, err := ant.Beta.Messages.New(context.Background(), params(append(longHistory(16), userText("next?")), compactEdit(50_000, false)))
	if err != nil || msg.Content[0].Type != "compaction" {
		t.Fatalf("no compaction: %v", err)
	}
	sums := h.upstream(fakeupstream.KindSummary)
	if len(sums) == 0 {
		t.Fatal("the summariser was not called")
	}
	for _, r := range sums {
		if r.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != "sk-ant-acme" || r.Header.Get("Authorization") != "" {
			t.Errorf("summariser request %s: x-api-key %q, Authorization %q; want the tenant's Anthropic key alone",
				r.Path, r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"))
		}
	}
}

// TestMessagesSummarizerNeedsMain: MessagesAgentSummarizer alone is a configuration error.
func TestMessagesSummarizerNeedsMain(t *testing.T) {
	var n int
	cfg := proxy.Config{Sealer: testRing(t, "k1"), Summarizer: countingSummariser{n: &n},
		MessagesAgentSummarizer: countingSummariser{n: &n}}
	if _, err := proxy.New(cfg); err == nil || !strings.Contains(err.Error(), "MessagesAgentSummarizer") {
		t.Fatalf("err = %v, want one naming MessagesAgentSummarizer", err)
	}
}

// The Messages route's summariser is instrumented like the main one; its GenAI operations are
// labelled with the provider of its wire API.
func TestMessagesSummariserMetrics(t *testing.T) {
	reg := proxy.NewRegistry()
	h := newMsgHarness(t, withRegistry(reg, func(c *proxy.Config) {
		c.RetainTokens = 1000
		ms, err := summarizer.New(summarizer.Config{BaseURL: c.Upstream.String(), API: dialect.Messages})
		if err != nil {
			t.Fatal(err)
		}
		c.MessagesSummarizer = summarizer.NewResilient(ms, summarizer.ResilienceConfig{MaxConcurrent: summarizer.DefaultMaxConcurrent})
	}))
	msg, err := h.ant.Beta.Messages.New(context.Background(), params(append(longHistory(16), userText("next?")), compactEdit(50_000, false)))
	if err != nil || msg.Content[0].Type != "compaction" {
		t.Fatalf("no compaction: %v", err)
	}
	if got := value(t, reg, "compactd_summariser_requests_total", "outcome", "ok"); got != 1 {
		t.Errorf("summariser ok = %v, want 1", got)
	}
	if got := value(t, reg, "gen_ai_client_operation_duration_seconds", "gen_ai_operation_name", "compaction", "gen_ai_provider_name", "anthropic"); got != 1 {
		t.Errorf("gen_ai compaction operations by anthropic = %v, want 1", got)
	}
}

// countingRoundTripper counts the requests a client sent.
type countingRoundTripper struct {
	n    *int
	next http.RoundTripper
}

func (c countingRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	*c.n++
	return c.next.RoundTrip(r)
}

// A summariser nothing answers for (connection refused) is tried once, not retried with backoff,
// and the client is told it could not be reached (issue 23, defect 4).
func TestMessagesSummariserUnreachable(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	addr := closed.URL
	closed.Close()
	var attempts int
	h := newMsgHarness(t, func(c *proxy.Config) {
		ms, err := summarizer.New(summarizer.Config{BaseURL: addr, API: dialect.Messages,
			HTTPClient: &http.Client{Transport: countingRoundTripper{&attempts, &http.Transport{}}}})
		if err != nil {
			t.Fatal(err)
		}
		c.MessagesSummarizer = summarizer.NewResilient(ms, summarizer.ResilienceConfig{MaxConcurrent: summarizer.DefaultMaxConcurrent})
	})
	status, _, resp := rawMessages(t, h.proxyURL, mustBody(t, agentParams(ccPrompt), nil), map[string]string{"X-Claude-Code-Session-Id": sessionID})
	if status != 529 || !strings.Contains(string(resp), "could not be reached") {
		t.Fatalf("/compact: %d %.400s; want 529 saying the summariser could not be reached", status, resp)
	}
	if attempts != 1 {
		t.Errorf("%d attempts, want 1", attempts)
	}
}
