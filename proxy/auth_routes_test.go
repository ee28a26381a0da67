package proxy_test

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/proxy"
)

// recorder is an upstream that records every request it receives, exactly as it arrived, and
// answers each in the shape its route expects.
type recorder struct {
	mu   sync.Mutex
	reqs []recordedReq
	url  string
	// sse, when set, makes the pass-through route /v1/chat/completions stream its answer in
	// events this far apart.
	sse time.Duration
}

type recordedReq struct {
	Method, URI string
	Header      http.Header
	Body        []byte
	BodyErr     error
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	rec := &recorder{}
	ts := httptest.NewServer(http.HandlerFunc(rec.serve)) // 127.0.0.1
	t.Cleanup(ts.Close)
	rec.url = ts.URL
	return rec
}

func (rec *recorder) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, recordedReq{r.Method, r.RequestURI, r.Header.Clone(), body, err})
	rec.mu.Unlock()
	if err != nil {
		return
	}
	switch {
	case r.URL.Path == "/v1/chat/completions" && rec.sse > 0:
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 5 {
			_, _ = io.WriteString(w, "data: {\"n\":"+string(rune('0'+i))+"}\n\n")
			w.(http.Flusher).Flush()
			time.Sleep(rec.sse)
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		return
	case r.URL.Path == "/v1/responses":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"resp_1","object":"response","status":"completed","model":"m","output":[],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`)
	case r.URL.Path == "/v1/messages/count_tokens":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"input_tokens":1}`)
	case r.URL.Path == "/v1/messages":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`)
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"upstream":"recorder"}`)
	}
}

func (rec *recorder) requests() []recordedReq {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]recordedReq(nil), rec.reqs...)
}

func (rec *recorder) reset() {
	rec.mu.Lock()
	rec.reqs = nil
	rec.mu.Unlock()
}

// newGateProxy is compactd in front of rec for both APIs; it returns compactd's host:port.
func newGateProxy(t *testing.T, rec *recorder, mutate func(*proxy.Config)) string {
	t.Helper()
	u, _ := url.Parse(rec.url)
	counter := compact.NewCounter(compact.CounterOptions{})
	t.Cleanup(counter.Close)
	cfg := proxy.Config{
		Upstream: u, AnthropicUpstream: u,
		Sealer: testRing(t, "k1"), Summarizer: failingSummarizer{}, Counter: counter,
		KeepAlive: time.Hour, Logger: slog.New(slog.DiscardHandler),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeServer(t, srv) })
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return strings.TrimPrefix(ts.URL, "http://")
}

// rawResponse is one response read off a raw connection.
type rawResponse struct {
	status int
	header http.Header
	body   []byte
	// informational lists the 1xx status lines that came before the final response.
	informational []int
}

// rawExchange writes head (request line and headers, without the blank line ending them) and
// then body to a new connection to addr, and reads the answer. Raw, so that the request target
// reaches compactd exactly as written.
func rawExchange(t *testing.T, addr, method, head string, body io.Reader) rawResponse {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A safety net against a hung test, not a timing assertion.
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, head+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if body != nil {
		go func() { _, _ = io.Copy(c, body) }()
	}
	br := bufio.NewReader(c)
	var out rawResponse
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("%s: reading the response: %v", head, err)
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			out.informational = append(out.informational, resp.StatusCode)
			continue
		}
		out.status, out.header = resp.StatusCode, resp.Header
		out.body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return out
	}
}

// request is the head of a request to target with the given extra header lines.
func request(method, target string, headers ...string) string {
	lines := append([]string{method + " " + target + " HTTP/1.1", "Host: compactd.test"}, headers...)
	return strings.Join(lines, "\r\n")
}

// wantDialect checks that body is compactd's error envelope in the given dialect and returns
// its error.type and code (OpenAI error.code, Anthropic error.details.error_code).
func wantDialect(t *testing.T, what string, body []byte, anthropic bool) (typ, code string) {
	t.Helper()
	if anthropic {
		if gjson.GetBytes(body, "type").Str != "error" || !gjson.GetBytes(body, "error.message").Exists() {
			t.Errorf("%s: body %s is not Anthropic's error envelope", what, body)
		}
		return gjson.GetBytes(body, "error.type").Str, gjson.GetBytes(body, "error.details.error_code").Str
	}
	if gjson.GetBytes(body, "type").Exists() || !gjson.GetBytes(body, "error.message").Exists() || !gjson.GetBytes(body, "error.code").Exists() {
		t.Errorf("%s: body %s is not OpenAI's error envelope", what, body)
	}
	return gjson.GetBytes(body, "error.type").Str, gjson.GetBytes(body, "error.code").Str
}

var allMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"}

// With tenants on, every path — compactd's routes, pass-through, unknown, and odd spellings of
// compactd's routes — and every method needs a client key: without one the answer is a 401 in
// the path's dialect and the upstream receives nothing. Before the gate, paths outside /v1/
// (and /V1/…, //v1/…, /v1) went to the upstream with no key at all.
func TestTenantsGuardEveryPathAndMethod(t *testing.T) {
	rec := newRecorder(t)
	addr := newGateProxy(t, rec, func(c *proxy.Config) { c.Tenants = testTenants(t) })
	paths := []struct {
		path      string
		anthropic bool
	}{
		{"/api/generate", false},
		{"/api/chat", false},
		{"/chat/completions", false},
		{"/invocations", false},
		{"/", false},
		{"/v1", false},
		{"/v1/", false},
		{"/v1/models", false},
		{"/v1/chat/completions", false},
		{"/v1/responses", false},
		{"/v1/responses/compact", false},
		{"/v1/responses/resp_123", false},
		{"//v1/responses", false},
		{"/V1/responses", false},
		{"/v1/responses/", false},
		{"/v1/%72esponses", false},
		{"/v1/messages", true},
		{"/v1/messages/count_tokens", true},
		{"/v1/messages/batches", true},
		{"/v1//messages", true},
		{"/V1/MESSAGES", true},
		{"/healthz/", false},
		{"/metrics", false}, // not served here (no registry): an unknown path like any other
		{"/v1/compactd2", false},
	}
	for _, p := range paths {
		for _, m := range allMethods {
			for _, key := range []string{"", "Authorization: Bearer cpd-wrong", "x-api-key: cpd-wrong"} {
				headers := []string{"Content-Type: application/json", "Content-Length: 2"}
				if key != "" {
					headers = append(headers, key)
				}
				what := m + " " + p.path + " [" + key + "]"
				res := rawExchange(t, addr, m, request(m, p.path, headers...), strings.NewReader("{}"))
				if res.status != http.StatusUnauthorized {
					t.Errorf("%s: %d %s, want 401", what, res.status, res.body)
					continue
				}
				if m == "HEAD" {
					continue
				}
				typ, _ := wantDialect(t, what, res.body, p.anthropic)
				if want := map[bool]string{false: "invalid_request_error", true: "authentication_error"}[p.anthropic]; typ != want {
					t.Errorf("%s: error.type %q, want %q", what, typ, want)
				}
			}
		}
	}
	if got := rec.requests(); len(got) != 0 {
		t.Errorf("%d unauthenticated requests reached the upstream, the first %s %s", len(got), got[0].Method, got[0].URI)
	}

	// The probes answer without a key.
	for _, p := range []string{"/healthz", "/readyz"} {
		if res := rawExchange(t, addr, "GET", request("GET", p), nil); res.status != http.StatusOK {
			t.Errorf("GET %s without a key: %d, want 200", p, res.status)
		}
	}
}

