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
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/proxy"
)

// chatPolicy turns the Chat Completions policy on at n tokens (and only there).
func chatPolicy(n int) func(*proxy.Config) {
	return func(c *proxy.Config) {
		c.Policy = compact.Policy{Routes: map[dialect.Name]int{dialect.Chat: n}}
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
				reqs := h.upstream(dialect.Chat)
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
// it processed) and the X-Compactd-Compaction header.
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
			sums := h.upstream(fakeupstream.KindSummary)
			if len(sums) != 1 {
				t.Fatalf("%d summariser calls, want 1", len(sums))
			}
			// Tool calls and tool messages reach the summariser as tool calls and outputs.
			for _, want := range []string{`[tool call] shell({\"cmd\":\"cat parse.go\"})`, "[tool output call_0] " + marker("T", 0), "[assistant] " + marker("A", 3)} {
				if !strings.Contains(string(sums[0].Body), want) {
					t.Errorf("the summariser's transcript lacks %q", want)
				}
			}
			reqs := h.upstream(dialect.Chat)
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
			if hdr := raw.Header.Get("X-Compactd-Compaction"); !strings.HasPrefix(hdr, "compacted; id=cmp_") || !strings.Contains(hdr, "tokens_after=") {
				t.Errorf("X-Compactd-Compaction %q", hdr)
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
		// Chat follows the responses policy unless --failure-policy names chat.
		for _, tc := range []struct {
			policies proxy.FailurePolicies
			policy   proxy.FailurePolicy // what the Chat turn does
		}{
			{proxy.FailurePolicies{dialect.Responses: proxy.PolicyFail, dialect.Messages: proxy.PolicyFail}, proxy.PolicyFail},
			{proxy.FailurePolicies{dialect.Responses: proxy.PolicyPassthrough, dialect.Messages: proxy.PolicyFail}, proxy.PolicyPassthrough},
			{proxy.FailurePolicies{dialect.Responses: proxy.PolicyPassthrough, dialect.Chat: proxy.PolicyFail}, proxy.PolicyFail},
			{proxy.FailurePolicies{dialect.Responses: proxy.PolicyFail, dialect.Chat: proxy.PolicyPassthrough}, proxy.PolicyPassthrough},
		} {
			policy := tc.policy
			h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) {
				chatPolicy(2000)(c)
				c.Summarizer = downSummarizer{errOutage}
				c.FailurePolicies = tc.policies
			})
			var raw *http.Response
			cc, err := h.client.Chat.Completions.New(context.Background(), chatParams(chatHistory(4, 600)), option.WithResponseInto(&raw))
			switch policy {
			case proxy.PolicyFail:
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != 502 || apiErr.Code != "compaction_failed" {
					t.Fatalf("%v: err = %v, want 502 compaction_failed", tc.policies, err)
				}
				if n := len(h.upstream(dialect.Chat)); n != 0 {
					t.Errorf("%d turns forwarded after the failure", n)
				}
			case proxy.PolicyPassthrough:
				if err != nil || !strings.HasPrefix(cc.Choices[0].Message.Content, "MOCK-REPLY") || raw.Header.Get("X-Compactd-Warning") == "" {
					t.Fatalf("%v: err %v, warning %q", tc.policies, err, raw.Header.Get("X-Compactd-Warning"))
				}
				if reqs := h.upstream(dialect.Chat); len(reqs) != 1 || !strings.Contains(string(reqs[0].Body), marker("T", 0)) {
					t.Error("the turn was not forwarded uncompacted")
				}
			}
		}
	})
}

// gatedSummarizer holds every call until release is closed, then answers with err or a summary.
type gatedSummarizer struct {
	release chan struct{}
	err     error
}

func (g *gatedSummarizer) Summarize(ctx context.Context, _ summarizer.Request) (summarizer.Result, error) {
	select {
	case <-g.release:
	case <-ctx.Done():
		return summarizer.Result{}, ctx.Err()
	}
	if g.err != nil {
		return summarizer.Result{}, g.err
	}
	return summarizer.Result{Summary: "GATED-SUMMARY of the earlier rounds", Model: "fake-summariser"}, nil
}

