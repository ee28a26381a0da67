package summarizer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/goleak"

	"github.com/compactd/compactd/internal/dialect"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const firstLine = "You are compacting a conversation between a user and an AI coding agent so the agent can continue it in a fresh context window."

var apis = []dialect.Name{dialect.Responses, dialect.Chat, dialect.Messages}

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
		t.Run(string(api), func(t *testing.T) {
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
			wantPath := map[dialect.Name]string{dialect.Responses: "/v1/responses", dialect.Chat: "/v1/chat/completions", dialect.Messages: "/v1/messages"}[api]
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
			case dialect.Responses:
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
			case dialect.Chat:
				if got := gjson.GetBytes(c.Body, "max_completion_tokens").Int(); got != 777 {
					t.Errorf("max_completion_tokens = %d, want 777", got)
				}
				roles := gjson.GetBytes(c.Body, "messages.#.role").String()
				if roles != `["system","user"]` {
					t.Errorf("roles = %s, want system, user", roles)
				}
			case dialect.Messages:
				if got := gjson.GetBytes(c.Body, "max_tokens").Int(); got != 777 {
					t.Errorf("max_tokens = %d, want 777", got)
				}
				if roles := gjson.GetBytes(c.Body, "messages.#.role").String(); roles != `["user"]` {
					t.Errorf("roles = %s, want one user message (the prompt is the system text)", roles)
				}
				if got := gjson.GetBytes(c.Body, "system.#").Int(); got != 1 {
					t.Errorf("system blocks = %d, want 1", got)
				}
				if got := c.Header.Get("Anthropic-Version"); got != AnthropicVersion {
					t.Errorf("anthropic-version = %q, want %q", got, AnthropicVersion)
				}
				if got, auth := c.Header.Get("X-Api-Key"), c.Header.Get("Authorization"); got != "sk-test" || auth != "" {
					t.Errorf("x-api-key = %q, Authorization = %q; want the key as x-api-key only", got, auth)
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
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-env")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "tok-env")
	t.Setenv("ANTHROPIC_BASE_URL", "http://192.0.2.1")

	openAI := http.Header{}
	openAI.Set("Authorization", "Bearer sk-caller")
	openAI.Set("api-key", "azure-caller")
	openAI.Set("OpenAI-Organization", "org-caller")
	openAI.Set("OpenAI-Project", "proj-caller")
	openAI.Set("X-Unrelated", "do-not-forward")
	antKey := http.Header{}
	antKey.Set("X-Api-Key", "sk-ant-caller")
	antKey.Set("Authorization", "Bearer not-with-a-key")
	antKey.Set("X-Unrelated", "do-not-forward")
	antBearer := http.Header{}
	antBearer.Set("Authorization", "Bearer sk-ant-oat-caller")
	antBearer.Add("Anthropic-Beta", "claude-code-20250219, oauth-2025-04-20")
	antBearer.Add("Anthropic-Beta", "context-management-2025-06-27")
	both := Auth{Header: openAI, AnthropicHeader: antKey}
	cases := []struct {
		name   string
		apis   []dialect.Name
		apiKey string
		auth   Auth
		want   map[string]string // header -> value ("" = absent)
	}{
		{"configured key wins and nothing is forwarded", []dialect.Name{dialect.Responses, dialect.Chat}, "sk-config", both, map[string]string{
			"Authorization": "Bearer sk-config", "Api-Key": "", "OpenAI-Organization": "", "OpenAI-Project": "", "X-Unrelated": "", "X-Api-Key": ""}},
		{"caller credentials forwarded", []dialect.Name{dialect.Responses, dialect.Chat}, "", both, map[string]string{
			"Authorization": "Bearer sk-caller", "Api-Key": "azure-caller", "OpenAI-Organization": "org-caller", "OpenAI-Project": "proj-caller", "X-Unrelated": "", "X-Api-Key": ""}},
		{"an Anthropic credential never goes to an OpenAI API", []dialect.Name{dialect.Responses, dialect.Chat}, "", Auth{AnthropicHeader: antKey}, map[string]string{
			"Authorization": "", "X-Api-Key": ""}},
		{"no credentials at all", []dialect.Name{dialect.Responses, dialect.Chat, dialect.Messages}, "", Auth{}, map[string]string{
			"Authorization": "", "Api-Key": "", "OpenAI-Organization": "", "X-Api-Key": ""}},
		{"messages: configured key as x-api-key", []dialect.Name{dialect.Messages}, "sk-ant-config", both, map[string]string{
			"X-Api-Key": "sk-ant-config", "Authorization": "", "Api-Key": "", "OpenAI-Organization": "", "X-Unrelated": ""}},
		{"messages: the caller's x-api-key, alone", []dialect.Name{dialect.Messages}, "", both, map[string]string{
			"X-Api-Key": "sk-ant-caller", "Authorization": "", "Api-Key": "", "OpenAI-Organization": "", "X-Unrelated": ""}},
		{"messages: the caller's bearer token and its oauth beta", []dialect.Name{dialect.Messages}, "", Auth{AnthropicHeader: antBearer}, map[string]string{
			"Authorization": "Bearer sk-ant-oat-caller", "Anthropic-Beta": "oauth-2025-04-20", "X-Api-Key": ""}},
		{"messages: an OpenAI credential never goes to a Messages API", []dialect.Name{dialect.Messages}, "", Auth{Header: openAI}, map[string]string{
			"Authorization": "", "Api-Key": "", "OpenAI-Organization": "", "X-Api-Key": ""}},
	}
	for _, tc := range cases {
		for _, api := range tc.apis {
			t.Run(string(api)+"/"+tc.name, func(t *testing.T) {
				f := newFake(t, func(_ int, c call, w http.ResponseWriter, _ *http.Request) {
					reply(w, c, "m", "summary", Usage{})
				})
				cfg := f.config(api)
				cfg.APIKey = tc.apiKey
				_, err := mustNew(t, cfg).Summarize(context.Background(), Request{
					Model: "m", Entries: []string{"[user] hi"}, Auth: tc.auth})
				if err != nil {
					t.Fatalf("Summarize: %v", err)
				}
				h := f.recorded()[0].Header
				for k, want := range tc.want {
					if got := strings.Join(h.Values(k), ","); got != want {
						t.Errorf("%s = %q, want %q", k, got, want)
					}
				}
			})
		}
	}
}

// TestMessagesBaseURL: the messages API posts to BaseURL/messages; a BaseURL without /v1 (how
// ANTHROPIC_BASE_URL and --anthropic-upstream are written) gets one.
func TestMessagesBaseURL(t *testing.T) {
	for _, suffix := range []string{"/v1", "/v1/", "", "/"} {
		t.Run(suffix, func(t *testing.T) {
			f := newFake(t, func(_ int, c call, w http.ResponseWriter, _ *http.Request) { reply(w, c, "m", "s", Usage{}) })
			cfg := f.config(dialect.Messages)
			cfg.BaseURL = f.srv.URL + suffix
			if _, err := mustNew(t, cfg).Summarize(context.Background(), Request{Model: "m", Entries: []string{"[user] hi"}}); err != nil {
				t.Fatal(err)
			}
			if p := f.recorded()[0].Path; p != "/v1/messages" {
				t.Errorf("path = %q, want /v1/messages", p)
			}
		})
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
			t.Run(string(api)+"/"+tc.name, func(t *testing.T) {
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
			_, err := mustNew(t, f.config(dialect.Responses)).Summarize(tc.ctx, tc.req)
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
		t.Run(string(api), func(t *testing.T) {
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
		t.Run(string(api), func(t *testing.T) {
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
	bodies := map[string]struct {
		api  dialect.Name
		body string
	}{
		"openai":    {dialect.Chat, `{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`},
		"vllm":      {dialect.Chat, `{"error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.","type":"BadRequestError","param":null,"code":400}}`},
		"anthropic": {dialect.Messages, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 5000 tokens > 4096 maximum"}}`},
	}
	entries := []string{"[user] one", "[assistant] two", "[user] three", "[tool] four"}
	for name, tc := range bodies {
		body := tc.body
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
				reply(w, c, "m", fmt.Sprintf("summary after call %d", n), Usage{InputTokens: 1, TotalTokens: 1})
			})
			cfg := f.config(tc.api)
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
		api        dialect.Name
		answer     answer
		status     int
		retryable  bool
		code       string
		retryAfter time.Duration
		cause      error
	}{
		{"500", dialect.Responses, status(500, `{"error":{"message":"boom `+secret+`","type":"server_error","param":null,"code":null}}`),
			500, true, "server_error", 0, nil},
		{"429 with Retry-After", dialect.Chat, status(429, `{"error":{"message":"slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, "Retry-After", "7"),
			429, true, "rate_limit_exceeded", 7 * time.Second, nil},
		{"503 without an error object", dialect.Chat, status(503, `{"object":"error","message":"`+secret+`","type":"ServiceUnavailable","code":503}`),
			503, true, "", 0, nil},
		{"400 is final", dialect.Responses, status(400, `{"error":{"message":"Invalid value: `+secret+`","type":"invalid_request_error","param":"input","code":"invalid_value"}}`),
			400, false, "invalid_value", 0, nil},
		{"x-should-retry overrides", dialect.Responses, status(400, `{"error":{"message":"x","type":"invalid_request_error","code":null}}`, "x-should-retry", "true"),
			400, true, "invalid_request_error", 0, nil},
		{"malformed JSON", dialect.Responses, status(200, `{"id":"resp_1","output":[{"type":"message",`+secret),
			200, false, "", 0, ErrMalformedResponse},
		{"HTML page", dialect.Chat, func(w http.ResponseWriter, _ call) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html>" + secret + "</html>"))
		}, 200, false, "", 0, ErrMalformedResponse},
		{"empty output", dialect.Responses, func(w http.ResponseWriter, _ call) { writeResponse(w, "m", "", "", Usage{}) },
			200, true, "", 0, ErrEmptySummary},
		{"empty output at the output limit", dialect.Responses, func(w http.ResponseWriter, _ call) { writeResponse(w, "m", "", "max_output_tokens", Usage{}) },
			200, false, "", 0, ErrEmptySummary},
		{"empty chat content", dialect.Chat, func(w http.ResponseWriter, _ call) { writeChat(w, "m", "  \n", "stop", Usage{}) },
			200, true, "", 0, ErrEmptySummary},
		{"unfinished think block", dialect.Chat, func(w http.ResponseWriter, _ call) { writeChat(w, "m", "<think>the user wants", "length", Usage{}) },
			200, false, "", 0, ErrEmptySummary},
		{"messages: 529 overloaded", dialect.Messages, status(529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded `+secret+`"},"request_id":"req_1"}`),
			529, true, "overloaded_error", 0, nil},
		{"messages: 429 with retry-after", dialect.Messages, status(429, `{"type":"error","error":{"type":"rate_limit_error","message":"`+secret+`"}}`, "retry-after", "3"),
			429, true, "rate_limit_error", 3 * time.Second, nil},
		{"messages: error_code names the cause", dialect.Messages, status(400, `{"type":"error","error":{"type":"invalid_request_error","message":"`+secret+`","details":{"error_code":"request_body_encoding_invalid"}}}`),
			400, false, "request_body_encoding_invalid", 0, nil},
		{"messages: prompt is too long", dialect.Messages, status(400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`),
			400, false, "context_length_exceeded", 0, nil},
		{"messages: 401", dialect.Messages, status(401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key `+secret+`"}}`),
			401, false, "authentication_error", 0, nil},
		{"messages: malformed JSON", dialect.Messages, status(200, `{"type":"message","content":[{"type":"text","text":"`+secret),
			200, false, "", 0, ErrMalformedResponse},
		{"messages: empty output", dialect.Messages, func(w http.ResponseWriter, _ call) { writeMessage(w, "m", "", "end_turn", Usage{}) },
			200, true, "", 0, ErrEmptySummary},
		{"messages: empty output at max_tokens", dialect.Messages, func(w http.ResponseWriter, _ call) { writeMessage(w, "m", "", "max_tokens", Usage{}) },
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

// countingTransport counts the connections a client tried to make (one per round trip).
type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// transportFailures are summarisers that give no answer: nothing listens (connection refused),
// the host name does not resolve (the resolver is a stub that fails at once: the test never
// waits on a real one, nor reaches it), and a server that accepts the connection and drops it.
func transportFailures(t *testing.T) []struct {
	name        string
	baseURL     string
	transport   *http.Transport
	unreachable bool
} {
	closed := httptest.NewServer(http.NotFoundHandler())
	refused := closed.URL + "/v1"
	closed.Close() // nothing listens on the address any more
	dropping := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(dropping.Close)
	noDNS := &net.Dialer{Resolver: &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS server in tests")
	}}}
	return []struct {
		name        string
		baseURL     string
		transport   *http.Transport
		unreachable bool
	}{
		{"connection refused", refused, &http.Transport{}, true},
		{"name does not resolve", "http://nonexistent.invalid/v1", &http.Transport{DialContext: noDNS.DialContext}, true},
		{"connection dropped", dropping.URL + "/v1", &http.Transport{}, false},
	}
}

func TestSummarizeTransportFailure(t *testing.T) {
	for _, tc := range transportFailures(t) {
		for _, api := range apis {
			t.Run(tc.name+"/"+string(api), func(t *testing.T) {
				cfg := Config{BaseURL: tc.baseURL, API: api, HTTPClient: &http.Client{Transport: tc.transport}}
				_, err := mustNew(t, cfg).Summarize(context.Background(), Request{Model: "m", Entries: []string{"[user] hi"}})
				var e *Error
				if !errors.As(err, &e) || e.Status != 0 || !errors.Is(err, ErrUnavailable) {
					t.Fatalf("err = %#v, want an *Error without status", err)
				}
				if e.Unreachable != tc.unreachable || e.Retryable == tc.unreachable {
					t.Errorf("Unreachable = %v, Retryable = %v; want %v, %v (%v)", e.Unreachable, e.Retryable, tc.unreachable, !tc.unreachable, err)
				}
			})
		}
	}
}

// TestResilientUnreachableFailsFast: issue 23, defect 4. A summariser that cannot be reached
// (wrong host, nothing listening) was retried with backoff like a 503, for every attempt of
// every compaction; now it is tried once, the failure policy applies at once, and the circuit
// breaker still counts it. A dropped connection is still retried.
func TestResilientUnreachableFailsFast(t *testing.T) {
	for _, tc := range transportFailures(t) {
		t.Run(tc.name, func(t *testing.T) {
			ct := &countingTransport{next: tc.transport}
			inner := mustNew(t, Config{BaseURL: tc.baseURL, API: dialect.Messages, HTTPClient: &http.Client{Transport: ct}})
			clock := newFakeClock()
			cfg := testConfig(clock)
			cfg.BreakerFailures = 2
			r := NewResilient(inner, cfg)
			req := Request{Model: "m", Entries: []string{"[user] hi"}}
			_, err := r.Summarize(context.Background(), req)
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("err = %v, want ErrUnavailable", err)
			}
			want := int32(cfg.MaxAttempts)
			if tc.unreachable {
				want = 1
			}
			if n := ct.n.Load(); n != want {
				t.Errorf("%d attempts, want %d", n, want)
			}
			// Both count as outages: the second failure opens the breaker, the third call is
			// refused without a try.
			_, _ = r.Summarize(context.Background(), req)
			before := ct.n.Load()
			_, err = r.Summarize(context.Background(), req)
			var co *CircuitOpenError
			if !errors.As(err, &co) || ct.n.Load() != before {
				t.Fatalf("third call: err = %v after %d more attempts, want ErrCircuitOpen and none", err, ct.n.Load()-before)
			}
			if co.Unreachable != tc.unreachable {
				t.Errorf("CircuitOpenError.Unreachable = %v, want %v", co.Unreachable, tc.unreachable)
			}
		})
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
		t.Run(string(api), func(t *testing.T) {
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
	cfg := f.config(dialect.Responses)
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
	res, err := mustNew(t, f.config(dialect.Chat)).Summarize(context.Background(), Request{Model: "m", Entries: []string{"[user] hi"}})
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
		{"chat", Config{BaseURL: "https://api.openai.com/v1", API: dialect.Chat}, true},
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
	cfg := f.config(dialect.Responses)
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
		b.Run(string(api), func(b *testing.B) {
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
			t.Run(string(api)+"/"+tc.name, func(t *testing.T) {
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
