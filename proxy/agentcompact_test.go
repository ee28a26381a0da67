package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/fixtures"
	"github.com/compactd/compactd/proxy"
)

// ccPrompt is shaped like Claude Code 2.1.332's compaction prompt (its bundled JS): a request for
// a detailed summary with <analysis> and <summary> tag instructions. Its wording is deliberately
// not the real one: recognition must rest on the markers.
const ccPrompt = "Your task is to create a detailed summary of the conversation so far, paying close attention to the user's explicit requests.\n" +
	"Before providing your final summary, wrap your analysis in <analysis> tags to organize your thoughts.\n" +
	"Your summary should include: 1. Primary Request and Intent ...\n" +
	"<summary>\n1. Primary Request and Intent:\n   [Detailed description]\n</summary>\nZEBRAPROMPTWORD"

const agentFact = "SECRET_FACT_PORT=7431"

// agentConversation is a short Claude Code session: a Read whose output holds the fact, then
// the assistant's answer.
func agentConversation() []anthropic.MessageParam {
	return []anthropic.MessageParam{
		anthropic.NewUserMessage(anthropic.NewTextBlock("Read the notes file please")),
		anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("toolu_1", map[string]string{"file_path": "/w/notes.txt"}, "Read")),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_1", "listen_port: 7431 ("+agentFact+")", false)),
		anthropic.NewAssistantMessage(anthropic.NewTextBlock("The notes give the listen port.")),
	}
}

func agentParams(last string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model: antModel, MaxTokens: 20000,
		Messages: append(agentConversation(), anthropic.NewUserMessage(anthropic.NewTextBlock(last))),
		System:   []anthropic.TextBlockParam{{Text: "You are Claude Code."}},
	}
}

const sessionID = "6f1c2d3e-aaaa-bbbb-cccc-0123456789ab"

// checkAgentSummary checks compactd's answer to a compaction turn: the reply Claude Code parses
// (analysis, then a summary block holding the fake summariser's summary and the ledger with the
// fact), usage from the summariser, and the summariser saw compactd's prompt, not the agent's.
func checkAgentSummary(t *testing.T, h *msgHarness, msg *anthropic.Message) {
	t.Helper()
	if len(msg.Content) != 1 || msg.Content[0].Type != "text" {
		t.Fatalf("content = %+v, want one text block", msg.Content)
	}
	text := msg.Content[0].Text
	if !strings.HasPrefix(text, "<analysis>") || !strings.HasSuffix(text, "</summary>") || !strings.Contains(text, "</analysis>\n\n<summary>\n") {
		t.Fatalf("reply is not <analysis>…</analysis> <summary>…</summary>:\n%s", text)
	}
	inner := text[strings.Index(text, "<summary>"):]
	if !strings.Contains(inner, "Facts ledger") || !strings.Contains(inner, agentFact) {
		t.Errorf("the summary block lacks the ledger with %q:\n%s", agentFact, inner)
	}
	if string(msg.StopReason) != "end_turn" || msg.Usage.InputTokens <= 0 || msg.Usage.OutputTokens <= 0 {
		t.Errorf("stop_reason %q, usage %+v: want end_turn and the summariser's usage", msg.StopReason, msg.Usage)
	}
	if n := len(h.upstream(fakeupstream.KindMessages)); n != 0 {
		t.Errorf("the model was called %d times; compactd should have answered", n)
	}
	sums := h.upstream(fakeupstream.KindSummary)
	if len(sums) == 0 {
		t.Fatal("the summariser was not called")
	}
	body := string(sums[0].Body)
	if !strings.Contains(body, "You are compacting a conversation") || strings.Contains(body, "ZEBRAPROMPTWORD") {
		t.Errorf("the summariser did not get compactd's prompt alone:\n%.600s", body)
	}
	if !strings.Contains(body, agentFact) {
		t.Error("the summariser did not see the tool output")
	}
}

