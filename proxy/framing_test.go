package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// rawConn dials the harness's proxy: raw HTTP/1.1 on loopback, for requests net/http's client
// would not send.
func rawConn(t *testing.T, h *harness) (net.Conn, *bufio.Reader) {
	t.Helper()
	u, _ := url.Parse(h.proxyURL)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute)) // a hang guard, not a timing assertion
	return c, bufio.NewReader(c)
}

// upstreamSaw reports whether the fake upstream received a request for path.
func upstreamSaw(h *harness, path string) bool {
	for _, r := range h.fake.Requests() {
		if r.Path == path {
			return true
		}
	}
	return false
}

// A request with both Content-Length and Transfer-Encoding: chunked (RFC 9112 §6.1) is how a
// request is smuggled past a front proxy that reads the Content-Length: to compactd the chunked
// body ends early and the rest of the bytes are a second request. net/http drops the
// Content-Length of such a request before any handler runs, so compactd cannot tell it from a
// plain chunked one; it closes the connection after answering every chunked HTTP/1 request, as
// the RFC requires for the smuggling case. The hidden request is never answered or forwarded.
// Requests with a Content-Length alone keep the connection.
func TestChunkedRequestClosesConnection(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, nil)
	const hidden = "GET /v1/hidden-smuggled HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-test\r\n\r\n"
	for _, tc := range []struct {
		name, path string
		withLength bool // a Content-Length beside Transfer-Encoding
	}{
		{"responses, both headers", "/v1/responses", true},
		{"messages, both headers", "/v1/messages", true},
		{"chat, both headers", "/v1/chat/completions", true},
		{"pass-through, both headers", "/v1/files", true},
		{"pass-through, chunked alone", "/v1/files", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := rawConn(t, h)
			body := "0\r\n\r\n" + hidden
			head := "POST " + tc.path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-test\r\nContent-Type: application/json\r\n"
			if tc.withLength {
				head += fmt.Sprintf("Content-Length: %d\r\n", len(body))
			}
			if _, err := io.WriteString(c, head+"Transfer-Encoding: chunked\r\n\r\n"+body); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if !resp.Close { // ReadResponse takes "Connection: close" out of the header into Close
				t.Errorf("response %d without Connection: close", resp.StatusCode)
			}
			if second, err := http.ReadResponse(br, nil); err == nil {
				second.Body.Close()
				t.Errorf("the request hidden after the chunked body was answered: %d", second.StatusCode)
			}
			if upstreamSaw(h, "/v1/hidden-smuggled") {
				t.Error("the request hidden after the chunked body reached the upstream")
			}
		})
	}
	// The control: a Content-Length alone keeps the connection for the next request.
	c, br := rawConn(t, h)
	for i := range 2 {
		if _, err := io.WriteString(c, "POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on a kept connection: %v", i+1, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Close {
			t.Errorf("request %d: a Content-Length request closed the connection", i+1)
		}
	}
}

