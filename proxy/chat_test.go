package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/proxy"
)

// chatPolicy turns the Chat Completions policy on at n tokens (and only there).
func chatPolicy(n int) func(*proxy.Config) {
	return func(c *proxy.Config) {
		c.Policy = compact.Policy{Routes: map[string]int{compact.RouteChat: n}}
		c.RetainTokens = 1000
	}
}

// chatHistory is an agent conversation in Chat Completions messages: a system prompt, then n
// rounds of a user request, an assistant tool call, its (large) tool output and an answer, each
// with a marker so a test can tell what the upstream saw verbatim.
func chatHistory(n, words int) []openai.ChatCompletionMessageParamUnion {
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are a careful coding agent.")}
	for i := range n {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			openai.UserMessage(marker("U", i)+" please refactor the parser"),
			openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
				ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: id, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "shell", Arguments: `{"cmd":"cat parse.go"}`}}}}}},
			openai.ToolMessage(marker("T", i)+" "+strings.Repeat("func parse(line string) error { return nil } ", words/8), id),
			openai.ChatCompletionMessageParamOfAssistant(marker("A", i)+" I changed parse.go line 42"),
		)
	}
	return append(msgs, openai.UserMessage("NEWEST now run the tests"))
}

func chatParams(msgs []openai.ChatCompletionMessageParamUnion) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: testModel, Messages: msgs}
}