func TestAgentCompactionClaudeCodeSDK(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "stream"}[stream], func(t *testing.T) {
			var store archive.Store
			h := newMsgHarness(t, withArchive(t, func(c *proxy.Config) { store = c.Archive; c.AnthropicUpstream = c.Upstream }))
			ctx := context.Background()
			hdr := option.WithHeader("X-Claude-Code-Session-Id", sessionID)
			var msg *anthropic.Message
			if stream {
				s := h.ant.Messages.NewStreaming(ctx, agentParams(ccPrompt), hdr)
				msg = &anthropic.Message{}
				for s.Next() {
					if err := msg.Accumulate(s.Current()); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
			} else {
				var err error
				if msg, err = h.ant.Messages.New(ctx, agentParams(ccPrompt), hdr); err != nil {
					t.Fatal(err)
				}
			}
			checkAgentSummary(t, h, msg)
			// The raw conversation is archived under the agent's session id; the prompt is not.
			convs, err := store.Conversations(ctx, "")
			if err != nil || len(convs) != 1 || convs[0].ID != sessionID {
				t.Fatalf("conversations = %+v, err %v; want one, %s", convs, err, sessionID)
			}
			hits, err := store.Search(ctx, archive.Query{Text: "SECRET_FACT_PORT", Conversation: sessionID})
			if err != nil || len(hits) == 0 {
				t.Fatalf("the fact is not in the archive: %v %v", hits, err)
			}
			if hits, _ := store.Search(ctx, archive.Query{Text: "ZEBRAPROMPTWORD"}); len(hits) != 0 {
				t.Errorf("the agent's summarisation prompt was archived: %+v", hits)
			}
		})
	}
}

// rawMessages posts a Messages body with the given headers; it returns the status, the
// agent-compaction header and the body.
func rawMessages(t *testing.T, url string, body []byte, hdr map[string]string) (int, string, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-ant-test")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Compactd-Agent-Compaction"), b
}

func mustBody(t *testing.T, p anthropic.MessageNewParams, set func(map[string]any)) []byte {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		set(m)
		b, _ = json.Marshal(m)
	}
	return b
}

