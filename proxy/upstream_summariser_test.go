package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// summariserServer is an OpenAI-compatible summariser that answers every call with handle, and
// counts the calls.
func summariserServer(t *testing.T, handle http.HandlerFunc) (*httptest.Server, *int) {
	t.Helper()
	n := new(int)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*n++
		_, _ = io.Copy(io.Discard, r.Body)
		handle(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts, n
}

func resilientSummariser(t *testing.T, url string, perCall time.Duration, rc summarizer.ResilienceConfig) summarizer.Summarizer {
	t.Helper()
	sum, err := summarizer.New(summarizer.Config{BaseURL: url + "/v1", Timeout: perCall})
	if err != nil {
		t.Fatal(err)
	}
	return summarizer.NewResilient(sum, rc)
}

func readAnswer(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A summariser that pushes back (429, or 529 overloaded, with Retry-After) is passed on to the
// client with the wait: 429 + Retry-After in OpenAI's envelope; 429 rate_limit_error or 529
// overloaded_error + retry-after in Anthropic's. While the circuit breaker it opened is open,
// the rest of the cooldown is the wait, and the summariser is not called.
func TestUpstreamSummariserPushbackReachesClient(t *testing.T) {
	const cooldown = 30 * time.Second
	type want struct {
		status   int
		errType  string // error.type (Anthropic) / error.code (OpenAI)
		retryMax int    // Retry-After must be 1..retryMax seconds
	}
	tests := []struct {
		name      string
		status    int
		body      string
		responses want
		messages  want
	}{
		{name: "429", status: 429, body: `{"error":{"message":"slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			responses: want{429, "rate_limit_exceeded", 7}, messages: want{429, "rate_limit_error", 7}},
		{name: "529 overloaded", status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			responses: want{502, "compaction_failed", 7}, messages: want{529, "overloaded_error", 7}},
	}
	for _, tt := range tests {
		for _, wire := range []string{"responses", "messages"} {
			for _, breaker := range []bool{false, true} {
				name := tt.name + "/" + wire
				if breaker {
					name += "/breaker open"
				}
				t.Run(name, func(t *testing.T) {
					ts, calls := summariserServer(t, func(w http.ResponseWriter, r *http.Request) {
						w.Header().Set("Content-Type", "application/json")
						w.Header().Set("Retry-After", "7")
						w.WriteHeader(tt.status)
						_, _ = io.WriteString(w, tt.body)
					})
					rc := summarizer.ResilienceConfig{MaxAttempts: 1, BreakerFailures: -1}
					if breaker {
						rc.BreakerFailures, rc.BreakerCooldown = 1, cooldown
					}
					h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) {
						c.AnthropicUpstream = c.Upstream
						c.RetainTokens = 1000
						c.Summarizer = resilientSummariser(t, ts.URL, time.Minute, rc)
					})
					w := tt.responses
					if wire == "messages" {
						w = tt.messages
					}
					turns := 1
					if breaker {
						turns = 2 // the first opens the breaker, the second meets it open
						w.retryMax = int(cooldown / time.Second)
					}
					for i := 0; i < turns; i++ {
						resp := brokenTurn(t, h, wire, false)
						body := readAnswer(t, resp)
						got := gjson.GetBytes(body, "error.code").Str
						if wire == "messages" {
							got = gjson.GetBytes(body, "error.type").Str
						}
						wi := w
						if i < turns-1 {
							wi = tt.responses
							if wire == "messages" {
								wi = tt.messages
							}
						}
						if resp.StatusCode != wi.status || got != wi.errType {
							t.Fatalf("turn %d: %d %s, want %d %s: %s", i+1, resp.StatusCode, got, wi.status, wi.errType, body)
						}
						ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
						if err != nil || ra < 1 || ra > wi.retryMax {
							t.Fatalf("turn %d: Retry-After %q, want 1..%d", i+1, resp.Header.Get("Retry-After"), wi.retryMax)
						}
					}
					if *calls != 1 {
						t.Errorf("summariser called %d times, want 1", *calls)
					}
					if n := len(h.upstream(dialect.Responses)) + len(h.upstream(dialect.Messages)); n != 0 {
						t.Errorf("a failed compaction still called the upstream %d times", n)
					}
				})
			}
		}
	}
}

// A summariser that never answers fails the turn at the compaction deadline — not after every
// attempt's per-call timeout — with the failure policy applied: fail is a 504 in the route's
// dialect that names --compaction-timeout; extractive still compacts; passthrough forwards the
// turn uncompacted.
func TestUpstreamCompactionDeadline(t *testing.T) {
	for _, wire := range []string{"responses", "messages"} {
		for _, policy := range []proxy.FailurePolicy{proxy.PolicyFail, proxy.PolicyExtractive, proxy.PolicyPassthrough} {
			t.Run(wire+"/"+string(policy), func(t *testing.T) {
				release := make(chan struct{})
				ts, _ := summariserServer(t, func(w http.ResponseWriter, r *http.Request) {
					select { // hang until compactd gives up on the call (or the test ends)
					case <-r.Context().Done():
					case <-release:
					}
				})
				t.Cleanup(func() { close(release) }) // runs before ts.Close
				h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) {
					c.AnthropicUpstream = c.Upstream
					c.RetainTokens = 1000
					c.CompactionTimeout = 50 * time.Millisecond
					c.FailurePolicies = proxy.FailurePolicies{dialect.Responses: policy, dialect.Messages: policy}
					// Two attempts of 5s each: without the deadline the turn would fail after
					// both, as a 502/529 compaction failure.
					c.Summarizer = resilientSummariser(t, ts.URL, 5*time.Second, summarizer.ResilienceConfig{MaxAttempts: 2, BreakerFailures: -1})
				})
				resp := brokenTurn(t, h, wire, false)
				body := readAnswer(t, resp)
				arr := "output"
				if wire == "messages" {
					arr = "content"
				}
				switch policy {
				case proxy.PolicyFail:
					if resp.StatusCode != http.StatusGatewayTimeout {
						t.Fatalf("status %d, want 504: %s", resp.StatusCode, body)
					}
					msg := checkTimeoutEnvelope(t, wire, body)
					if !strings.Contains(msg, "--compaction-timeout") || !strings.Contains(msg, "50ms") {
						t.Errorf("message does not name the deadline: %q", msg)
					}
				case proxy.PolicyExtractive:
					if resp.StatusCode != 200 || gjson.GetBytes(body, arr+".0.type").Str != "compaction" {
						t.Fatalf("extractive: status %d, %s[0] %s", resp.StatusCode, arr, gjson.GetBytes(body, arr+".0.type"))
					}
				case proxy.PolicyPassthrough:
					if resp.StatusCode != 200 || gjson.GetBytes(body, arr+".0.type").Str == "compaction" || resp.Header.Get("X-Compactd-Warning") == "" {
						t.Fatalf("passthrough: status %d, %s[0] %s, warning %q", resp.StatusCode, arr, gjson.GetBytes(body, arr+".0.type"), resp.Header.Get("X-Compactd-Warning"))
					}
				}
			})
		}
	}
}

func checkTimeoutEnvelope(t *testing.T, wire string, body []byte) string {
	t.Helper()
	if wire == "messages" {
		if gjson.GetBytes(body, "type").Str != "error" || gjson.GetBytes(body, "error.type").Str != "timeout_error" ||
			gjson.GetBytes(body, "error.details.error_code").Str != "compaction_timeout" {
			t.Fatalf("not an Anthropic timeout_error: %s", body)
		}
		return gjson.GetBytes(body, "error.message").Str
	}
	if gjson.GetBytes(body, "error.type").Str != "server_error" || gjson.GetBytes(body, "error.code").Str != "compaction_timeout" {
		t.Fatalf("not an OpenAI compaction_timeout: %s", body)
	}
	return gjson.GetBytes(body, "error.message").Str
}
