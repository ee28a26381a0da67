package proxy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/compactd/compactd/proxy"
)

// A Messages compaction block issued to one tenant does not open for another, and the tenant's
// Anthropic credentials replace the client's key upstream.
func TestMessagesTenantIsolation(t *testing.T) {
	h := newMsgHarness(t, func(c *proxy.Config) { c.Tenants = testTenants(t) })
	ctx := context.Background()
	client := func(key string) *anthropic.Client {
		c := anthropic.NewClient(option.WithBaseURL(h.proxyURL), option.WithAPIKey(key), option.WithMaxRetries(0))
		return &c
	}
	acme := client("cpd-acme-1")
	hist := append(longHistory(16), userText("what next?"))
	msg, err := acme.Beta.Messages.New(ctx, params(hist, compactEdit(50_000, false)))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Content[0].Type != "compaction" {
		t.Fatalf("no compaction: %s", msg.Content[0].Type)
	}
	if got := h.fake.Requests()[len(h.fake.Requests())-1].Header.Get("X-Api-Key"); got != "sk-ant-acme" {
		t.Errorf("upstream x-api-key = %q, want the tenant's", got)
	}
	next := append(append(hist, msg.ToParam()), userText("and then?"))
	if _, err := acme.Beta.Messages.New(ctx, params(next, compactEdit(50_000, false))); err != nil {
		t.Errorf("acme cannot reopen its own block: %v", err)
	}
	_, err = client("cpd-beta").Beta.Messages.New(ctx, params(next, compactEdit(50_000, false)))
	if code, _, typ := apiError(t, err); code != 400 || typ != "invalid_request_error" || !strings.Contains(err.Error(), "tenant") {
		t.Errorf("beta replaying acme's block: %v", err)
	}
}
