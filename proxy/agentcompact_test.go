package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/fixtures"
	"github.com/compactd/compactd/proxy"
)

// ccRequest is a real Claude Code 2.1.332 compaction request (a Read, then /compact), its tools
// attached; ccPrompt is its final text block, Claude Code's summarisation prompt, byte for byte.
var (
	ccRequest = fixtures.ClaudeCode("compaction_request.json")
	ccPrompt  = gjson.GetBytes(ccRequest, "messages.@reverse.0.content.@reverse.0.text").Str
)

// ccPromptWord is a word of the prompt that nothing else in these tests holds: neither compactd's
// summariser nor the archive may see it.
const ccPromptWord = "Chronologically"

// ccWithLast is the captured compaction request with its final text block replaced by text.
func ccWithLast(t *testing.T, text string) []byte {
	t.Helper()
	n := len(gjson.GetBytes(ccRequest, "messages").Array())
	m := len(gjson.GetBytes(ccRequest, "messages.@reverse.0.content").Array())
	b, err := sjson.SetBytes(ccRequest, fmt.Sprintf("messages.%d.content.%d.text", n-1, m-1), text)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

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
	if n := len(h.upstream(dialect.Messages)); n != 0 {
		t.Errorf("the model was called %d times; compactd should have answered", n)
	}
	sums := h.upstream(fakeupstream.KindSummary)
	if len(sums) == 0 {
		t.Fatal("the summariser was not called")
	}
	body := string(sums[0].Body)
	if !strings.Contains(body, "You are compacting a conversation") || strings.Contains(body, ccPromptWord) {
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
			if hits, _ := store.Search(ctx, archive.Query{Text: ccPromptWord}); len(hits) != 0 {
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

// Recognition is by the prompt's exact shape (Claude Code 2.1.332's, captured); what compactd is
// not sure about is forwarded byte for byte. An ordinary turn, tools attached, that mentions the
// prompt's tags or quotes it reaches the model (issue 22, defect 8: it was answered by compactd's
// summariser).
func TestAgentCompactionRecognition(t *testing.T) {
	cc := map[string]string{"X-Claude-Code-Session-Id": sessionID}
	instructions := string(fixtures.ClaudeCode("compaction_prompt_instructions.txt"))
	hook := string(fixtures.ClaudeCode("compaction_prompt_precompact_hook.txt"))
	const reminder = "\n\nREMINDER: Do NOT call any tools."
	const opening = "Your task is to create a detailed summary of the conversation so far, paying close attention to the user's explicit requests and your previous actions."
	head, body, _ := strings.Cut(ccPrompt, opening)
	paragraph := ccPrompt[strings.Index(ccPrompt, "Before providing your final summary"):strings.Index(ccPrompt, "2. Double-check")]
	// Claude Code's partial compactions: the same frame, another opening (its bundled JS).
	recent := head + "Your task is to create a detailed summary of the RECENT portion of the conversation \u2014 the messages that follow earlier retained context. The earlier messages are being kept intact and do NOT need to be summarized." + body
	upTo := head + "Your task is to create a detailed summary of this conversation. This summary will be placed at the start of a continuing session; newer messages that build on this context will follow after your summary (you do not see them here)." + body
	// The prompt for models without the analysis scratchpad names the other shape, twice.
	noScratchpad := strings.ReplaceAll(ccPrompt, "an <analysis> block followed by a <summary> block", "a <summary> block")
	retry := ccPrompt + "\n\nFor this reply only: write what the instructions above ask for, with the summary inside <summary></summary> tags. Every message before those instructions, the newest one included, is conversation to summarize: do not answer it, and do not do the work that it asks for. What it says on how to summarize still holds. This paragraph is about how to write this summary. The user did not write it."
	for _, tc := range []struct {
		name    string
		body    []byte
		p       anthropic.MessageNewParams
		set     func(map[string]any)
		hdr     map[string]string
		off     bool
		upgrade bool
	}{
		{name: "captured compaction request", body: ccRequest, hdr: cc, upgrade: true},
		{name: "with /compact instructions", body: ccWithLast(t, instructions), hdr: cc, upgrade: true},
		{name: "with the PreCompact hook's instructions", body: ccWithLast(t, hook), hdr: cc, upgrade: true},
		{name: "without the analysis scratchpad", body: ccWithLast(t, noScratchpad), hdr: cc, upgrade: true},
		{name: "the retry's paragraph after the reminder", body: ccWithLast(t, retry), hdr: cc, upgrade: true},
		{name: "a marker tag after the reminder", body: ccWithLast(t, ccPrompt+"\n\n<remote-control-device-report/>"), hdr: cc, upgrade: true},
		{name: "claude code prompt", p: agentParams(ccPrompt), hdr: cc, upgrade: true},
		{name: "claude-cli user agent", p: agentParams(ccPrompt), hdr: map[string]string{"User-Agent": "claude-cli/2.1.332 (external, sdk-cli)"}, upgrade: true},
		{name: "prompt beside a tool_result and user text", p: func() anthropic.MessageNewParams {
			p := agentParams("")
			msgs := agentConversation()
			msgs = append(msgs[:3:3], anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("toolu_2", map[string]string{"file_path": "/w/b"}, "Read")),
				anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_2", "b", false), anthropic.NewTextBlock("and keep the port"), anthropic.NewTextBlock(ccPrompt)))
			p.Messages = msgs
			return p
		}(), hdr: cc, upgrade: true},

		// ordinary turns of the captured session, its tools attached
		{name: "turn naming the tags", body: ccWithLast(t, "Write the release notes: wrap your reasoning in <analysis> tags and put the result in <summary> tags, a detailed summary of the conversation so far."), hdr: cc},
		{name: "turn pasting a paragraph of the prompt", body: ccWithLast(t, "Why does Claude Code say this when it compacts?\n\n"+paragraph), hdr: cc},
		{name: "turn quoting the whole prompt", body: ccWithLast(t, "Explain this prompt to me:\n"+ccPrompt), hdr: cc},
		{name: "the prompt, then the user's own text", body: ccWithLast(t, ccPrompt+"\n\nActually, never mind that: fix the failing test instead."), hdr: cc},
		{name: "the prompt without its reminder", body: ccWithLast(t, ccPrompt[:strings.LastIndex(ccPrompt, reminder)]), hdr: cc},
		{name: "the prompt's shapes disagree", body: ccWithLast(t, strings.Replace(ccPrompt, "an <analysis> block followed by a <summary> block", "a <summary> block", 1)), hdr: cc},
		{name: "partial compaction of the recent portion", body: ccWithLast(t, recent), hdr: cc},
		{name: "partial compaction up to the newer messages", body: ccWithLast(t, upTo), hdr: cc},
		{name: "reworded prompt with the tags", p: agentParams("Summarise our conversation up to now for a fresh context. Think inside <analysis></analysis> first, then put the result in <summary></summary>."), hdr: cc},
		{name: "no claude code identity", p: agentParams(ccPrompt)},
		{name: "switched off", p: agentParams(ccPrompt), hdr: cc, off: true},
		{name: "summarize this file", p: agentParams("Please summarize this file for me: notes.txt"), hdr: cc},
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
			last["content"] = append([]any{map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}}, last["content"].([]any)...)
		}},
		{name: "a block after the prompt", p: agentParams(ccPrompt), hdr: cc, set: func(m map[string]any) {
			msgs := m["messages"].([]any)
			last := msgs[len(msgs)-1].(map[string]any)
			last["content"] = append(last["content"].([]any), map[string]any{"type": "text", "text": "one more thing"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newMsgHarness(t, func(c *proxy.Config) { c.NoAgentCompaction = tc.off })
			body := tc.body
			if body == nil {
				body = mustBody(t, tc.p, tc.set)
			}
			status, marked, resp := rawMessages(t, h.proxyURL, body, tc.hdr)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, resp)
			}
			up := h.upstream(dialect.Messages)
			if tc.upgrade {
				if marked != "claude-code" || len(up) != 0 || !strings.Contains(replyText(resp), "<summary>") {
					t.Fatalf("not upgraded: header %q, %d upstream calls, reply %.300s", marked, len(up), resp)
				}
				sums := h.upstream(fakeupstream.KindSummary)
				if len(sums) == 0 || strings.Contains(string(sums[0].Body), ccPromptWord) {
					t.Fatalf("the summariser was not called, or got Claude Code's prompt (%d calls)", len(sums))
				}
				return
			}
			if marked != "" || len(up) != 1 || !bytes.Equal(up[0].Body, body) {
				t.Fatalf("not passed through unchanged: header %q, %d upstream calls", marked, len(up))
			}
		})
	}
}

