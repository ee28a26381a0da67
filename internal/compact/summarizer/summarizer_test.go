package summarizer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const firstLine = "You are compacting a conversation between a user and an AI coding agent so the agent can continue it in a fresh context window."

var apis = []string{APIResponses, APIChat}

func mustNew(t testing.TB, cfg Config) Summarizer {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func wrap(entries ...string) string {
	return "<conversation>\n" + strings.Join(entries, "\n\n") + "\n</conversation>"
}

func TestSummarizeRequestAndResult(t *testing.T) {
	entries := []string{"[user] fix the failing test in ./pkg/x", "[tool output] --- FAIL: TestParse (0.00s)\n    x_test.go:12: got 3, want 4"}
	usage := Usage{InputTokens: 1200, OutputTokens: 250, TotalTokens: 1450, CachedTokens: 300, ReasoningTokens: 40}
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			f := newFake(t, func(_ int, c call, w http.ResponseWriter, _ *http.Request) {
				reply(w, c, "served-model-2026", "## Goal\nFix TestParse.", usage)
			})
			cfg := f.config(api)
			cfg.APIKey = "sk-test"
			cfg.MaxOutputTokens = 777
			res, err := mustNew(t, cfg).Summarize(context.Background(), Request{Model: "req-model", Entries: entries})
			if err != nil {
				t.Fatalf("Summarize: %v", err)
			}
			calls := f.recorded()
			if len(calls) != 1 {
				t.Fatalf("got %d calls, want 1", len(calls))
			}
			c := calls[0]
			wantPath := map[string]string{APIResponses: "/v1/responses", APIChat: "/v1/chat/completions"}[api]
			if c.Path != wantPath {
				t.Errorf("path = %q, want %q", c.Path, wantPath)
			}
			if got := gjson.GetBytes(c.Body, "model").String(); got != "req-model" {
				t.Errorf("model = %q, want req-model", got)
			}
			if got, _, _ := strings.Cut(c.instructions(), "\n"); got != firstLine {
				t.Errorf("prompt first line = %q", got)
			}
			if c.instructions() != DefaultPrompt {
				t.Errorf("prompt is not DefaultPrompt")
			}
			if got := c.input(); got != wrap(entries...) {
				t.Errorf("user message = %q, want %q", got, wrap(entries...))
			}
			switch api {
			case APIResponses:
				if st := gjson.GetBytes(c.Body, "store"); !st.Exists() || st.Type != gjson.False {
					t.Errorf("store = %s, want false", st.Raw)
				}
				if got := gjson.GetBytes(c.Body, "max_output_tokens").Int(); got != 777 {
					t.Errorf("max_output_tokens = %d, want 777", got)
				}
				if got := gjson.GetBytes(c.Body, "input.#").Int(); got != 1 {
					t.Errorf("input items = %d, want 1", got)
				}
				if got := gjson.GetBytes(c.Body, "input.0.role").String(); got != "user" {
					t.Errorf("input role = %q, want user", got)
				}
			case APIChat:
				if got := gjson.GetBytes(c.Body, "max_completion_tokens").Int(); got != 777 {
					t.Errorf("max_completion_tokens = %d, want 777", got)
				}
				roles := gjson.GetBytes(c.Body, "messages.#.role").String()
				if roles != `["system","user"]` {
					t.Errorf("roles = %s, want system, user", roles)
				}
			}
			if res.Summary != "## Goal\nFix TestParse." || res.Model != "served-model-2026" || res.Calls != 1 || res.Usage != usage {
				t.Errorf("result = %+v", res)
			}
		})
	}
}