// Methods compactd does not proxy are refused in the path's dialect, never forwarded: CONNECT
// and TRACE with a 405 naming the methods it serves, anything else (PRI, WebDAV, made-up
// methods) with a 501. The methods LLM APIs use are forwarded as before.
func TestUnproxiedMethodsRefused(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, nil)
	for _, tc := range []struct {
		method, target string
		status         int
		anthropic      bool
	}{
		{"TRACE", "/v1/responses", http.StatusMethodNotAllowed, false},
		{"TRACE", "/v1/files", http.StatusMethodNotAllowed, false},
		{"TRACE", "/v1/messages", http.StatusMethodNotAllowed, true},
		{"CONNECT", "api.openai.com:443", http.StatusMethodNotAllowed, false},
		{"PRI", "*", http.StatusNotImplemented, false},
		{"PROPFIND", "/v1/files", http.StatusNotImplemented, false},
		{"PURGE", "/v1/messages/batches", http.StatusNotImplemented, true},
		{"FOO", "/v1/models", http.StatusNotImplemented, false},
		{"get", "/v1/models", http.StatusNotImplemented, false}, // methods are case-sensitive
	} {
		c, br := rawConn(t, h)
		proto := "HTTP/1.1"
		if tc.method == "PRI" {
			proto = "HTTP/2.0"
		}
		if _, err := io.WriteString(c, tc.method+" "+tc.target+" "+proto+"\r\nHost: x\r\nAuthorization: Bearer sk-test\r\nContent-Length: 0\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Errorf("%s %s: %v", tc.method, tc.target, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		msg := gjson.GetBytes(b, "error.message").Str
		envelope := gjson.GetBytes(b, "error.type").Exists() && gjson.GetBytes(b, "type").Str == map[bool]string{true: "error", false: ""}[tc.anthropic]
		if resp.StatusCode != tc.status || !envelope || !strings.Contains(msg, "POST") {
			t.Errorf("%s %s: %d %s, want %d in the %s envelope naming the methods served", tc.method, tc.target, resp.StatusCode, b, tc.status, map[bool]string{true: "Anthropic", false: "OpenAI"}[tc.anthropic])
		}
		if tc.status == http.StatusMethodNotAllowed && resp.Header.Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", tc.method, tc.target)
		}
	}
	for _, r := range h.fake.Requests() {
		t.Errorf("forwarded: %s %s", r.Method, r.Path)
	}
	// The methods LLM APIs use still pass through.
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		req, _ := http.NewRequest(m, h.proxyURL+"/v1/some/upstream/path", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	seen := map[string]bool{}
	for _, r := range h.fake.Requests() {
		seen[r.Method] = true
	}
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		if !seen[m] {
			t.Errorf("%s was not forwarded", m)
		}
	}
}

// A client that stops reading a stream does not hold it (and the upstream call) forever: each
// write to the client must complete within Config.StreamWriteTimeout, or compactd drops the
// connection and the upstream request is cancelled. Every route that streams: compactd's
// rewriters (Responses, Messages, Chat) and the pass-through.
func TestStreamWriteTimeoutCancelsUpstream(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
	}{
		{"responses", "/v1/responses", `{"model":"gpt-test","input":"hi","stream":true}`},
		{"messages", "/v1/messages", `{"model":"claude-fake","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"stream":true}`},
		{"chat", "/v1/chat/completions", `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}],"stream":true}`},
		{"pass-through", "/v1/some/stream", `{"stream":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cancelled := make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(cancelled)
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				pad := strings.Repeat("x", 32<<10)
				events := map[string]string{
					"responses": sseEventString("response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":1,"output_index":0,"item_id":"msg_up","content_index":0,"delta":"`+pad+`"}`),
					"messages":  sseEventString("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+pad+`"}}`),
					"chat":      "data: " + `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[{"index":0,"delta":{"content":"` + pad + `"}}]}` + "\n\n",
				}
				ev, ok := events[tc.name]
				if !ok {
					ev = "data: " + pad + "\n\n"
				}
				if tc.name == "responses" {
					_, _ = io.WriteString(w, sseEventString("response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_up","object":"response","status":"in_progress","output":[]}}`))
				}
				if tc.name == "messages" {
					_, _ = io.WriteString(w, sseEventString("message_start", `{"type":"message_start","message":{"id":"msg_up","type":"message","role":"assistant","model":"claude-fake","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}`))
					_, _ = io.WriteString(w, sseEventString("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
				}
				rc := http.NewResponseController(w)
				for r.Context().Err() == nil { // an endless stream, until compactd hangs up
					if _, err := io.WriteString(w, ev); err != nil {
						return
					}
					if rc.Flush() != nil {
						return
					}
				}
			}))
			t.Cleanup(up.Close)
			h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) {
				u, _ := url.Parse(up.URL)
				c.Upstream, c.AnthropicUpstream = u, u
				c.StreamWriteTimeout = 200 * time.Millisecond
			})
			c, _ := rawConn(t, h)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(4 << 10) // fill up soon
			}
			req := "POST " + tc.path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-test\r\nX-Api-Key: sk-ant\r\nAnthropic-Version: 2023-06-01\r\n" +
				"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(tc.body)) + "\r\n\r\n" + tc.body
			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			// The client now reads nothing.
			select {
			case <-cancelled:
			case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
				t.Fatal("the upstream stream was never cancelled although the client stopped reading")
			}
		})
	}
}

func sseEventString(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
