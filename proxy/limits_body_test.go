package proxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/proxy"
)

// Every route: compactd's own and pass-through, on each API.
var bodyRoutes = []struct {
	path      string
	anthropic bool
}{
	{"/v1/responses", false},
	{"/v1/responses/compact", false},
	{"/v1/messages", true},
	{"/v1/messages/count_tokens", true},
	{"/v1/files", false},            // pass-through
	{"/api/generate", false},        // pass-through, outside /v1
	{"/v1/messages/batches", true},  // pass-through to the Anthropic upstream
	{"/v1/uploads/u1/parts", false}, // pass-through
}

// A body that stops arriving gets a 408 in the route's dialect once the body read deadline
// passes, on compactd's routes and on pass-through alike, with a declared length or chunked.
// Before the fix the request was held open for as long as the client kept the connection.
func TestBodyReadTimeout(t *testing.T) {
	rec := newRecorder(t)
	addr := newGateProxy(t, rec, func(c *proxy.Config) { c.BodyReadTimeout = 100 * time.Millisecond })
	for _, rt := range bodyRoutes {
		for _, framing := range []struct {
			name, header, start string
		}{
			{"content-length", "Content-Length: 100000", `{"model":"m",`},
			{"chunked", "Transfer-Encoding: chunked", "d\r\n{\"model\":\"m\",\r\n"},
		} {
			what := "POST " + rt.path + " (" + framing.name + ")"
			// The first bytes of the body, then nothing: the connection stays open, silent.
			res := rawExchange(t, addr, "POST", request("POST", rt.path, "Content-Type: application/json", framing.header),
				strings.NewReader(framing.start))
			if res.status != http.StatusRequestTimeout {
				t.Errorf("%s: %d %s, want 408", what, res.status, res.body)
				continue
			}
			typ, code := wantDialect(t, what, res.body, rt.anthropic)
			if typ != "invalid_request_error" || code != "request_body_timeout" {
				t.Errorf("%s: error %q/%q, want invalid_request_error/request_body_timeout", what, typ, code)
			}
		}
	}
	for _, r := range rec.requests() {
		if r.BodyErr == nil {
			t.Errorf("the upstream received a whole request: %s %s", r.Method, r.URI)
		}
	}
}

// The body read deadline is for reading the request: a streamed response that goes on far
// longer than it is not cut.
func TestBodyReadTimeoutSparesLongStreams(t *testing.T) {
	rec := newRecorder(t)
	rec.sse = 60 * time.Millisecond // five events: the stream outlasts the deadline several times
	addr := newGateProxy(t, rec, func(c *proxy.Config) { c.BodyReadTimeout = 50 * time.Millisecond })
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	res := rawExchange(t, addr, "POST", request("POST", "/v1/chat/completions", "Content-Type: application/json",
		"Content-Length: "+strconv.Itoa(len(body))), strings.NewReader(body))
	if res.status != http.StatusOK || !strings.HasSuffix(string(res.body), "data: [DONE]\n\n") || strings.Count(string(res.body), "data: {") != 5 {
		t.Errorf("streamed response: %d %q, want all five events and [DONE]", res.status, res.body)
	}
}

// A declared Content-Length over the limit is refused with a 413 in the route's dialect before
// anything reads the body, so a client sending Expect: 100-continue never gets 100 Continue
// (before the fix it did, and was invited to upload the whole body). Pass-through included.
func TestExpectContinueOverLimitIs413(t *testing.T) {
	for _, tenants := range []bool{false, true} {
		rec := newRecorder(t)
		addr := newGateProxy(t, rec, func(c *proxy.Config) {
			c.MaxBodyBytes = 1 << 20
			if tenants {
				c.Tenants = testTenants(t)
			}
		})
		for _, rt := range bodyRoutes {
			what := "POST " + rt.path
			headers := []string{"Content-Type: application/json", "Content-Length: 2000000000", "Expect: 100-continue"}
			if tenants {
				what += " (tenants)"
				headers = append(headers, "Authorization: Bearer cpd-acme-1")
			}
			status, body := firstResponse(t, addr, request("POST", rt.path, headers...))
			if status != http.StatusRequestEntityTooLarge {
				t.Errorf("%s: first response %d %s, want 413 (and never 100 Continue)", what, status, body)
				continue
			}
			typ, code := wantDialect(t, what, body, rt.anthropic)
			if !rt.anthropic && (typ != "invalid_request_error" || code != "request_too_large") || rt.anthropic && typ != "request_too_large" {
				t.Errorf("%s: error %q/%q, want request_too_large", what, typ, code)
			}
		}
		if got := rec.requests(); len(got) != 0 {
			t.Errorf("tenants=%v: %d oversized requests reached the upstream", tenants, len(got))
		}
	}

	// Within the limit, Expect: 100-continue works as before on pass-through.
	rec := newRecorder(t)
	addr := newGateProxy(t, rec, func(c *proxy.Config) { c.MaxBodyBytes = 1 << 20 })
	res := rawExchange(t, addr, "POST", request("POST", "/v1/files", "Content-Length: 2", "Expect: 100-continue"), strings.NewReader("{}"))
	if len(res.informational) != 1 || res.informational[0] != 100 || res.status != 200 || len(rec.requests()) != 1 {
		t.Errorf("small body with Expect: 1xx %v, final %d, upstream %d requests; want 100, 200, 1", res.informational, res.status, len(rec.requests()))
	}
	// compactd answers the expectation itself; the upstream is not asked for a 100 of its own,
	// which the transport would wait for and the ReverseProxy relay as a second 100 Continue.
	for _, got := range rec.requests() {
		if e := got.Header.Get("Expect"); e != "" {
			t.Errorf("the upstream was sent Expect: %s", e)
		}
	}
}

// A chunked body past the limit is cut there, pass-through included, with a 413 in dialect.
// Before the fix pass-through bodies had no limit at all.
func TestChunkedBodyOverLimitIs413(t *testing.T) {
	rec := newRecorder(t)
	const limit = 64 << 10
	addr := newGateProxy(t, rec, func(c *proxy.Config) { c.MaxBodyBytes = limit })
	for _, rt := range bodyRoutes {
		what := "POST " + rt.path + " (chunked)"
		chunk := strings.Repeat("a", 4096)
		var b strings.Builder
		for range limit/len(chunk) + 2 {
			b.WriteString(strconv.FormatInt(int64(len(chunk)), 16) + "\r\n" + chunk + "\r\n")
		}
		b.WriteString("0\r\n\r\n")
		res := rawExchange(t, addr, "POST", request("POST", rt.path, "Content-Type: application/json", "Transfer-Encoding: chunked"),
			strings.NewReader(b.String()))
		if res.status != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: %d %s, want 413", what, res.status, res.body)
			continue
		}
		wantDialect(t, what, res.body, rt.anthropic)
	}
	for _, r := range rec.requests() {
		if r.BodyErr == nil {
			t.Errorf("the upstream received a whole oversized request: %s %s (%d bytes)", r.Method, r.URI, len(r.Body))
		}
	}
}

// firstResponse sends head with no body and returns the first response on the connection,
// informational or final.
func firstResponse(t *testing.T, addr, head string) (int, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // a safety net, not an assertion
	if _, err := io.WriteString(c, head+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s: %v", head, err)
	}
	if resp.StatusCode < 200 {
		return resp.StatusCode, nil
	}
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}