func TestSummarizeCredentials(t *testing.T) {
	// Ambient SDK configuration must be ignored: it would replace forwarded credentials or
	// send them elsewhere.
	t.Setenv("OPENAI_API_KEY", "sk-env")
	t.Setenv("OPENAI_BASE_URL", "http://192.0.2.1/v1")
	t.Setenv("OPENAI_ORG_ID", "org-env")

	caller := http.Header{}
	caller.Set("Authorization", "Bearer sk-caller")
	caller.Set("api-key", "azure-caller")
	caller.Set("OpenAI-Organization", "org-caller")
	caller.Set("OpenAI-Project", "proj-caller")
	caller.Set("X-Unrelated", "do-not-forward")
	cases := []struct {
		name   string
		apiKey string
		header http.Header
		want   map[string]string // header -> value ("" = absent)
	}{
		{"configured key wins and nothing is forwarded", "sk-config", caller, map[string]string{
			"Authorization": "Bearer sk-config", "Api-Key": "", "OpenAI-Organization": "", "OpenAI-Project": "", "X-Unrelated": ""}},
		{"caller credentials forwarded", "", caller, map[string]string{
			"Authorization": "Bearer sk-caller", "Api-Key": "azure-caller", "OpenAI-Organization": "org-caller", "OpenAI-Project": "proj-caller", "X-Unrelated": ""}},
		{"no credentials at all", "", nil, map[string]string{
			"Authorization": "", "Api-Key": "", "OpenAI-Organization": ""}},
	}
	for _, api := range apis {
		for _, tc := range cases {
			t.Run(api+"/"+tc.name, func(t *testing.T) {
				f := newFake(t, func(_ int, c call, w http.ResponseWriter, _ *http.Request) {
					reply(w, c, "m", "summary", Usage{})
				})
				cfg := f.config(api)
				cfg.APIKey = tc.apiKey
				_, err := mustNew(t, cfg).Summarize(context.Background(), Request{
					Model: "m", Entries: []string{"[user] hi"}, Auth: Auth{Header: tc.header}})
				if err != nil {
					t.Fatalf("Summarize: %v", err)
				}
				h := f.recorded()[0].Header
				for k, want := range tc.want {
					if got := h.Get(k); got != want {
						t.Errorf("%s = %q, want %q", k, got, want)
					}
				}
			})
		}
	}
}

func TestSummarizeModelChoice(t *testing.T) {
	cases := []struct {
		name, cfgModel, reqModel, want string
	}{
		{"config overrides request", "cfg-model", "req-model", "cfg-model"},
		{"request model by default", "", "req-model", "req-model"},
		{"config alone", "cfg-model", "", "cfg-model"},
	}
	for _, api := range apis {
		for _, tc := range cases {
			t.Run(api+"/"+tc.name, func(t *testing.T) {
				f := newFake(t, func(_ int, c call, w http.ResponseWriter, _ *http.Request) {
					reply(w, c, "", "summary", Usage{})
				})
				cfg := f.config(api)
				cfg.Model = tc.cfgModel
				res, err := mustNew(t, cfg).Summarize(context.Background(), Request{Model: tc.reqModel, Entries: []string{"[user] hi"}})
				if err != nil {
					t.Fatalf("Summarize: %v", err)
				}
				if got := gjson.GetBytes(f.recorded()[0].Body, "model").String(); got != tc.want {
					t.Errorf("sent model = %q, want %q", got, tc.want)
				}
				// The fake reports no model, so the result names the requested one.
				if res.Model != tc.want {
					t.Errorf("result model = %q, want %q", res.Model, tc.want)
				}
			})
		}
	}
}

func TestSummarizeRejectsBeforeCalling(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name   string
		ctx    context.Context
		req    Request
		target error
	}{
		{"no model", context.Background(), Request{Entries: []string{"[user] hi"}}, ErrUnavailable},
		{"no entries", context.Background(), Request{Model: "m"}, ErrNothingToSummarize},
		{"only blank entries", context.Background(), Request{Model: "m", Entries: []string{"", " \n"}}, ErrNothingToSummarize},
		{"context already done", cancelled, Request{Model: "m", Entries: []string{"[user] hi"}}, context.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(_ int, c call, w http.ResponseWriter, _ *http.Request) {
				reply(w, c, "m", "summary", Usage{})
			})
			_, err := mustNew(t, f.config(APIResponses)).Summarize(tc.ctx, tc.req)
			if !errors.Is(err, tc.target) {
				t.Errorf("err = %v, want %v", err, tc.target)
			}
			if n := len(f.recorded()); n != 0 {
				t.Errorf("made %d calls, want 0", n)
			}
		})
	}
}

