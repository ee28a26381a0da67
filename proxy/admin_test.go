package proxy_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

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
