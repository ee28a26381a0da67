package proxy_test

import (
	"context"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	openaiopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// Under tenants the summariser gets the tenant's OpenAI credential (it speaks the OpenAI wire
// API) on both routes: the Messages turn's own headers carry the tenant's Anthropic key, which
// the summariser cannot use, and the client's compactd key never leaves compactd.
func TestUpstreamSummariserGetsTenantCredential(t *testing.T) {
	for _, route := range []string{"messages", "responses"} {
		t.Run(route, func(t *testing.T) {
			h := newMsgHarness(t, func(c *proxy.Config) { c.Tenants = testTenants(t); c.RetainTokens = 1000 })
			ctx := context.Background()
			switch route {
			case "messages":
				ant := anthropic.NewClient(option.WithBaseURL(h.proxyURL), option.WithAPIKey("cpd-acme-1"), option.WithMaxRetries(0))
				msg, err := ant.Beta.Messages.New(ctx, params(append(longHistory(16), userText("next?")), compactEdit(50_000, false)))
				if err != nil {
					t.Fatal(err)
				}
				if msg.Content[0].Type != "compaction" {
					t.Fatalf("no compaction: %s", msg.Content[0].Type)
				}
			default:
				_, err := h.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel},
					openaiopt.WithAPIKey("cpd-acme-1"), openaiopt.WithJSONSet("input", history(6, 400)), threshold(2000))
				if err != nil {
					t.Fatal(err)
				}
			}
			sums := h.upstream(fakeupstream.KindSummary)
			if len(sums) == 0 {
				t.Fatal("the summariser was not called")
			}
			for _, r := range sums {
				if got := r.Header.Get("Authorization"); got != "Bearer sk-acme-upstream" {
					t.Errorf("summariser Authorization = %q, want the tenant's OpenAI key", got)
				}
				for _, k := range []string{"X-Api-Key", "Api-Key"} {
					if v := r.Header.Get(k); v != "" {
						t.Errorf("summariser got %s %q", k, v)
					}
				}
			}
		})
	}
}