func TestSummarizePrevious(t *testing.T) {
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			f := newFake(t, func(_ int, c call, w http.ResponseWriter, _ *http.Request) {
				reply(w, c, "m", "merged", Usage{})
			})
			prev := "## Goal\nPort the parser to Go."
			_, err := mustNew(t, f.config(api)).Summarize(context.Background(), Request{
				Model: "m", Entries: []string{"[user] also add tests"}, Previous: prev, Instructions: "Summarise tersely."})
			if err != nil {
				t.Fatalf("Summarize: %v", err)
			}
			c := f.recorded()[0]
			if want := "<previous_summary>\n" + prev + "\n</previous_summary>\n\n" + wrap("[user] also add tests"); c.input() != want {
				t.Errorf("user message = %q, want %q", c.input(), want)
			}
			if !strings.HasPrefix(c.instructions(), "Summarise tersely.") || !strings.Contains(c.instructions(), "A previous summary exists") {
				t.Errorf("instructions = %q: want the caller's instructions plus the merge clause", c.instructions())
			}
		})
	}
}

// wordCount is a deterministic token counter for tests.
func wordCount(s string) int { return len(strings.Fields(s)) }

func TestSummarizeChunksRolling(t *testing.T) {
	var entries []string
	for i := range 6 {
		words := make([]string, 50)
		for j := range words {
			words[j] = fmt.Sprintf("e%dw%d", i, j)
		}
		entries = append(entries, "[user] "+strings.Join(words[1:], " "))
	}
	perCall := Usage{InputTokens: 100, OutputTokens: 20, TotalTokens: 120, CachedTokens: 7, ReasoningTokens: 3}
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			f := newFake(t, func(n int, c call, w http.ResponseWriter, _ *http.Request) {
				reply(w, c, "m", fmt.Sprintf("summary %d", n+1), perCall)
			})
			cfg := f.config(api)
			cfg.CountTokens = wordCount
			cfg.MaxOutputTokens = 20
			// A window that leaves room for two 50-word entries per call, not three.
			cfg.ContextTokens = cfg.MaxOutputTokens + callOverhead + cfg.MaxOutputTokens +
				wordCount(instructionsFor("", true)) + wordCount(userMessage(" ", nil)) + 125
			res, err := mustNew(t, cfg).Summarize(context.Background(), Request{Model: "m", Entries: entries})
			if err != nil {
				t.Fatalf("Summarize: %v", err)
			}
			calls := f.recorded()
			if len(calls) != 3 || res.Calls != 3 {
				t.Fatalf("calls = %d, Result.Calls = %d, want 3", len(calls), res.Calls)
			}
			var seen []string
			for i, c := range calls {
				if size := wordCount(c.instructions()) + wordCount(c.input()) + cfg.MaxOutputTokens; size > cfg.ContextTokens {
					t.Errorf("call %d needs %d tokens, window is %d", i, size, cfg.ContextTokens)
				}
				hasPrev := strings.Contains(c.instructions(), "A previous summary exists")
				if i == 0 {
					if hasPrev || strings.Contains(c.input(), "<previous_summary>") {
						t.Errorf("call 0 carries a previous summary")
					}
				} else {
					want := fmt.Sprintf("<previous_summary>\nsummary %d\n</previous_summary>\n\n<conversation>\n", i)
					if !hasPrev || !strings.HasPrefix(c.input(), want) {
						t.Errorf("call %d does not carry summary %d: %q", i, i, c.input()[:min(80, len(c.input()))])
					}
				}
				seen = append(seen, strings.Split(c.conversation(), entrySeparator)...)
			}
			if strings.Join(seen, "|") != strings.Join(entries, "|") {
				t.Errorf("entries across calls are not the input in order")
			}
			want := Usage{InputTokens: 300, OutputTokens: 60, TotalTokens: 360, CachedTokens: 21, ReasoningTokens: 9}
			if res.Summary != "summary 3" || res.Usage != want {
				t.Errorf("result = %+v, want summary 3 and usage %+v", res, want)
			}
		})
	}
}

