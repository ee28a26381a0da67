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

	"github.com/compactd/compactd/proxy"
)

// bufferedRoutes are the routes whose bodies compactd reads whole: the ones the budget counts.
var bufferedRoutes = []struct {
	path      string
	anthropic bool
	forwards  bool // a valid small body is forwarded to the upstream
}{
	{"/v1/responses", false, true},
	{"/v1/responses/compact", false, false}, // summarises (and the test summariser fails)
	{"/v1/messages", true, true},
	{"/v1/messages/count_tokens", true, true},
	{"/v1/chat/completions", false, true}, // reserved nothing before issue 22
}

// budgetBody is a valid request for path, padded with an unknown field to about size bytes.
func budgetBody(path string, size int) string {
	head := `{"model":"m","input":"hi","pad":"`
	if path == "/v1/chat/completions" {
		head = `{"model":"m","messages":[{"role":"user","content":"hi"}],"pad":"`
	}
	if strings.HasPrefix(path, "/v1/messages") {
		head = `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"pad":"`
	}
	return head + strings.Repeat("x", max(0, size-len(head)-2)) + `"}`
}

func chunked(s string) string { return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(s), s) }

const testBudget = 64 << 10

// Past the in-flight body budget a request on a buffered route is answered 503 with Retry-After
// in its route's dialect and nothing reaches the upstream, with a declared length (refused before
// reading) and chunked (refused once the bytes read pass the budget). Under it, requests are
// served; pass-through bodies are streamed, not counted, so a larger one is still forwarded.
func TestInflightBudgetRefusesInDialect(t *testing.T) {
	rec := newRecorder(t)
	addr := newGateProxy(t, rec, func(c *proxy.Config) { c.MaxInflightBodyBytes = testBudget })
	for _, rt := range bufferedRoutes {
		big := budgetBody(rt.path, 2*testBudget)
		for _, f := range []struct{ name, header, body string }{
			{"content-length", "Content-Length: " + strconv.Itoa(len(big)), big},
			// Refused instead of the 100 Continue that would invite the upload.
			{"expect-continue", "Content-Length: " + strconv.Itoa(len(big)) + "\r\nExpect: 100-continue", big},
			{"chunked", "Transfer-Encoding: chunked", chunked(big)},
		} {
			what := "POST " + rt.path + " (" + f.name + ")"
			rec.reset()
			res := rawExchange(t, addr, "POST", request("POST", rt.path, "Content-Type: application/json", f.header), strings.NewReader(f.body))
			if res.status != http.StatusServiceUnavailable {
				t.Errorf("%s past the budget: %d %s, want 503", what, res.status, res.body)
				continue
			}
			if len(res.informational) != 0 {
				t.Errorf("%s: %v before the refusal, want none", what, res.informational)
			}
			if res.header.Get("Retry-After") == "" {
				t.Errorf("%s: no Retry-After", what)
			}
			typ, code := wantDialect(t, what, res.body, rt.anthropic)
			if rt.anthropic && typ != "overloaded_error" || !rt.anthropic && (typ != "server_error" || code != "server_overloaded") {
				t.Errorf("%s: error %q/%q", what, typ, code)
			}
			if n := len(rec.requests()); n != 0 {
				t.Errorf("%s: the upstream received %d requests, want none", what, n)
			}
		}
		// Under the budget, three in a row whose sum is past it: each one's share was released.
		small := budgetBody(rt.path, testBudget/2)
		if rt.path == "/v1/responses/compact" {
			small = budgetBody(rt.path, testBudget/8) // compacting, it reserves three times its body
		}
		for i := range 3 {
			rec.reset()
			res := rawExchange(t, addr, "POST", request("POST", rt.path, "Content-Type: application/json", "Content-Length: "+strconv.Itoa(len(small))), strings.NewReader(small))
			if res.status == http.StatusServiceUnavailable {
				t.Errorf("POST %s #%d under the budget: 503 %s", rt.path, i, res.body)
			}
			if rt.forwards && (res.status != http.StatusOK || len(rec.requests()) != 1) {
				t.Errorf("POST %s #%d under the budget: %d, %d upstream requests; want 200, 1", rt.path, i, res.status, len(rec.requests()))
			}
		}
	}
	rec.reset()
	big := strings.Repeat("x", 2*testBudget)
	res := rawExchange(t, addr, "POST", request("POST", "/v1/files", "Content-Length: "+strconv.Itoa(len(big))), strings.NewReader(big))
	if res.status != http.StatusOK || len(rec.requests()) != 1 || len(rec.requests()[0].Body) != len(big) {
		t.Errorf("pass-through body past the budget: %d, want it forwarded whole", res.status)
	}
}