// TestChatCommittedStream: a streamed turn whose summariser is slow is committed with SSE
// comments (which the openai SDK skips), and what follows is still Chat Completions: the
// compaction report as a comment and the upstream's chunks when it worked, and otherwise one
// {"error":…} chunk (which the SDK's stream decoder reports as an error) for a summariser failure
// or an upstream error status that can no longer be sent as a status. The stream is committed
// before the summariser is released (NewStreaming returns with the response headers), so the
// test does not depend on timing.
func TestChatCommittedStream(t *testing.T) {
	for _, c := range []struct {
		name    string
		sumErr  error
		header  map[string]string
		wantErr string // "" for a normal answer
	}{
		{"compacted", nil, nil, ""},
		{"summariser down", errOutage, nil, "compaction_failed"},
		{"upstream error", nil, map[string]string{fakeupstream.HeaderStatus: "429"}, "rate_limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sum := &gatedSummarizer{release: make(chan struct{}), err: c.sumErr}
			h := newHarness(t, fakeupstream.Options{}, func(cfg *proxy.Config) {
				chatPolicy(2000)(cfg)
				cfg.Summarizer, cfg.KeepAlive = sum, time.Millisecond
			})
			var opts []option.RequestOption
			for k, v := range c.header {
				opts = append(opts, option.WithHeader(k, v))
			}
			var raw *http.Response
			opts = append(opts, option.WithResponseInto(&raw))
			p := chatParams(chatHistory(4, 600))
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			s := h.client.Chat.Completions.NewStreaming(context.Background(), p, opts...)
			close(sum.release) // the headers are in: compactd committed the stream
			acc := openai.ChatCompletionAccumulator{}
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			err := s.Err()
			if raw == nil || raw.StatusCode != 200 || raw.Header.Get("X-Compactd-Compaction") != "" {
				t.Fatalf("not a committed stream: %+v", raw)
			}
			if c.wantErr == "" {
				if err != nil || len(acc.Choices) == 0 || !strings.HasPrefix(acc.Choices[0].Message.Content, "MOCK-REPLY") || acc.Usage.PromptTokens == 0 {
					t.Fatalf("err %v, accumulated %+v", err, acc.ChatCompletion)
				}
				up := h.upstream(dialect.Chat)
				if len(up) != 1 || !strings.Contains(string(up[0].Body), "GATED-SUMMARY") {
					t.Error("the upstream did not get the compacted conversation")
				}
				return
			}
			var se *ssestream.StreamError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("err = %v, want a stream error with %q", err, c.wantErr)
			}
		})
	}
}

// TestChatKeepAliveBytes pins the committed stream's bytes: keep-alive comments, the report
// comment, then the upstream's chunks through data: [DONE].
func TestChatKeepAliveBytes(t *testing.T) {
	sum := &gatedSummarizer{release: make(chan struct{})}
	h := newHarness(t, fakeupstream.Options{}, func(cfg *proxy.Config) {
		chatPolicy(2000)(cfg)
		cfg.Summarizer, cfg.KeepAlive = sum, time.Millisecond
	})
	p := chatParams(chatHistory(4, 600))
	body, _ := p.MarshalJSON() // the SDK sets stream itself in NewStreaming; here it goes in the body
	body = []byte(strings.Replace(string(body), `{`, `{"stream":true,`, 1))
	resp, err := http.Post(h.proxyURL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	close(sum.release)
	got, _ := io.ReadAll(resp.Body)
	s := string(got)
	report := strings.Index(s, ": X-Compactd-Compaction: compacted; id=cmp_")
	if !strings.HasPrefix(s, ": compactd is compacting the conversation\n\n") || report < 0 ||
		report > strings.Index(s, "data: {") || !strings.HasSuffix(s, "data: [DONE]\n\n") {
		t.Errorf("committed stream %q", s)
	}
}

// chatTokens is compactd's count of a Chat request's messages, exact as near a threshold.
func chatTokens(t *testing.T, p openai.ChatCompletionNewParams) int {
	t.Helper()
	body, _ := p.MarshalJSON()
	req, err := api.ParseChatRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	c := compact.NewCounter(compact.CounterOptions{})
	defer c.Close()
	est, _ := c.Request(nil, api.ChatUnits(req.Messages), nil, 0)
	n, _ := c.Request(nil, api.ChatUnits(req.Messages), nil, est)
	return n
}

// TestChatSpeculativeCompaction: a turn just under the chat threshold starts a summary in the
// background; the next turn, past it, uses that summary (one summariser call in all) and keeps
// what followed the summarised prefix verbatim behind the handoff.
func TestChatSpeculativeCompaction(t *testing.T) {
	msgs := chatHistory(4, 600)
	limit := chatTokens(t, chatParams(msgs)) * 100 / 95 // the first turn is at 95% of it
	h := newHarness(t, fakeupstream.Options{}, chatPolicy(limit))
	ctx := context.Background()
	r1, err := h.client.Chat.Completions.New(ctx, chatParams(msgs))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(h.upstream(fakeupstream.KindSummary)) == 1 })
	msgs = append(msgs, r1.Choices[0].Message.ToParam(), openai.UserMessage("U-CROSS "+strings.Repeat("more words here ", 300)))
	var raw *http.Response
	if _, err := h.client.Chat.Completions.New(ctx, chatParams(msgs), option.WithResponseInto(&raw)); err != nil {
		t.Fatal(err)
	}
	if n := len(h.upstream(fakeupstream.KindSummary)); n != 1 || raw.Header.Get("X-Compactd-Compaction") == "" {
		t.Fatalf("%d summariser calls (want 1), X-Compactd-Compaction %q", n, raw.Header.Get("X-Compactd-Compaction"))
	}
	// After the handoff: the messages that followed the summarised prefix, the client's bytes.
	reqs := h.upstream(dialect.Chat)
	up := gjson.GetBytes(reqs[len(reqs)-1].Body, "messages").Array()
	body, _ := chatParams(msgs).MarshalJSON()
	sent := gjson.GetBytes(body, "messages").Array()
	ho := -1
	for i, m := range up {
		if strings.HasPrefix(m.Get("content").Str, handoff.Prefix) {
			ho = i
		}
	}
	tail := up[ho+1:]
	if ho < 0 || len(tail) < 2 {
		t.Fatalf("handoff at %d of %d upstream messages", ho, len(up))
	}
	for i, m := range tail {
		if want := sent[len(sent)-len(tail)+i].Raw; m.Raw != want {
			t.Errorf("tail message %d = %.80s, want the client's %.80s", i, m.Raw, want)
		}
	}
}

