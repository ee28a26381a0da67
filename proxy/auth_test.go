package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

func testTenants(t *testing.T) *proxy.Tenants {
	t.Helper()
	env := map[string]string{"ACME_OPENAI": "sk-acme-upstream", "ACME_ANTHROPIC": "sk-ant-acme", "BETA_OPENAI": "sk-beta-upstream"}
	ts, err := proxy.NewTenants(proxy.TenantsFile{Tenants: []proxy.TenantConfig{
		{Name: "acme", Keys: []string{proxy.HashKey("cpd-acme-1"), proxy.HashKey("cpd-acme-2")}, OpenAIKeyEnv: "ACME_OPENAI", AnthropicKeyEnv: "ACME_ANTHROPIC"},
		{Name: "beta", Keys: []string{proxy.HashKey("cpd-beta")}, OpenAIKeyEnv: "BETA_OPENAI", RequestsPerMinute: 60, Burst: 1},
	}}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestNewTenantsValidation(t *testing.T) {
	good := proxy.HashKey("k")
	tests := []struct {
		name string
		f    proxy.TenantsFile
		want string
	}{
		{"empty", proxy.TenantsFile{}, "no tenants"},
		{"bad name", proxy.TenantsFile{Tenants: []proxy.TenantConfig{{Name: "Acme Corp", Keys: []string{good}}}}, "name"},
		{"duplicate name", proxy.TenantsFile{Tenants: []proxy.TenantConfig{{Name: "a", Keys: []string{good}}, {Name: "a", Keys: []string{proxy.HashKey("x")}}}}, "duplicate tenant"},
		{"no keys", proxy.TenantsFile{Tenants: []proxy.TenantConfig{{Name: "a"}}}, "no keys"},
		{"plaintext key", proxy.TenantsFile{Tenants: []proxy.TenantConfig{{Name: "a", Keys: []string{"sk-plain"}}}}, "sha256:"},
		{"shared key", proxy.TenantsFile{Tenants: []proxy.TenantConfig{{Name: "a", Keys: []string{good}}, {Name: "b", Keys: []string{good}}}}, "already tenant"},
		{"missing env", proxy.TenantsFile{Tenants: []proxy.TenantConfig{{Name: "a", Keys: []string{good}, OpenAIKeyEnv: "NOPE"}}}, "NOPE is empty"},
	}
	for _, tt := range tests {
		_, err := proxy.NewTenants(tt.f, func(string) string { return "" })
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestAuthAndTenantIsolation(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) { c.Tenants = testTenants(t); c.RetainTokens = 1000 })
	client := func(key string) *openai.Client {
		c := openai.NewClient(option.WithBaseURL(h.proxyURL+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0))
		return &c
	}
	ctx := context.Background()
	params := responses.ResponseNewParams{Model: testModel, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}

	// Unknown and missing keys: 401 in the dialect of the route, nothing forwarded.
	for _, key := range []string{"", "cpd-wrong", "sk-acme-upstream"} {
		_, err := client(key).Responses.New(ctx, params)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "invalid_api_key" {
			t.Errorf("key %q: err = %v, want 401 invalid_api_key", key, err)
		}
	}
	req, _ := http.NewRequest("POST", h.proxyURL+"/v1/messages?beta=true", strings.NewReader(`{}`))
	req.Header.Set("x-api-key", "cpd-wrong")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ant struct {
		Type  string
		Error struct{ Type string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&ant)
	resp.Body.Close()
	if resp.StatusCode != 401 || ant.Type != "error" || ant.Error.Type != "authentication_error" {
		t.Errorf("Messages route: %d %+v, want 401 authentication_error", resp.StatusCode, ant)
	}
	if n := len(h.fake.Requests()); n != 0 {
		t.Fatalf("%d unauthenticated requests reached the upstream", n)
	}

	// A tenant's key: the upstream sees the tenant's provider key, never the client's.
	if _, err := client("cpd-acme-2").Responses.New(ctx, params); err != nil {
		t.Fatal(err)
	}
	got := h.fake.Requests()[0].Header
	if got.Get("Authorization") != "Bearer sk-acme-upstream" || strings.Contains(strings.Join(got.Values("Authorization"), ""), "cpd-") {
		t.Errorf("upstream Authorization = %q", got.Get("Authorization"))
	}

	// An item issued to acme does not open for beta.
	acme := client("cpd-acme-1")
	r1, err := acme.Responses.New(ctx, responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", history(6, 400)), threshold(2000))
	if err != nil || r1.Output[0].Type != "compaction" {
		t.Fatalf("acme compaction: %v", err)
	}
	if gjson.GetBytes(h.upstream(fakeupstream.KindSummary)[0].Body, "model").Str == "" {
		t.Error("summariser call lost its model")
	}
	if a := h.upstream(fakeupstream.KindSummary)[0].Header.Get("Authorization"); a != "Bearer sk-acme-upstream" {
		t.Errorf("summariser used credentials %q, want the tenant's", a)
	}
	next := []any{json.RawMessage(r1.Output[0].RawJSON()), map[string]any{"role": "user", "content": "go on"}}
	if _, err := acme.Responses.New(ctx, responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", next)); err != nil {
		t.Errorf("acme cannot reopen its own item: %v", err)
	}
	_, err = client("cpd-beta").Responses.New(ctx, responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", next))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "tenant") {
		t.Errorf("beta replaying acme's item: err = %v, want 400 wrong tenant", err)
	}
}

func TestTenantRateLimit(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) { c.Tenants = testTenants(t) })
	post := func(key string) *http.Response {
		req, _ := http.NewRequest("POST", h.proxyURL+"/v1/responses", strings.NewReader(`{"model":"m","input":"hi"}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	// beta: 60/min with a burst of 1 — the second request at once is refused with a retry hint;
	// acme has no limit.
	if r := post("cpd-beta"); r.StatusCode != 200 {
		t.Fatalf("first beta request: %d", r.StatusCode)
	}
	r := post("cpd-beta")
	if r.StatusCode != 429 || r.Header.Get("Retry-After") == "" {
		t.Errorf("second beta request: %d Retry-After %q, want 429 with Retry-After", r.StatusCode, r.Header.Get("Retry-After"))
	}
	for i := 0; i < 3; i++ {
		if r := post("cpd-acme-1"); r.StatusCode != 200 {
			t.Errorf("acme request %d: %d", i, r.StatusCode)
		}
	}
}

func TestLoadTenantsYAML(t *testing.T) {
	path := t.TempDir() + "/tenants.yaml"
	yaml := "tenants:\n  - name: acme\n    keys: [\"" + proxy.HashKey("cpd-acme") + "\"]\n    openai_key_env: COMPACTD_TEST_ACME_KEY\n    requests_per_minute: 120\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMPACTD_TEST_ACME_KEY", "sk-upstream")
	if _, err := proxy.LoadTenants(path); err != nil {
		t.Fatalf("LoadTenants: %v", err)
	}
	t.Setenv("COMPACTD_TEST_ACME_KEY", "")
	if _, err := proxy.LoadTenants(path); err == nil || strings.Contains(err.Error(), "sk-") {
		t.Errorf("missing credential: err = %v", err)
	}
}
