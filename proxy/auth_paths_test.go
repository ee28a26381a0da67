package proxy_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/compactd/compactd/proxy"
)

// A spelling of one of compactd's own routes that an upstream (or a proxy before it) might
// normalise to that route is refused with a 400 in the route's dialect, with or without tenants:
// forwarded, it would carry compaction items and blocks past compactd to the upstream. Before
// the fix each of these went to the upstream untouched.
func TestNonCanonicalOwnPathsRefused(t *testing.T) {
	spellings := []struct {
		path, route string
		anthropic   bool
	}{
		{"//v1/responses", "/v1/responses", false},
		{"///v1/responses", "/v1/responses", false},
		{"/v1//responses", "/v1/responses", false},
		{"/V1/responses", "/v1/responses", false},
		{"/v1/Responses", "/v1/responses", false},
		{"/v1/RESPONSES", "/v1/responses", false},
		{"/v1/responses/", "/v1/responses", false},
		{"/v1/responses//", "/v1/responses", false},
		{"/v1/./responses", "/v1/responses", false},
		{"/./v1/responses", "/v1/responses", false},
		{"/v1/responses/.", "/v1/responses", false},
		{"/x/../v1/responses", "/v1/responses", false},
		{"/v1/models/../responses", "/v1/responses", false},
		{"/v1/%72esponses", "/v1/responses", false},
		{"/v1/%52ESPONSES", "/v1/responses", false},
		{"/%76%31/responses", "/v1/responses", false},
		{"/v1%2Fresponses", "/v1/responses", false},
		{"/v1/%2e/responses", "/v1/responses", false},
		{"/v1/x/%2e%2e/responses", "/v1/responses", false},
		{"/v1/%2572esponses", "/v1/responses", false}, // double-encoded
		{`/v1\responses`, "/v1/responses", false},
		{"/v1%5Cresponses", "/v1/responses", false},
		{"/v1/responses;jsessionid=1", "/v1/responses", false},
		{"/v1/responses%00.json", "/v1/responses", false},
		{"/v1/responses.", "/v1/responses", false},
		{"/v1/responses%20", "/v1/responses", false},
		{"/v1/respon%C5%BFes", "/v1/responses", false}, // ſ, which folds to s
		{"/v1/responses/compact/", "/v1/responses/compact", false},
		{"/v1/responses/Compact", "/v1/responses/compact", false},
		{"/v1/responses%2Fcompact", "/v1/responses/compact", false},
		{"/v1/responses/resp_1/../compact", "/v1/responses/compact", false},
		// Chat Completions is compactd's route too (its policy compacts there): a misspelling
		// would reach the upstream uncounted and uncompacted.
		{"/v1/chat/completions/", "/v1/chat/completions", false},
		{"//v1/chat/completions", "/v1/chat/completions", false},
		{"/v1/Chat/Completions", "/v1/chat/completions", false},
		{"/v1/chat//completions", "/v1/chat/completions", false},
		{"/v1/chat%2Fcompletions", "/v1/chat/completions", false},
		{"/v1//messages", "/v1/messages", true},
		{"//v1/messages", "/v1/messages", true},
		{"/V1/messages", "/v1/messages", true},
		{"/v1/Messages", "/v1/messages", true},
		{"/v1/messages/", "/v1/messages", true},
		{"/v1/./messages", "/v1/messages", true},
		{"/v1/%6dessages", "/v1/messages", true},
		{"/v1/messages/count_tokens/", "/v1/messages/count_tokens", true},
		{"/v1/messages/Count_Tokens", "/v1/messages/count_tokens", true},
		{"/v1/messages/%63ount_tokens", "/v1/messages/count_tokens", true},
		{"/v1/messages//count_tokens", "/v1/messages/count_tokens", true},
		{"/v1/messages/batches/../count_tokens", "/v1/messages/count_tokens", true},
		{"/v1/messages%2Fcount_tokens", "/v1/messages/count_tokens", true},
		// Under /v1/messages/ compactd chooses the (Anthropic) upstream: odd spellings there too.
		{"/v1//messages/batches", "/v1/messages/batches", true},
		{"/v1/messages//batches", "/v1/messages/batches", true},
		{"/v1/messages/batches/", "/v1/messages/batches", true},
		{"/v1/messages/%62atches", "/v1/messages/batches", true},
		// Admin paths spelled otherwise would be forwarded with the admin token.
		{"/V1/compactd/conversations/c1", "/v1/compactd/conversations/c1", false},
		{"//v1/compactd/conversations/c1", "/v1/compactd/conversations/c1", false},
		{"/v1/compactd/../responses", "/v1/responses", false},
		{"/HEALTHZ", "/healthz", false},
		{"/readyz/", "/readyz", false},
	}
	body := `{"model":"m","input":[{"type":"compaction","id":"cmp_1","encrypted_content":"cmp_1.x"},{"role":"user","content":"hi"}],"messages":[{"role":"user","content":"hi"}]}`
	for _, tenants := range []bool{false, true} {
		rec := newRecorder(t)
		addr := newGateProxy(t, rec, func(c *proxy.Config) {
			if tenants {
				c.Tenants = testTenants(t)
			}
		})
		for _, sp := range spellings {
			for _, m := range []string{"POST", "GET", "DELETE"} {
				headers := []string{"Content-Type: application/json", "Content-Length: " + strconv.Itoa(len(body))}
				if tenants {
					headers = append(headers, "Authorization: Bearer cpd-acme-1")
				}
				what := m + " " + sp.path
				if tenants {
					what += " (tenants)"
				}
				res := rawExchange(t, addr, m, request(m, sp.path, headers...), strings.NewReader(body))
				if res.status != http.StatusBadRequest {
					t.Errorf("%s: %d %s, want 400", what, res.status, res.body)
					continue
				}
				typ, code := wantDialect(t, what, res.body, sp.anthropic)
				if typ != "invalid_request_error" || code != "non_canonical_path" {
					t.Errorf("%s: error %q/%q, want invalid_request_error/non_canonical_path", what, typ, code)
				}
				if !strings.Contains(string(res.body), sp.route) {
					t.Errorf("%s: message %s does not name the route %s", what, res.body, sp.route)
				}
			}
		}
		if got := rec.requests(); len(got) != 0 {
			t.Errorf("tenants=%v: %d odd spellings reached the upstream, the first %s %s", tenants, len(got), got[0].Method, got[0].URI)
		}
	}
}

// Paths that are no route of compactd's are forwarded exactly as sent, odd spellings included:
// compactd has nothing to protect there and the upstream's own rules apply.
func TestOtherPathsForwardedVerbatim(t *testing.T) {
	rec := newRecorder(t)
	addr := newGateProxy(t, rec, nil)
	for _, p := range []string{
		"/v1/models", "/v1/models/ft:gpt-4o:org:x", "/v1/models/ft%3Agpt-4o", "/v1/files/file-AbC/content",
		"/v1/responses/resp_123", "/v1/responses/resp_123/input_items?limit=5", "/v1/responses/resp_123/cancel",
		"/v1/messages/batches/msgbatch_01ABC/results", "/api//generate", "/api/Chat", "/v1/chat/completionsx",
		"/v1/responsesx", "/v1/messagesx", "/openai/v1/responses",
	} {
		rec.reset()
		res := rawExchange(t, addr, "GET", request("GET", p), nil)
		got := rec.requests()
		if res.status != http.StatusOK || len(got) != 1 || got[0].URI != p {
			t.Errorf("GET %s: %d %s; upstream received %+v, want it forwarded verbatim", p, res.status, res.body, got)
		}
	}
}