// Recognition is by structure and markers; what it is not sure about is forwarded byte for byte.
func TestAgentCompactionRecognition(t *testing.T) {
	cc := map[string]string{"X-Claude-Code-Session-Id": sessionID}
	reworded := "Summarise our conversation up to now for a fresh context. Think inside <analysis></analysis> first, then put the result in <summary></summary>."
	for _, tc := range []struct {
		name    string
		p       anthropic.MessageNewParams
		set     func(map[string]any)
		hdr     map[string]string
		off     bool
		upgrade bool
	}{
		{name: "claude code prompt", p: agentParams(ccPrompt), hdr: cc, upgrade: true},
		{name: "reworded prompt, same markers", p: agentParams(reworded), hdr: cc, upgrade: true},
		{name: "claude-cli user agent", p: agentParams(ccPrompt), hdr: map[string]string{"User-Agent": "claude-cli/2.1.332 (external, sdk-cli)"}, upgrade: true},
		{name: "prompt beside a tool_result", p: func() anthropic.MessageNewParams {
			p := agentParams("")
			msgs := agentConversation()
			msgs = append(msgs[:3:3], anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("toolu_2", map[string]string{"file_path": "/w/b"}, "Read")),
				anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_2", "b", false), anthropic.NewTextBlock(ccPrompt)))
			p.Messages = msgs
			return p
		}(), hdr: cc, upgrade: true},
		{name: "no claude code identity", p: agentParams(ccPrompt)},
		{name: "switched off", p: agentParams(ccPrompt), hdr: cc, off: true},
		{name: "summarize this file", p: agentParams("Please summarize this file for me: notes.txt"), hdr: cc},
		{name: "summary prompt without tags", p: agentParams("Create a detailed summary of the conversation so far, with sections for intent, files and next steps."), hdr: cc},
		{name: "summary tag only", p: agentParams("Create a summary of the conversation so far inside <summary> tags."), hdr: cc},
		{name: "partial compaction", p: agentParams("Your task is to create a detailed summary of the RECENT portion of the conversation. Use <analysis> then <summary>."), hdr: cc},
		{name: "forced tool", p: agentParams(ccPrompt), hdr: cc, set: func(m map[string]any) {
			m["tools"] = []any{map[string]any{"name": "Read", "input_schema": map[string]any{"type": "object"}}}
			m["tool_choice"] = map[string]any{"type": "any"}
		}},
		{name: "last message is the assistant's", p: agentParams(ccPrompt), hdr: cc, set: func(m map[string]any) {
			m["messages"] = append(m["messages"].([]any), map[string]any{"role": "assistant", "content": "ok"})
		}},
		{name: "nothing before the prompt", p: agentParams(ccPrompt), hdr: cc, set: func(m map[string]any) {
			msgs := m["messages"].([]any)
			m["messages"] = msgs[len(msgs)-1:]
		}},
		{name: "an image beside the prompt", p: agentParams(ccPrompt), hdr: cc, set: func(m map[string]any) {
			msgs := m["messages"].([]any)
			last := msgs[len(msgs)-1].(map[string]any)
			last["content"] = append(last["content"].([]any), map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newMsgHarness(t, func(c *proxy.Config) { c.NoAgentCompaction = tc.off })
			body := mustBody(t, tc.p, tc.set)
			status, marked, resp := rawMessages(t, h.proxyURL, body, tc.hdr)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, resp)
			}
			up := h.upstream(fakeupstream.KindMessages)
			if tc.upgrade {
				if marked != "claude-code" || len(up) != 0 || !strings.Contains(gjson.GetBytes(resp, "content.0.text").Str, "<summary>") {
					t.Fatalf("not upgraded: header %q, %d upstream calls, reply %.300s", marked, len(up), resp)
				}
				return
			}
			if marked != "" || len(up) != 1 || !bytes.Equal(up[0].Body, body) {
				t.Fatalf("not passed through unchanged: header %q, %d upstream calls", marked, len(up))
			}
		})
	}
}

// A summariser failure follows the failure policy: fail answers in the Messages dialect;
// passthrough forwards the agent's own request unchanged, so the agent summarises as it would
// without compactd.
func TestAgentCompactionSummariserFailure(t *testing.T) {
	cc := map[string]string{"X-Claude-Code-Session-Id": sessionID}
	for _, policy := range []proxy.FailurePolicy{proxy.PolicyFail, proxy.PolicyPassthrough} {
		t.Run(string(policy), func(t *testing.T) {
			h := newMsgHarness(t, func(c *proxy.Config) {
				c.Summarizer = failing{}
				c.FailurePolicies = proxy.FailurePolicies{Responses: policy, Messages: policy}
			})
			body := mustBody(t, agentParams(ccPrompt), nil)
			status, _, resp := rawMessages(t, h.proxyURL, body, cc)
			up := h.upstream(fakeupstream.KindMessages)
			if policy == proxy.PolicyFail {
				if status != 529 || gjson.GetBytes(resp, "error.type").Str != "overloaded_error" || len(up) != 0 {
					t.Fatalf("got %d %s with %d upstream calls; want 529 overloaded_error, nothing forwarded", status, resp, len(up))
				}
				return
			}
			if status != http.StatusOK || len(up) != 1 || !bytes.Equal(up[0].Body, body) {
				t.Fatalf("got %d with %d upstream calls; want the agent's request forwarded unchanged", status, len(up))
			}
		})
	}
}

