package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/bench/workload"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
)

// heldUpstream is an upstream (and summariser) that, once armed, reads the first request it gets
// whole, says so on held and answers only when release is closed: while it waits, the request is
// as far into compactd as it gets, with everything compactd holds for it live. Every other
// request gets a small valid answer at once.
type heldUpstream struct {
	mu      sync.Mutex
	armed   bool
	held    chan struct{}
	release chan struct{}
}

func (u *heldUpstream) arm() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.armed, u.held, u.release = true, make(chan struct{}), make(chan struct{})
}

func (u *heldUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	u.mu.Lock()
	hold := u.armed
	u.armed = false
	held, release := u.held, u.release
	u.mu.Unlock()
	if hold {
		close(held)
		<-release
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/messages":
		_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`)
	case "/v1/messages/count_tokens":
		_, _ = io.WriteString(w, `{"input_tokens":1}`)
	case "/v1/chat/completions":
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	default: // the Responses API, the summariser's too
		_, _ = io.WriteString(w, `{"id":"resp_1","object":"response","status":"completed","model":"m","output":[{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"the summary","annotations":[]}]}],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`)
	}
}

// What a request on a parsed route holds while it is in compactd is within what it reserved of
// the in-flight budget: the budget bounds the bytes requests hold, not only the bytes of their
// bodies. Measured with the request held at the upstream (at the summariser, for the compact
// route) and the heap collected: the bytes live beyond what was live before it, against the
// budget's bytes in use, for a 16 MB agent session in each route's dialect; and, but for the
// compact route, the bytes allocated for it by then (the skim's garbage arrives with the body).
// Chat Completions used to reserve nothing, the compact route held its transcript beside the body
// (2.04× the body live against 1×), and the skims allocated 1.15–1.32× the body against 1×.
func TestBudgetCoversWhatARouteHolds(t *testing.T) {
	const size = 16 << 20
	up := &heldUpstream{}
	ts := httptest.NewServer(up)
	defer ts.Close()
	u, _ := url.Parse(ts.URL)
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := crypto.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := summarizer.New(summarizer.Config{BaseURL: ts.URL + "/v1", API: "responses"})
	if err != nil {
		t.Fatal(err)
	}
	counter := compact.NewCounter(compact.CounterOptions{})
	defer counter.Close()
	s, err := New(Config{Upstream: u, AnthropicUpstream: u, Sealer: ring, Summarizer: sum, Counter: counter,
		MaxInflightBodyBytes: 1 << 30, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context())
	proxy := httptest.NewServer(s)
	defer proxy.Close()
	post := func(path string, body []byte) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, proxy.URL+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-test")
		req.Header.Set("X-Api-Key", "sk-ant-test")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	bodies := map[string]func(int) []byte{
		"/v1/responses":             func(n int) []byte { return workload.Request(n, workload.BodyOptions{}) },
		"/v1/responses/compact":     func(n int) []byte { return workload.Request(n, workload.BodyOptions{}) },
		"/v1/messages":              workload.MessagesRequest,
		"/v1/messages/count_tokens": workload.CountTokensRequest,
		"/v1/chat/completions":      workload.ChatRequest,
	}
	for _, path := range []string{"/v1/responses", "/v1/responses/compact", "/v1/messages", "/v1/messages/count_tokens", "/v1/chat/completions"} {
		t.Run(strings.TrimPrefix(path, "/v1/"), func(t *testing.T) {
			// A small request first: the tokenizer and every lazy cache are loaded before the
			// baseline.
			if status, body := post(path, bodies[path](64<<10)); status != http.StatusOK {
				t.Fatalf("warm-up: %d %.300s", status, body)
			}
			body := bodies[path](size)
			var before, held runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			up.arm()
			done := make(chan string, 1)
			go func() {
				status, b := post(path, body)
				if status != http.StatusOK {
					done <- b
				}
				close(done)
			}()
			select {
			case <-up.held:
			case e := <-done:
				t.Fatalf("answered before the upstream was reached: %.300s", e)
			case <-time.After(2 * time.Minute):
				t.Fatal("the request never reached the upstream")
			}
			runtime.GC()
			runtime.ReadMemStats(&held)
			reserved := s.budget.InUse()
			close(up.release)
			if e, failed := <-done; failed {
				t.Fatalf("the request failed: %.300s", e)
			}
			live := int64(held.HeapAlloc) - int64(before.HeapAlloc)
			var fin runtime.MemStats
			runtime.ReadMemStats(&fin)
			t.Logf("%s, %d-byte body: %.2f× the body live, %.2f× reserved, %.2f× allocated by the hold, %.2f× in all", path, len(body), float64(live)/float64(len(body)), float64(reserved)/float64(len(body)), float64(held.TotalAlloc-before.TotalAlloc)/float64(len(body)), float64(fin.TotalAlloc-before.TotalAlloc)/float64(len(body)))
			slack := int64(len(body)) / 20
			if live > reserved+slack {
				t.Errorf("a request holding %d bytes (%.2f× its body) reserved %d (%.2f×)", live, float64(live)/float64(len(body)), reserved, float64(reserved)/float64(len(body)))
			}
			// The skim's garbage comes with the body, all at once: it is reserved too. (A
			// compaction's comes over its summariser calls, which the collector keeps up with.)
			if alloc := int64(held.TotalAlloc - before.TotalAlloc); path != "/v1/responses/compact" && alloc > reserved+slack {
				t.Errorf("a request that allocated %d bytes (%.2f× its body) by the time it reached the upstream reserved %d (%.2f×)", alloc, float64(alloc)/float64(len(body)), reserved, float64(reserved)/float64(len(body)))
			}
			runtime.KeepAlive(body)
		})
	}
}