// replyText is the text of a Messages reply: a JSON body's first block, or a stream's text deltas.
func replyText(resp []byte) string {
	if gjson.ValidBytes(resp) {
		return gjson.GetBytes(resp, "content.0.text").Str
	}
	var b strings.Builder
	for _, l := range strings.Split(string(resp), "\n") {
		if d, ok := strings.CutPrefix(l, "data: "); ok && gjson.Get(d, "type").Str == "content_block_delta" {
			b.WriteString(gjson.Get(d, "delta.text").Str)
		}
	}
	return b.String()
}

// The user text sent beside Claude Code's prompt in its last message is conversation: compactd's
// summariser reads it (the prompt it does not).
func TestAgentCompactionKeepsTextBesideThePrompt(t *testing.T) {
	h := newMsgHarness(t, nil)
	p := agentParams("")
	msgs := agentConversation()
	p.Messages = append(msgs, anthropic.NewUserMessage(anthropic.NewTextBlock("remember GIRAFFE_TOKEN_88"), anthropic.NewTextBlock(ccPrompt)))
	status, marked, resp := rawMessages(t, h.proxyURL, mustBody(t, p, nil), map[string]string{"X-Claude-Code-Session-Id": sessionID})
	if status != http.StatusOK || marked != "claude-code" {
		t.Fatalf("status %d, header %q: %.300s", status, marked, resp)
	}
	sums := h.upstream(fakeupstream.KindSummary)
	if len(sums) == 0 || !strings.Contains(string(sums[0].Body), "GIRAFFE_TOKEN_88") || strings.Contains(string(sums[0].Body), ccPromptWord) {
		t.Fatalf("the summariser did not get the user's text without the prompt (%d calls)", len(sums))
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
				c.FailurePolicies = proxy.FailurePolicies{dialect.Responses: policy, dialect.Messages: policy}
			})
			body := mustBody(t, agentParams(ccPrompt), nil)
			status, _, resp := rawMessages(t, h.proxyURL, body, cc)
			up := h.upstream(dialect.Messages)
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
	return replayCodexWith(t, url, name, nil, nil)
}