// AgentSummarizer writes the summaries of agent compactions; other compactions keep Summarizer.
func TestAgentCompactionSummariserModel(t *testing.T) {
	var agentCalls int
	h := newMsgHarness(t, func(c *proxy.Config) {
		c.AgentSummarizer = countingSummariser{n: &agentCalls, summary: "AGENT-MODEL-SUMMARY"}
	})
	status, _, resp := rawMessages(t, h.proxyURL, mustBody(t, agentParams(ccPrompt), nil), map[string]string{"X-Claude-Code-Session-Id": sessionID})
	if status != http.StatusOK || agentCalls == 0 || !strings.Contains(string(resp), "AGENT-MODEL-SUMMARY") {
		t.Fatalf("status %d, %d agent summariser calls, reply %.300s", status, agentCalls, resp)
	}
	if n := len(h.upstream(fakeupstream.KindSummary)); n != 0 {
		t.Errorf("the main summariser was called %d times", n)
	}
}

type countingSummariser struct {
	n       *int
	summary string
}

func (c countingSummariser) Summarize(_ context.Context, _ summarizer.Request) (summarizer.Result, error) {
	*c.n++
	return summarizer.Result{Summary: c.summary, Model: "cheap", Usage: summarizer.Usage{InputTokens: 10, OutputTokens: 5, TotalTokens: 15}}, nil
}

// replayCodex posts a captured Codex request (its headers, except the transport's, and body).
func replayCodex(t *testing.T, url, name string) (int, string, []byte, []byte) {
	t.Helper()
	raw := fixtures.Codex(name)
	body := []byte(gjson.GetBytes(raw, "body").Raw)
	if b := gjson.GetBytes(raw, "body"); b.Type == gjson.String {
		body = []byte(b.Str)
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/responses", bytes.NewReader(body))
	gjson.GetBytes(raw, "headers").ForEach(func(k, v gjson.Result) bool {
		switch strings.ToLower(k.Str) {
		case "host", "content-length", "accept-encoding":
		default:
			req.Header.Set(k.Str, v.Str)
		}
		return true
	})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Compactd-Agent-Compaction"), b, body
}

// Codex's captured local compaction turn is answered by compactd with a Responses stream whose
// output text is compactd's summary; its other captured requests are not.
func TestAgentCompactionCodexFixtures(t *testing.T) {
	for _, tc := range []struct {
		name    string
		upgrade bool
	}{
		{"local_compaction_request.json", true},
		{"normal_turn_request.json", false},
		{"local_post_compaction_turn_request.json", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, fakeupstream.Options{}, nil)
			status, marked, resp, body := replayCodex(t, h.proxyURL, tc.name)
			if status != http.StatusOK {
				t.Fatalf("status %d: %.300s", status, resp)
			}
			up := h.upstream(fakeupstream.KindResponses)
			if !tc.upgrade {
				if marked != "" || len(up) != 1 {
					t.Fatalf("not forwarded: header %q, %d upstream calls", marked, len(up))
				}
				return
			}
			if marked != "codex" || len(up) != 0 {
				t.Fatalf("not upgraded: header %q, %d upstream model calls", marked, len(up))
			}
			var completed gjson.Result
			for _, l := range strings.Split(string(resp), "\n") {
				if d, ok := strings.CutPrefix(l, "data: "); ok {
					if !gjson.Valid(d) {
						t.Fatalf("invalid SSE data: %.200s", d)
					}
					if gjson.Get(d, "type").Str == "response.completed" {
						completed = gjson.Parse(d)
					}
				}
			}
			text := completed.Get("response.output.0.content.0.text").Str
			if !strings.HasPrefix(text, fakeupstream.SummaryPrefix) || completed.Get("response.usage.output_tokens").Int() <= 0 {
				t.Fatalf("response.completed = %.500s", completed.Raw)
			}
			sums := h.upstream(fakeupstream.KindSummary)
			prompt := "CONTEXT CHECKPOINT COMPACTION"
			if len(sums) == 0 || strings.Contains(string(sums[0].Body), prompt) || !strings.Contains(string(body), prompt) {
				t.Fatalf("the summariser got Codex's prompt or was not called (%d calls)", len(sums))
			}
		})
	}
}