// With a valid key, pass-through still works on every method: forwarded as sent, with the
// tenant's upstream credentials in place of the client's key. And the tenant's rate limit
// applies to pass-through paths as well.
func TestTenantsForwardPassThroughWithKey(t *testing.T) {
	rec := newRecorder(t)
	addr := newGateProxy(t, rec, func(c *proxy.Config) { c.Tenants = testTenants(t) })
	paths := []struct {
		path      string
		anthropic bool
	}{
		{"/api/generate", false},
		{"/chat/completions", false},
		{"/invocations", false},
		{"/v1", false},
		{"/v1/models?limit=2", false},
		{"/v1/files/file-AbC/content", false},
		{"/api//generate", false}, // an odd spelling of no route of compactd's: forwarded as is
		{"/v1/messages/batches/msgbatch_01ABC", true},
	}
	for _, p := range paths {
		for _, m := range allMethods {
			for _, key := range []string{"Authorization: Bearer cpd-acme-1", "x-api-key: cpd-acme-2", "api-key: cpd-acme-1"} {
				rec.reset()
				what := m + " " + p.path + " [" + key + "]"
				res := rawExchange(t, addr, m, request(m, p.path, "Content-Type: application/json", "Content-Length: 2", key), strings.NewReader("{}"))
				if res.status != http.StatusOK {
					t.Errorf("%s: %d %s, want the upstream's 200", what, res.status, res.body)
				}
				got := rec.requests()
				if len(got) != 1 || got[0].Method != m || got[0].URI != p.path {
					t.Errorf("%s: upstream received %+v", what, got)
					continue
				}
				h := got[0].Header
				if p.anthropic {
					if h.Get("X-Api-Key") != "sk-ant-acme" || h.Get("Authorization") != "" {
						t.Errorf("%s: upstream credentials x-api-key=%q authorization=%q, want the tenant's Anthropic key", what, h.Get("X-Api-Key"), h.Get("Authorization"))
					}
				} else if h.Get("Authorization") != "Bearer sk-acme-upstream" || h.Get("X-Api-Key") != "" || h.Get("Api-Key") != "" {
					t.Errorf("%s: upstream credentials %v, want the tenant's OpenAI key only", what, h)
				}
			}
		}
	}

	// beta: 60/min with a burst of 1.
	rec.reset()
	first := rawExchange(t, addr, "POST", request("POST", "/api/generate", "Authorization: Bearer cpd-beta", "Content-Length: 2"), strings.NewReader("{}"))
	second := rawExchange(t, addr, "POST", request("POST", "/api/generate", "Authorization: Bearer cpd-beta", "Content-Length: 2"), strings.NewReader("{}"))
	if first.status != http.StatusOK || second.status != http.StatusTooManyRequests || second.header.Get("Retry-After") == "" {
		t.Errorf("beta on a pass-through path: %d then %d (Retry-After %q), want 200 then 429 with Retry-After", first.status, second.status, second.header.Get("Retry-After"))
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("upstream received %d requests, want 1 (the rate-limited one is not forwarded)", n)
	}
}

// The admin API answers every path under /v1/compactd itself: an unknown one is a 404 (a wrong
// method a 405), never forwarded — it would carry the admin token to the upstream. Before the
// fix, with the API on, the subrouter inherited the pass-through as its not-found handler. The
// known route still works, without a client key even with tenants on.
func TestAdminUnknownPathsNotForwarded(t *testing.T) {
	for _, tenants := range []bool{false, true} {
		rec := newRecorder(t)
		addr := newGateProxy(t, rec, withArchive(t, func(c *proxy.Config) {
			c.AdminToken = "admin-secret"
			if tenants {
				c.Tenants = testTenants(t)
			}
		}))
		for _, m := range allMethods {
			for _, p := range []string{"/v1/compactd", "/v1/compactd/", "/v1/compactd/x", "/v1/compactd/conversations/c1/other", "/v1/compactd/conversations/c1/search?q=x"} {
				res := rawExchange(t, addr, m, request(m, p, "Authorization: Bearer admin-secret"), nil)
				known := p == "/v1/compactd/conversations/c1/search?q=x" && m == "GET"
				if known {
					if res.status != http.StatusOK {
						t.Errorf("%s %s: %d %s, want 200", m, p, res.status, res.body)
					}
					continue
				}
				// 404/405 from the admin API; /v1/compactd/ is an odd spelling of /v1/compactd
				// (400, or 401 first with tenants on, as the admin token is no client key).
				switch res.status {
				case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusBadRequest, http.StatusUnauthorized:
					if res.status < 404 && p != "/v1/compactd/" {
						t.Errorf("%s %s (tenants=%v): %d %s, want the admin API's 404 or 405", m, p, tenants, res.status, res.body)
					}
				default:
					t.Errorf("%s %s (tenants=%v): %d %s, want 404 or 405", m, p, tenants, res.status, res.body)
				}
			}
		}
		if got := rec.requests(); len(got) != 0 {
			t.Errorf("tenants=%v: %d admin requests reached the upstream, the first %s %s with Authorization %q", tenants, len(got), got[0].Method, got[0].URI, got[0].Header.Get("Authorization"))
		}
	}
}