// The budget is shared: while one request holds most of it (its headers in, its body still
// arriving), another that does not fit is refused; once the first is done, the second fits.
func TestInflightBudgetIsShared(t *testing.T) {
	rec := newRecorder(t)
	addr := newGateProxy(t, rec, func(c *proxy.Config) { c.MaxInflightBodyBytes = testBudget })
	body := budgetBody("/v1/responses", testBudget*3/4)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // a safety net, not a timing assertion
	head := request("POST", "/v1/responses", "Content-Type: application/json", "Content-Length: "+strconv.Itoa(len(body)), "Expect: 100-continue")
	if _, err := io.WriteString(c, head+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	// 100 Continue comes on the handler's first read of the body, after the gate reserved it.
	if resp, err := http.ReadResponse(br, &http.Request{Method: "POST"}); err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("first request: %v %v, want 100 Continue", resp, err)
	}

	second := budgetBody("/v1/responses", testBudget/2)
	send := func() rawResponse {
		return rawExchange(t, addr, "POST", request("POST", "/v1/responses", "Content-Type: application/json", "Content-Length: "+strconv.Itoa(len(second))), strings.NewReader(second))
	}
	if res := send(); res.status != http.StatusServiceUnavailable {
		t.Errorf("second request while the first holds the budget: %d %s, want 503", res.status, res.body)
	}

	if _, err := io.WriteString(c, body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: "POST"})
	for err == nil && resp.StatusCode == http.StatusContinue {
		resp, err = http.ReadResponse(br, &http.Request{Method: "POST"}) // the upstream's own, relayed
	}
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v %v, want 200", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if res := send(); res.status != http.StatusOK {
		t.Errorf("second request after the first finished: %d %s, want 200", res.status, res.body)
	}
}

// SSE is flushed event by event: the client reads each event while the upstream is still
// holding the stream open, on the pass-through route and on both of compactd's turn routes. The
// upstream sends its next event only once the client has read the previous one, so a proxy that
// held events back would never deliver the first (the connection's safety deadline fails it).
func TestSSEFlushedEventByEvent(t *testing.T) {
	const events = 3
	next, stop := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range events {
			fmt.Fprintf(w, "event: e\ndata: {\"type\":\"e\",\"n\":%d}\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next: // the client has this event: send the next
			case <-r.Context().Done():
				return
			case <-stop:
				return
			}
		}
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(stop) }) // runs first: a held-back stream must not hang up.Close
	rec := &recorder{url: up.URL}
	addr := newGateProxy(t, rec, nil)
	u, _ := url.Parse("http://" + addr)
	for _, rt := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`},
		{"/v1/responses", `{"model":"m","stream":true,"input":"hi"}`},
		{"/v1/messages", `{"model":"m","stream":true,"max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(strings.ReplaceAll(rt.path[1:], "/", "_"), func(t *testing.T) {
			c, err := net.Dial("tcp", u.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // a safety net, not a timing assertion
			head := request("POST", rt.path, "Content-Type: application/json", "Content-Length: "+strconv.Itoa(len(rt.body)))
			if _, err := io.WriteString(c, head+"\r\n\r\n"+rt.body); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "POST"})
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			for i := range events {
				want := fmt.Sprintf(`"n":%d`, i)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						t.Fatalf("event %d: %v (before it arrived)", i, err)
					}
					if strings.HasPrefix(line, "data:") && strings.Contains(line, want) {
						break
					}
				}
				select {
				case next <- struct{}{}:
				case <-time.After(30 * time.Second): // a safety net, not a timing assertion
					t.Fatalf("event %d: the upstream stopped waiting", i)
				}
			}
		})
	}
}

// A request that would reserve more than the whole budget (a compact body over a third of it:
// compacting, the route reserves three times its body) reserves all of it and is served alone,
// rather than refused "retry shortly" forever.
func TestInflightBudgetLargestCompactRunsAlone(t *testing.T) {
	rec := newRecorder(t)
	addr := newGateProxy(t, rec, func(c *proxy.Config) { c.MaxInflightBodyBytes = testBudget })
	body := budgetBody("/v1/responses/compact", testBudget*3/4)
	for _, framing := range []string{"Content-Length: " + strconv.Itoa(len(body)), "Transfer-Encoding: chunked"} {
		b := body
		if strings.HasPrefix(framing, "Transfer") {
			b = chunked(body)
		}
		res := rawExchange(t, addr, "POST", request("POST", "/v1/responses/compact", "Content-Type: application/json", framing), strings.NewReader(b))
		if res.status == http.StatusServiceUnavailable {
			t.Errorf("%s: a compact body of three quarters of the budget, alone: 503 %s", framing, res.body)
		}
	}
}