// chatPost sends body to path and returns the status, headers and body of the answer.
func chatPost(t *testing.T, url, body string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// TestChatPassThroughByteExact: without a policy, and with one the request stays under, the
// upstream receives the client's body byte for byte and the client the upstream's answer byte
// for byte (the fake upstream is deterministic: after a Reset it answers the same request with
// the same bytes), JSON and SSE, with no X-Compactd header.
func TestChatPassThroughByteExact(t *testing.T) {
	// Odd spacing, member order and unknown fields: nothing may be normalised.
	bodies := map[string]string{
		"json": `{ "model" : "gpt-test", "x_unknown":{"a":[1,2]},"messages":[{"role":"system","content":"be brief"},` +
			`{"role":"user","content":[{"type":"text","text":"hi \u00e9"}],"name":"n"}], "temperature":0.5}`,
		"sse": `{"model":"gpt-test","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
	}
	for _, tc := range []struct {
		name   string
		mutate func(*proxy.Config)
	}{{"no policy", nil}, {"under the policy", chatPolicy(100_000)}} {
		h := newHarness(t, fakeupstream.Options{}, tc.mutate)
		for kind, body := range bodies {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				h.fake.Reset()
				status, hdr, got := chatPost(t, h.proxyURL+"/v1/chat/completions", body)
				reqs := h.upstream(fakeupstream.KindChat)
				if status != 200 || len(reqs) != 1 || string(reqs[0].Body) != body {
					t.Fatalf("status %d, upstream saw %d requests, body %q", status, len(reqs), firstBody(reqs))
				}
				for k := range hdr {
					if strings.HasPrefix(k, "X-Compactd-") {
						t.Errorf("pass-through answer carries %s", k)
					}
				}
				h.fake.Reset()
				_, _, direct := chatPost(t, h.upURL+"/v1/chat/completions", body)
				if !bytes.Equal(got, direct) {
					t.Errorf("answer changed on the way:\n got %q\nwant %q", got, direct)
				}
			})
		}
	}
}

func firstBody(reqs []fakeupstream.Recorded) []byte {
	if len(reqs) == 0 {
		return nil
	}
	return reqs[0].Body
}

// TestChatPolicyCompaction: past the chat threshold the upstream sees the kept window (system
// prompt and user messages, the client's bytes), one user handoff message with the summary, and
// nothing of the tool rounds; the summariser was called once; the client gets the upstream's
// ordinary answer (JSON, and SSE with include_usage, usage as the upstream reported it for what
// it processed) and the X-Compactd-Compacted header.
func TestChatPolicyCompaction(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			h := newHarness(t, fakeupstream.Options{}, chatPolicy(2000))
			msgs := chatHistory(4, 600)
			p := chatParams(msgs)
			var raw *http.Response
			var content string
			var usage openai.CompletionUsage
			if stream {
				p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				s := h.client.Chat.Completions.NewStreaming(context.Background(), p, option.WithResponseInto(&raw))
				acc := openai.ChatCompletionAccumulator{}
				last := openai.ChatCompletionChunk{}
				for s.Next() {
					last = s.Current()
					acc.AddChunk(last)
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				if len(last.Choices) != 0 || last.Usage.PromptTokens == 0 {
					t.Errorf("the last chunk is not the usage chunk: %+v", last)
				}
				content, usage = acc.Choices[0].Message.Content, acc.Usage
			} else {
				cc, err := h.client.Chat.Completions.New(context.Background(), p, option.WithResponseInto(&raw))
				if err != nil {
					t.Fatal(err)
				}
				content, usage = cc.Choices[0].Message.Content, cc.Usage
			}
			if !strings.HasPrefix(content, "MOCK-REPLY 1: ") {
				t.Errorf("content %q", content)
			}
			if got := len(h.upstream(fakeupstream.KindSummary)); got != 1 {
				t.Errorf("%d summariser calls, want 1", got)
			}
			reqs := h.upstream(fakeupstream.KindChat)
			if len(reqs) != 1 {
				t.Fatalf("%d chat requests upstream, want 1", len(reqs))
			}
			up := gjson.GetBytes(reqs[0].Body, "messages").Array()
			var roles []string
			for _, m := range up {
				roles = append(roles, m.Get("role").Str)
			}
			// system, the 5 user messages verbatim, the handoff.
			if got := strings.Join(roles, ","); got != "system,user,user,user,user,user,user" {
				t.Fatalf("upstream roles %s", got)
			}
			clientBody, _ := p.MarshalJSON()
			clientMsgs := gjson.GetBytes(clientBody, "messages").Array()
			if up[0].Raw != clientMsgs[0].Raw || up[5].Raw != clientMsgs[len(clientMsgs)-1].Raw {
				t.Errorf("the kept window is not the client's bytes: %s / %s", up[0].Raw, up[5].Raw)
			}
			ho := up[6].Get("content").Str
			if !strings.HasPrefix(ho, handoff.Prefix) || strings.Contains(string(reqs[0].Body), marker("T", 0)) {
				t.Errorf("handoff %.120q; tool output still upstream: %v", ho, strings.Contains(string(reqs[0].Body), marker("T", 0)))
			}
			if got := gjson.GetBytes(reqs[0].Body, "stream_options.include_usage").Bool(); got != stream {
				t.Errorf("stream_options changed: %v", got)
			}
			// The usage is the upstream's, for the compacted request it processed.
			if want := fakeupstreamPromptTokens(t, h, reqs[0].Body); usage.PromptTokens != want {
				t.Errorf("prompt_tokens %d, want the upstream's %d", usage.PromptTokens, want)
			}
			if hdr := raw.Header.Get("X-Compactd-Compacted"); !strings.Contains(hdr, "->") || raw.Header.Get("X-Compactd-Compaction-Id") == "" {
				t.Errorf("X-Compactd-Compacted %q, X-Compactd-Compaction-Id %q", hdr, raw.Header.Get("X-Compactd-Compaction-Id"))
			}
		})
	}
}

// fakeupstreamPromptTokens is what the fake upstream reports as prompt_tokens for body.
func fakeupstreamPromptTokens(t *testing.T, h *harness, body []byte) int64 {
	t.Helper()
	b := gjson.GetBytes(body, "stream").Bool()
	direct := body
	if b {
		direct = []byte(strings.Replace(string(body), `"stream":true`, `"stream":false`, 1))
	}
	_, _, out := chatPost(t, h.upURL+"/v1/chat/completions", string(direct))
	return gjson.GetBytes(out, "usage.prompt_tokens").Int()
}

// TestChatErrors: what compactd itself answers on the chat route is in OpenAI's envelope, and a
// body it refuses is never forwarded.
func TestChatErrors(t *testing.T) {
	t.Run("bad body", func(t *testing.T) {
		h := newHarness(t, fakeupstream.Options{}, nil) // refused with or without a policy
		for _, c := range []struct{ body, param string }{
			{`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":7}]}`, "messages[1].content"},
			{`{"model":"m","messages":[{"role":"user","content":"a","role":"system"}]}`, "messages[0].role"},
			{`{"model":"m","messages":{}}`, "messages"},
			{`{"model":"m","messages":[`, ""},
		} {
			status, _, body := chatPost(t, h.proxyURL+"/v1/chat/completions", c.body)
			checkDialect(t, "openai", body)
			if status != 400 || gjson.GetBytes(body, "error.param").Str != c.param {
				t.Errorf("%s: %d %s, want 400 with param %q", c.body, status, body, c.param)
			}
		}
		if n := len(h.fake.Requests()); n != 0 {
			t.Errorf("%d requests reached the upstream", n)
		}
	})
	t.Run("summariser down", func(t *testing.T) {
		for _, policy := range []proxy.FailurePolicy{proxy.PolicyFail, proxy.PolicyPassthrough} {
			h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) {
				chatPolicy(2000)(c)
				c.Summarizer = downSummarizer{errOutage}
				c.FailurePolicies = proxy.FailurePolicies{Responses: policy, Messages: proxy.PolicyFail}
			})
			var raw *http.Response
			cc, err := h.client.Chat.Completions.New(context.Background(), chatParams(chatHistory(4, 600)), option.WithResponseInto(&raw))
			switch policy {
			case proxy.PolicyFail:
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != 502 || apiErr.Code != "compaction_failed" {
					t.Fatalf("err = %v, want 502 compaction_failed", err)
				}
				if n := len(h.upstream(fakeupstream.KindChat)); n != 0 {
					t.Errorf("%d turns forwarded after the failure", n)
				}
			case proxy.PolicyPassthrough:
				if err != nil || !strings.HasPrefix(cc.Choices[0].Message.Content, "MOCK-REPLY") || raw.Header.Get("X-Compactd-Warning") == "" {
					t.Fatalf("err %v, warning %q", err, raw.Header.Get("X-Compactd-Warning"))
				}
				if reqs := h.upstream(fakeupstream.KindChat); len(reqs) != 1 || !strings.Contains(string(reqs[0].Body), marker("T", 0)) {
					t.Error("the turn was not forwarded uncompacted")
				}
			}
		}
	})
}