func TestSummarizeResplitsOnContextOverflow(t *testing.T) {
	bodies := map[string]string{
		"openai": `{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`,
		"vllm":   `{"error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.","type":"BadRequestError","param":null,"code":400}}`,
	}
	entries := []string{"[user] one", "[assistant] two", "[user] three", "[tool] four"}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			// The server accepts at most two entries per call, although the estimate says all
			// four fit.
			f := newFake(t, func(n int, c call, w http.ResponseWriter, _ *http.Request) {
				if strings.Count(c.conversation(), entrySeparator) > 1 {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusBadRequest)
					_, _ = w.Write([]byte(body))
					return
				}
				reply(w, c, "m", fmt.Sprintf("summary after call %d", n), Usage{TotalTokens: 1})
			})
			cfg := f.config(APIChat)
			cfg.CountTokens = func(s string) int { return 40 * wordCount(s) }
			res, err := mustNew(t, cfg).Summarize(context.Background(), Request{Model: "m", Entries: entries})
			if err != nil {
				t.Fatalf("Summarize: %v", err)
			}
			calls := f.recorded()
			if len(calls) != 3 || res.Calls != 3 {
				t.Fatalf("calls = %d, Result.Calls = %d, want 3 (1 rejected + 2 halves)", len(calls), res.Calls)
			}
			if calls[1].conversation() != "[user] one\n\n[assistant] two" || calls[2].conversation() != "[user] three\n\n[tool] four" {
				t.Errorf("halves = %q, %q", calls[1].conversation(), calls[2].conversation())
			}
			if !strings.Contains(calls[2].input(), "summary after call 1") {
				t.Errorf("second half does not carry the first half's summary")
			}
			if res.Summary != "summary after call 2" || res.Usage.TotalTokens != 2 {
				t.Errorf("result = %+v", res)
			}
		})
	}
}

