package proxy_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// adminDo sends one admin API call with token (none when empty) and returns status, headers and
// body.
func adminDo(t *testing.T, base, method, path, token string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// A search query without one searchable word (the archive's words are runs of letters and
// digits) is the caller's mistake: a 400 naming the query syntax, not a 500.
func TestAdminSearchQueryWithoutWords(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, withArchive(t, func(c *proxy.Config) { c.AdminToken = "s3cret-admin" }))
	for _, q := range []string{"*", "**", "!?", `""`, "-", "*.*"} {
		code, _, body := adminDo(t, h.proxyURL, "GET", "/v1/compactd/conversations/c1/search?q="+url.QueryEscape(q), "s3cret-admin")
		if code != http.StatusBadRequest {
			t.Errorf("q=%q: status %d, want 400: %s", q, code, body)
			continue
		}
		e := gjson.GetBytes(body, "error")
		if e.Get("type").Str != "invalid_request_error" || e.Get("param").Str != "q" || !strings.Contains(e.Get("message").Str, "letters and digits") {
			t.Errorf("q=%q: error %s does not name the parameter and the query syntax", q, e.Raw)
		}
	}
	// A query with a word still searches (nothing is archived: no hits).
	if code, _, body := adminDo(t, h.proxyURL, "GET", "/v1/compactd/conversations/c1/search?q="+url.QueryEscape("port*"), "s3cret-admin"); code != http.StatusOK {
		t.Errorf("q=port*: status %d: %s", code, body)
	}
}

// Failed admin-token attempts are throttled per client address: after a burst of them the
// address gets a 429 in OpenAI's envelope with Retry-After, even with the right token (a right
// token that still worked would tell a guess that hit from one that missed, so the throttle would
// not slow guessing); a right token costs nothing from the budget, so an operator's ordinary use
// is never throttled. Both outcomes are counted in compactd_admin_auth_failures_total.
func TestAdminTokenThrottle(t *testing.T) {
	reg := proxy.NewRegistry()
	h := newHarness(t, fakeupstream.Options{}, withArchive(t, func(c *proxy.Config) { c.AdminToken = "s3cret-admin"; c.Registry = reg }))
	const search = "/v1/compactd/conversations/c1/search?q=port"
	for i := range 50 { // the right token, many times: never throttled
		if code, _, body := adminDo(t, h.proxyURL, "GET", search, "s3cret-admin"); code != http.StatusOK {
			t.Fatalf("right token, call %d: %d %s", i, code, body)
		}
	}
	for i := range proxy.AdminFailureBurst {
		tok := []string{"", "wrong", "s3cret-admin-but-longer", "s"}[i%4]
		if code, _, body := adminDo(t, h.proxyURL, "GET", search, tok); code != http.StatusUnauthorized {
			t.Fatalf("wrong token %q, attempt %d: %d %s, want 401", tok, i+1, code, body)
		}
	}
	for _, tok := range []string{"wrong", "s3cret-admin"} {
		code, hdr, body := adminDo(t, h.proxyURL, "GET", search, tok)
		e := gjson.GetBytes(body, "error")
		if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" || e.Get("code").Str != "admin_auth_throttled" || e.Get("message").Str == "" {
			t.Errorf("token %q past the burst: %d Retry-After=%q %s, want 429 admin_auth_throttled with Retry-After", tok, code, hdr.Get("Retry-After"), body)
		}
	}
	for outcome, want := range map[string]float64{"invalid_token": proxy.AdminFailureBurst, "throttled": 2} {
		if got := adminFailures(t, reg, outcome); got != want {
			t.Errorf("compactd_admin_auth_failures_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
}

// adminFailures is the value of compactd_admin_auth_failures_total{outcome} in reg.
func adminFailures(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "compactd_admin_auth_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no compactd_admin_auth_failures_total{outcome=%q}", outcome)
	return 0
}
