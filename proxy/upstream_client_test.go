package proxy_test

import (
	"bytes"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// The turns of an http:// upstream go through compactd's own client (internal/h1): the round
// trip runs on the request's goroutine, so no upstream connection, idle or busy, has goroutines
// of its own, where net/http's Transport keeps a reader and a writer for each. With the Transport
// (--upstream-client go) the upstream connections' goroutines are there, which this test tells.
func TestTurnsUseCompactdsClient(t *testing.T) {
	for _, tc := range []struct {
		name      string
		transport func() http.RoundTripper // nil: the default
		own       bool
	}{
		{"default", nil, true},
		{"go", func() http.RoundTripper { return proxy.DefaultTransport() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) {
				if tc.transport != nil {
					c.Transport = tc.transport()
				}
			})
			client := &http.Transport{}
			for _, rq := range []struct{ path, body string }{
				{"/v1/responses", `{"model":"gpt-5.5","input":"hello"}`},
				{"/v1/responses", `{"model":"gpt-5.5","input":"hello","stream":true}`},
				{"/v1/chat/completions", `{"model":"gpt-5.5","messages":[{"role":"user","content":"hello"}]}`},
				{"/v1/models", ""},
			} {
				method := http.MethodPost
				if rq.body == "" {
					method = http.MethodGet
				}
				req, _ := http.NewRequest(method, h.proxyURL+rq.path, bytes.NewReader([]byte(rq.body)))
				req.Header.Set("Authorization", "Bearer sk-test")
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("%s: %d %s", rq.path, resp.StatusCode, b)
				}
			}
			client.CloseIdleConnections() // the test client's own connection goroutines end
			// compactd's client: none left once the test client's are gone (10 s: a guard against a
			// hang). net/http's Transport: its idle upstream connections keep theirs (1 s is long
			// enough for the test client's to have ended).
			wait := time.Second
			if tc.own {
				wait = 10 * time.Second
			}
			n := connGoroutines()
			for end := time.Now().Add(wait); n > 0 && time.Now().Before(end); n = connGoroutines() {
				time.Sleep(10 * time.Millisecond)
			}
			if tc.own && n > 0 {
				t.Fatalf("%d goroutines of upstream connections: the turns went through net/http's Transport", n)
			}
			if !tc.own && n == 0 {
				t.Fatal("no goroutines of upstream connections with net/http's Transport: this test cannot tell the clients apart")
			}
		})
	}
}

// connGoroutines counts the goroutines net/http's Transport runs for its connections.
func connGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "net/http.(*persistConn).readLoop(")
}