func TestSummarizeErrors(t *testing.T) {
	const secret = "SECRET-PROMPT-TEXT"
	type answer func(w http.ResponseWriter, c call)
	status := func(code int, body string, hdr ...string) answer {
		return func(w http.ResponseWriter, _ call) {
			for i := 0; i+1 < len(hdr); i += 2 {
				w.Header().Set(hdr[i], hdr[i+1])
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_, _ = w.Write([]byte(body))
		}
	}
	cases := []struct {
		name       string
		api        string
		answer     answer
		status     int
		retryable  bool
		code       string
		retryAfter time.Duration
		cause      error
	}{
		{"500", APIResponses, status(500, `{"error":{"message":"boom `+secret+`","type":"server_error","param":null,"code":null}}`),
			500, true, "server_error", 0, nil},
		{"429 with Retry-After", APIChat, status(429, `{"error":{"message":"slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, "Retry-After", "7"),
			429, true, "rate_limit_exceeded", 7 * time.Second, nil},
		{"503 without an error object", APIChat, status(503, `{"object":"error","message":"`+secret+`","type":"ServiceUnavailable","code":503}`),
			503, true, "", 0, nil},
		{"400 is final", APIResponses, status(400, `{"error":{"message":"Invalid value: `+secret+`","type":"invalid_request_error","param":"input","code":"invalid_value"}}`),
			400, false, "invalid_value", 0, nil},
		{"x-should-retry overrides", APIResponses, status(400, `{"error":{"message":"x","type":"invalid_request_error","code":null}}`, "x-should-retry", "true"),
			400, true, "invalid_request_error", 0, nil},
		{"malformed JSON", APIResponses, status(200, `{"id":"resp_1","output":[{"type":"message",`+secret),
			200, false, "", 0, ErrMalformedResponse},
		{"HTML page", APIChat, func(w http.ResponseWriter, _ call) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html>" + secret + "</html>"))
		}, 200, false, "", 0, ErrMalformedResponse},
		{"empty output", APIResponses, func(w http.ResponseWriter, _ call) { writeResponse(w, "m", "", "", Usage{}) },
			200, true, "", 0, ErrEmptySummary},
		{"empty output at the output limit", APIResponses, func(w http.ResponseWriter, _ call) { writeResponse(w, "m", "", "max_output_tokens", Usage{}) },
			200, false, "", 0, ErrEmptySummary},
		{"empty chat content", APIChat, func(w http.ResponseWriter, _ call) { writeChat(w, "m", "  \n", "stop", Usage{}) },
			200, true, "", 0, ErrEmptySummary},
		{"unfinished think block", APIChat, func(w http.ResponseWriter, _ call) { writeChat(w, "m", "<think>the user wants", "length", Usage{}) },
			200, false, "", 0, ErrEmptySummary},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(_ int, c call, w http.ResponseWriter, _ *http.Request) { tc.answer(w, c) })
			cfg := f.config(tc.api)
			cfg.APIKey = "sk-config-key"
			_, err := mustNew(t, cfg).Summarize(context.Background(), Request{Model: "m", Entries: []string{"[user] " + secret}})
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v (%T), want *Error", err, err)
			}
			if e.Status != tc.status || e.Retryable != tc.retryable || e.Code != tc.code || e.RetryAfter != tc.retryAfter {
				t.Errorf("got Status=%d Retryable=%v Code=%q RetryAfter=%v, want %d %v %q %v",
					e.Status, e.Retryable, e.Code, e.RetryAfter, tc.status, tc.retryable, tc.code, tc.retryAfter)
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("err does not match ErrUnavailable")
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Errorf("err = %v, want cause %v", err, tc.cause)
			}
			if msg := err.Error(); strings.Contains(msg, secret) || strings.Contains(msg, "sk-config-key") {
				t.Errorf("error text leaks prompt or key: %q", msg)
			}
			if n := len(f.recorded()); n != 1 {
				t.Errorf("made %d calls, want 1 (no SDK retries)", n)
			}
		})
	}
}

func TestSummarizeTransportFailure(t *testing.T) {
	f := newFake(t, func(_ int, c call, w http.ResponseWriter, _ *http.Request) {})
	cfg := f.config(APIResponses)
	f.srv.Close() // nothing listens on the address any more
	_, err := mustNew(t, cfg).Summarize(context.Background(), Request{Model: "m", Entries: []string{"[user] hi"}})
	var e *Error
	if !errors.As(err, &e) || e.Status != 0 || !e.Retryable || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %#v, want a retryable *Error without status", err)
	}
}

// blockingFake answers nothing until the request's context ends; arrived is closed when the
// first request is in.
func blockingFake(t *testing.T) (*fake, <-chan struct{}) {
	arrived := make(chan struct{})
	release := make(chan struct{})
	f := newFake(t, func(n int, _ call, _ http.ResponseWriter, r *http.Request) {
		if n == 0 {
			close(arrived)
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before f.srv.Close
	return f, arrived
}

func TestSummarizeCancellation(t *testing.T) {
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			f, arrived := blockingFake(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				<-arrived
				cancel()
			}()
			_, err := mustNew(t, f.config(api)).Summarize(ctx, Request{Model: "m", Entries: []string{"[user] hi"}})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			var e *Error
			if errors.As(err, &e) {
				t.Errorf("a cancelled caller got *Error %v; want the bare context error", e)
			}
		})
	}
}

func TestSummarizePerCallTimeout(t *testing.T) {
	f, _ := blockingFake(t)
	cfg := f.config(APIResponses)
	cfg.Timeout = 20 * time.Millisecond
	_, err := mustNew(t, cfg).Summarize(context.Background(), Request{Model: "m", Entries: []string{"[user] hi"}})
	var e *Error
	if !errors.As(err, &e) || !e.Retryable || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want a retryable *Error wrapping DeadlineExceeded", err)
	}
}

func TestSummarizeStripsThinking(t *testing.T) {
	f := newFake(t, func(_ int, c call, w http.ResponseWriter, _ *http.Request) {
		writeChat(w, "m", "<think>\nLet me see.\n</think>\n\n## Goal\nShip it.", "stop", Usage{})
	})
	res, err := mustNew(t, f.config(APIChat)).Summarize(context.Background(), Request{Model: "m", Entries: []string{"[user] hi"}})
	if err != nil || res.Summary != "## Goal\nShip it." {
		t.Fatalf("Summarize = %q, %v", res.Summary, err)
	}
}

func TestNewValidates(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"minimal", Config{BaseURL: "http://127.0.0.1:8000/v1"}, true},
		{"chat", Config{BaseURL: "https://api.openai.com/v1", API: APIChat}, true},
		{"no base URL", Config{}, false},
		{"relative base URL", Config{BaseURL: "/v1"}, false},
		{"unknown API", Config{BaseURL: "http://127.0.0.1/v1", API: "completions"}, false},
		{"output over window", Config{BaseURL: "http://127.0.0.1/v1", ContextTokens: 4096, MaxOutputTokens: 4096}, false},
		{"negative timeout", Config{BaseURL: "http://127.0.0.1/v1", Timeout: -time.Second}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if (err == nil) != tc.ok {
				t.Errorf("New err = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestSummarizeWindowTooSmall(t *testing.T) {
	f := newFake(t, func(_ int, c call, w http.ResponseWriter, _ *http.Request) { reply(w, c, "m", "s", Usage{}) })
	cfg := f.config(APIResponses)
	cfg.ContextTokens, cfg.MaxOutputTokens = 1000, 500 // DefaultPrompt alone is larger than what is left
	_, err := mustNew(t, cfg).Summarize(context.Background(), Request{Model: "m", Entries: []string{strings.Repeat("word ", 2000)}})
	var e *Error
	if !errors.As(err, &e) || e.Retryable {
		t.Fatalf("err = %v, want a final *Error", err)
	}
	if n := len(f.recorded()); n != 0 {
		t.Errorf("made %d calls, want 0", n)
	}
}

func BenchmarkSummarize(b *testing.B) {
	for _, api := range apis {
		b.Run(api, func(b *testing.B) {
			f := newFake(b, func(_ int, c call, w http.ResponseWriter, _ *http.Request) {
				reply(w, c, "m", "## Goal\nShip it.", Usage{InputTokens: 10, OutputTokens: 5, TotalTokens: 15})
			})
			s := mustNew(b, f.config(api))
			entries := make([]string, 200)
			for i := range entries {
				entries[i] = "[tool output] " + strings.Repeat("line of output\n", 40)
			}
			req := Request{Model: "m", Entries: entries}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Summarize(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// An answer larger than any summary within the output budget can be (a server that ignores
// max_output_tokens) is not read whole: the call fails with ErrAnswerTooLarge, not retryable. An
// answer within the bound is read as usual (the proxy cuts its summary to the token budget).
func TestSummarizeBoundsTheAnswer(t *testing.T) {
	for _, api := range apis {
		for _, tc := range []struct {
			name  string
			bytes int
			fail  bool
		}{
			{"within the bound", 512 << 10, false},
			{"past the bound", 3 << 20, true},
		} {
			t.Run(api+"/"+tc.name, func(t *testing.T) {
				text := strings.Repeat("x", tc.bytes)
				f := newFake(t, func(_ int, c call, w http.ResponseWriter, _ *http.Request) { reply(w, c, "m", text, Usage{}) })
				cfg := f.config(api)
				cfg.MaxOutputTokens = 1000 // bound: 1 MiB + 64 KB
				res, err := mustNew(t, cfg).Summarize(context.Background(), Request{Model: "m", Entries: []string{"[user] hi"}})
				if !tc.fail {
					if err != nil || len(res.Summary) != tc.bytes {
						t.Fatalf("Summarize: %d bytes, %v", len(res.Summary), err)
					}
					return
				}
				var e *Error
				if !errors.Is(err, ErrAnswerTooLarge) || !errors.As(err, &e) || e.Retryable {
					t.Fatalf("err = %v, want a non-retryable ErrAnswerTooLarge", err)
				}
			})
		}
	}
}