// TestChatTruncatedUserMessage: a newest user message larger than the retain budget is kept
// shortened, as a Chat user message (string content), not in the Responses shape the engine's
// window renders it in.
func TestChatTruncatedUserMessage(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, chatPolicy(2000)) // retain 1000
	msgs := append(chatHistory(2, 600), openai.UserMessage("HUGE-HEAD "+strings.Repeat("lots of words ", 2000)+" HUGE-TAIL"))
	if _, err := h.client.Chat.Completions.New(context.Background(), chatParams(msgs)); err != nil {
		t.Fatal(err)
	}
	reqs := h.upstream(dialect.Chat)
	up := gjson.GetBytes(reqs[0].Body, "messages").Array()
	var huge gjson.Result
	for _, m := range up {
		if c := m.Get("content"); strings.HasPrefix(c.Str, "HUGE-HEAD") {
			huge = m
		}
	}
	if !huge.Exists() || huge.Get("role").Str != "user" || !strings.HasSuffix(huge.Get("content").Str, "HUGE-TAIL") ||
		len(huge.Get("content").Str) >= len("lots of words ")*2000 || strings.Contains(string(reqs[0].Body), "input_text") {
		t.Errorf("the newest user message was not kept shortened as a Chat message: %.200s", huge.Raw)
	}
}

// TestChatCompactionMetric: a chat compaction is counted under the api label "chat", the
// dialect's name (dialect.Chat, as in the log line), never folded into Responses, with trigger
// "policy"; the agent trigger's series exist before its first use, one per dialect.
func TestChatCompactionMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, fakeupstream.Options{}, withRegistry(reg, chatPolicy(2000)))
	for _, api := range []string{"responses", "messages", "chat"} {
		if series(t, reg, "compactd_compactions_total", "api", api, "trigger", "agent", "outcome", "ok") == nil {
			t.Errorf("no compactions{api=%s,trigger=agent,outcome=ok} series before the first agent compaction", api)
		}
	}
	if _, err := h.client.Chat.Completions.New(context.Background(), chatParams(chatHistory(4, 600))); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "compactd_compactions_total", "api", "chat", "trigger", "policy", "outcome", "ok"); got != 1 {
		t.Errorf("compactions{api=chat,trigger=policy,outcome=ok} = %v, want 1", got)
	}
	if got := value(t, reg, "compactd_compactions_total", "api", "responses", "trigger", "policy", "outcome", "ok"); got != 0 {
		t.Errorf("compactions{api=responses,trigger=policy,outcome=ok} = %v, want 0: a chat compaction is not a Responses one", got)
	}
}
