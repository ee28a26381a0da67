package main

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/compactd/compactd/internal/fixtures"
	"github.com/tidwall/gjson"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// buildServe parses serve's flags (after clearing COMPACTD_* variables) with a fresh key, no
// archive and no memory limit, builds the server and returns it with its log records.
func buildServe(t *testing.T, args ...string) (*proxy.Server, []map[string]any) {
	t.Helper()
	clearCompactdEnv(t)
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := parseServeFlags(append([]string{"--keys", key.String(), "--data-dir", t.TempDir(),
		"--archive", "off", "--memory-limit", "0"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	srv, err := c.build(slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = srv.Close(ctx)
	})
	var records []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		records = append(records, rec)
	}
	return srv, records
}

// summariserLines are serve's start log lines about the summariser, by route.
func summariserLines(records []map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, r := range records {
		if r["msg"] == "summariser" {
			route, _ := r["route"].(string)
			out[route] = r
		}
	}
	return out
}

// TestServeSummariserPerRoute: issue 23, defect 4. Which summariser each route uses, from the
// flags, as serve logs it at start: by default the Messages route summarises over the Messages
// API at --anthropic-upstream with the client's Anthropic credentials (it went to --upstream's
// Responses API, OpenAI's by default, which an Anthropic-only deployment cannot reach), the
// Responses and Chat routes as before; --summarizer-url, --summarizer-api or --summarizer-key
// configure one summariser for every route; models are set for every route or per route.
func TestServeSummariserPerRoute(t *testing.T) {
	type line struct{ api, url, model, agent, creds string }
	const (
		clientOpenAI = "the client's (Authorization, api-key)"
		clientAnt    = "the client's (x-api-key, or Authorization: Bearer)"
		reqModel     = "the request's model"
	)
	tenants := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(tenants, []byte("tenants:\n  - name: acme\n    keys: [\""+proxy.HashKey("client-key-acme")+"\"]\n    anthropic_key_env: ACME_ANTHROPIC_KEY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                      string
		args                      []string
		responses, messages, chat line
	}{
		{"defaults: each route its own upstream", []string{"--anthropic-upstream", "http://127.0.0.1:1"},
			line{"responses", "https://api.openai.com/v1", reqModel, reqModel, clientOpenAI},
			line{"messages", "http://127.0.0.1:1/v1", reqModel, reqModel, clientAnt},
			line{"responses", "https://api.openai.com/v1", reqModel, reqModel, clientOpenAI}},
		{"a model for every route", []string{"--upstream", "http://127.0.0.1:2/", "--anthropic-upstream", "http://127.0.0.1:1", "--summarizer-model", "small", "--agent-summarizer-model", "smaller"},
			line{"responses", "http://127.0.0.1:2/v1", "small", "smaller", clientOpenAI},
			line{"messages", "http://127.0.0.1:1/v1", "small", "smaller", clientAnt},
			line{"responses", "http://127.0.0.1:2/v1", "small", "smaller", clientOpenAI}},
		{"models per route", []string{"--anthropic-upstream", "http://127.0.0.1:1", "--summarizer-model", "responses=gpt-5-mini,messages=claude-haiku-4-5", "--agent-summarizer-model", "messages=claude-haiku-3"},
			line{"responses", "https://api.openai.com/v1", "gpt-5-mini", "gpt-5-mini", clientOpenAI},
			line{"messages", "http://127.0.0.1:1/v1", "claude-haiku-4-5", "claude-haiku-3", clientAnt},
			line{"responses", "https://api.openai.com/v1", "gpt-5-mini", "gpt-5-mini", clientOpenAI}},
		{"--summarizer-url: one for every route", []string{"--anthropic-upstream", "http://127.0.0.1:1", "--summarizer-url", "http://user:secret@127.0.0.1:3/v1"},
			line{"responses", "http://127.0.0.1:3/v1", reqModel, reqModel, clientOpenAI},
			line{"responses", "http://127.0.0.1:3/v1", reqModel, reqModel, clientOpenAI},
			line{"responses", "http://127.0.0.1:3/v1", reqModel, reqModel, clientOpenAI}},
		{"--summarizer-api messages with a key: one for every route", []string{"--summarizer-api", "messages", "--summarizer-url", "http://127.0.0.1:4", "--summarizer-key", "sk-ant-operator"},
			line{"messages", "http://127.0.0.1:4", reqModel, reqModel, "the configured key (--summarizer-key)"},
			line{"messages", "http://127.0.0.1:4", reqModel, reqModel, "the configured key (--summarizer-key)"},
			line{"messages", "http://127.0.0.1:4", reqModel, reqModel, "the configured key (--summarizer-key)"}},
		{"--summarizer-key alone: one for every route, at --upstream", []string{"--anthropic-upstream", "http://127.0.0.1:1", "--summarizer-key", "sk-operator"},
			line{"responses", "https://api.openai.com/v1", reqModel, reqModel, "the configured key (--summarizer-key)"},
			line{"responses", "https://api.openai.com/v1", reqModel, reqModel, "the configured key (--summarizer-key)"},
			line{"responses", "https://api.openai.com/v1", reqModel, reqModel, "the configured key (--summarizer-key)"}},
		{"tenants: the tenant's key of the summariser's provider", []string{"--anthropic-upstream", "http://127.0.0.1:1", "--tenants-file", tenants},
			line{"responses", "https://api.openai.com/v1", reqModel, reqModel, "the tenant's OpenAI key"},
			line{"messages", "http://127.0.0.1:1/v1", reqModel, reqModel, "the tenant's Anthropic key"},
			line{"responses", "https://api.openai.com/v1", reqModel, reqModel, "the tenant's OpenAI key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("ACME_ANTHROPIC_KEY", "sk-ant-acme")
			_, records := buildServe(t, tc.args...)
			lines := summariserLines(records)
			for route, want := range map[string]line{"responses": tc.responses, "messages": tc.messages, "chat": tc.chat} {
				r, ok := lines[route]
				if !ok {
					t.Errorf("no summariser line for route %s", route)
					continue
				}
				got := line{r["api"].(string), r["url"].(string), r["model"].(string), r["agent_model"].(string), r["credentials"].(string)}
				if got != want {
					t.Errorf("route %s: %+v, want %+v", route, got, want)
				}
			}
			for _, r := range records {
				if s, _ := json.Marshal(r); bytes.Contains(s, []byte("secret")) || bytes.Contains(s, []byte("sk-")) {
					t.Errorf("a log line holds a credential: %s", s)
				}
			}
		})
	}
}

// TestServeSummariserFlagErrors: a bad --summarizer-api or route model is a usage error.
func TestServeSummariserFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--summarizer-api", "completions"},
		{"--summarizer-model", "chat=gpt-5-mini"},
		{"--agent-summarizer-model", "messages=a,bogus"},
	} {
		clearCompactdEnv(t)
		if _, _, err := parseServeFlags(args); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// anthropicOnly is an upstream that speaks only the Messages API, like Anthropic's: the OpenAI
// paths get the 404 OpenAI's envelope would carry. refused counts the requests it refused.
func anthropicOnly(t *testing.T) (*fakeupstream.Server, string, *atomic.Int32) {
	t.Helper()
	fake := fakeupstream.New(fakeupstream.Options{})
	refused := &atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/responses" || r.URL.Path == "/v1/chat/completions" {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"message":"Invalid URL (POST ` + r.URL.Path + `)","type":"invalid_request_error","param":null,"code":null}}`))
			return
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return fake, srv.URL, refused
}

// TestServeAnthropicOnlyCompacts: issue 23, defect 4, end to end through serve's flags. With
// only a Messages backend, Claude Code's /compact (an agent compaction) and a threshold
// compaction on /v1/messages both succeed, and the summariser request went to /v1/messages with
// the client's x-api-key. Before, the summariser went to --upstream's /v1/responses: /compact
// answered 529 "compactd could not summarise". --upstream is not left at its default
// (api.openai.com) because nothing in a test may reach the internet: it points at the
// Anthropic-only backend itself, or at a closed port, as an OpenAI side that cannot serve.
func TestServeAnthropicOnlyCompacts(t *testing.T) {
	for _, openAISide := range []string{"the Anthropic-only backend", "a closed port"} {
		t.Run(openAISide, func(t *testing.T) {
			fake, base, refused := anthropicOnly(t)
			upstream := base
			if openAISide == "a closed port" {
				closed := httptest.NewServer(http.NotFoundHandler())
				upstream = closed.URL
				closed.Close()
			}
			srv, _ := buildServe(t, "--upstream", upstream, "--anthropic-upstream", base,
				"--compact-threshold", "messages=200", "--retain-tokens", "20", "--speculative-fraction", "0")
			proxyURL := httptest.NewServer(srv)
			t.Cleanup(proxyURL.Close)

			history := []map[string]any{
				{"role": "user", "content": "Read the notes file please. " + strings.Repeat("The build uses Go 1.26 and SQLite. ", 40)},
				{"role": "assistant", "content": []map[string]any{{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": map[string]string{"file_path": "/w/notes.txt"}}}},
				{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": "toolu_1", "content": "listen_port: 7431 (" + agentFact + ")"}}},
				{"role": "assistant", "content": "The notes give the listen port."},
			}
			post := func(messages []map[string]any) *http.Response {
				t.Helper()
				body, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 2000,
					"system": "You are Claude Code.", "messages": messages})
				req, _ := http.NewRequest(http.MethodPost, proxyURL.URL+"/v1/messages?beta=true", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Api-Key", "sk-ant-client")
				req.Header.Set("Anthropic-Version", "2023-06-01")
				req.Header.Set("X-Claude-Code-Session-Id", "6f1c2d3e-aaaa-bbbb-cccc-0123456789ab")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { resp.Body.Close() })
				return resp
			}
			read := func(resp *http.Response) string {
				b, _ := io.ReadAll(resp.Body)
				return string(b)
			}

			// Claude Code's /compact: its summarisation prompt (captured from 2.1.332, byte for
			// byte) as the last user message.
			compactPrompt := gjson.GetBytes(fixtures.ClaudeCode("compaction_request.json"), "messages.@reverse.0.content.@reverse.0.text").Str
			resp := post(append(history[:len(history):len(history)], map[string]any{"role": "user", "content": compactPrompt}))
			body := read(resp)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Compactd-Agent-Compaction") != "claude-code" || !strings.Contains(body, "<summary>") {
				t.Fatalf("/compact: %d %q\n%.600s", resp.StatusCode, resp.Header.Get("X-Compactd-Agent-Compaction"), body)
			}

			// A turn past --compact-threshold messages=200.
			resp = post(append(history[:len(history):len(history)], map[string]any{"role": "user", "content": "And the port again?"}))
			body = read(resp)
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("X-Compactd-Compaction"), "compacted") {
				t.Fatalf("threshold turn: %d %q\n%.600s", resp.StatusCode, resp.Header.Get("X-Compactd-Compaction"), body)
			}

			var sums []fakeupstream.Recorded
			for _, r := range fake.Requests() {
				if r.Kind == fakeupstream.KindSummary {
					sums = append(sums, r)
				}
			}
			if len(sums) < 2 {
				t.Fatalf("%d summariser requests reached the Messages backend, want one per compaction", len(sums))
			}
			for _, r := range sums {
				if r.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != "sk-ant-client" || r.Header.Get("Authorization") != "" ||
					r.Header.Get("Anthropic-Version") != "2023-06-01" {
					t.Errorf("summariser request: %s x-api-key %q Authorization %q anthropic-version %q; want /v1/messages with the client's x-api-key",
						r.Path, r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"), r.Header.Get("Anthropic-Version"))
				}
			}
			if n := refused.Load(); n != 0 {
				t.Errorf("%d requests went to the backend's OpenAI paths", n)
			}
		})
	}
}

// hooks run and handoff share COMPACTD_SUMMARIZER_MODEL with serve; their gap check speaks the
// Responses API, so they take the responses part of a per-route value.
func TestResponsesModel(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "",
		"gpt-5-mini":             "gpt-5-mini",
		"responses=a,messages=b": "a",
		"messages=b":             "",
		"bogus=x":                "bogus=x",
	} {
		if got := responsesModel(in); got != want {
			t.Errorf("responsesModel(%q) = %q, want %q", in, got, want)
		}
	}
}