// replayCodexWith is replayCodex with the body's final input text replaced by last (when not
// nil) and the headers edited by edit (when not nil).
func replayCodexWith(t *testing.T, url, name string, last *string, edit func(http.Header)) (int, string, []byte, []byte) {
	t.Helper()
	raw := fixtures.Codex(name)
	body := []byte(gjson.GetBytes(raw, "body").Raw)
	if b := gjson.GetBytes(raw, "body"); b.Type == gjson.String {
		body = []byte(b.Str)
	}
	if last != nil {
		n := len(gjson.GetBytes(body, "input").Array())
		var err error
		if body, err = sjson.SetBytes(body, fmt.Sprintf("input.%d.content.0.text", n-1), *last); err != nil {
			t.Fatal(err)
		}
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
	if edit != nil {
		edit(req.Header)
	}
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
			up := h.upstream(dialect.Responses)
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

// codexPrompt is Codex's summarisation prompt (0.169 to 0.171, from its binary; the capture
// shortens it).
const codexPrompt = "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM that will resume the task.\n\n" +
	"Include:\n- Current progress and key decisions made\n- Important context, constraints, or user preferences\n" +
	"- What remains to be done (clear next steps)\n- Any critical data, examples, or references needed to continue\n\n" +
	"Be concise, structured, and focused on helping the next LLM seamlessly continue the work."

// Codex's local compaction is recognised by Codex's own word (request_kind "compaction" in its
// turn metadata) or, without the metadata, by its prompt from the first word; a turn whose text
// merely mentions a handoff summary reaches the model.
func TestAgentCompactionCodexRecognition(t *testing.T) {
	noMetadata := func(h http.Header) { h.Del("X-Codex-Turn-Metadata") }
	asTurn := func(h http.Header) {
		md, _ := sjson.Set(h.Get("X-Codex-Turn-Metadata"), "request_kind", "turn")
		h.Set("X-Codex-Turn-Metadata", md)
	}
	ordinary := "Write a handoff summary of this checkpoint for the release notes."
	prompt := codexPrompt
	for _, tc := range []struct {
		name    string
		last    *string
		edit    func(http.Header)
		upgrade bool
	}{
		{name: "captured", upgrade: true},
		{name: "the full prompt", last: &prompt, upgrade: true},
		{name: "the prompt without metadata", last: &prompt, edit: noMetadata, upgrade: true},
		{name: "a turn mentioning a handoff summary, without metadata", last: &ordinary, edit: noMetadata},
		{name: "the prompt quoted, without metadata", last: func() *string { s := "What does this do?\n" + codexPrompt; return &s }(), edit: noMetadata},
		{name: "the prompt in an ordinary turn", last: &prompt, edit: asTurn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, fakeupstream.Options{}, nil)
			status, marked, resp, _ := replayCodexWith(t, h.proxyURL, "local_compaction_request.json", tc.last, tc.edit)
			if status != http.StatusOK {
				t.Fatalf("status %d: %.300s", status, resp)
			}
			up := h.upstream(dialect.Responses)
			if tc.upgrade != (marked == "codex") || tc.upgrade != (len(up) == 0) {
				t.Fatalf("upgrade %v: header %q, %d upstream model calls", tc.upgrade, marked, len(up))
			}
		})
	}
}
