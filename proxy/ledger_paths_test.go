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
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/fixtures"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/proxy"
)

// userFact is what the user says once, early on: a number, a day and a time, and no decision word
// (let's, use, don't, must, never, always, prefer, instead, decided). No tool output repeats it, so
// after a compaction only the facts ledger can hold it word for word.
const userFact = "The staging database listens on 5433 and the deploy window is Tuesday 14:00 UTC."

// userFactMessage is the user message that says it. The sentence before it is longer than the 80
// characters the fake summariser quotes of each user message, so the summary does not carry the
// fact: the ledger has to.
const userFactMessage = "Before you start, here is some background about the environment that you will need much later in this work. " +
	userFact + " Now have a look at the parser."

// filler is a user message of about 6*n tokens that gives the ledger nothing (no digit, name,
// path or decision word), so every fact the ledger's "User said" holds comes from userFactMessage.
func filler(n int) string { return strings.Repeat("keep going with the parser work ", n) }

// A fact the user stated (not a decision) reaches the upstream model inside the facts ledger after
// a compaction by every path compactd compacts by, and the user message that stated it is gone
// from what the upstream sees: the ledger, not the conversation, is what carries it.
func TestUserSaidFactSurvivesEveryCompactionPath(t *testing.T) {
	for _, tc := range []struct {
		name string
		// run holds a conversation whose early user message is userFactMessage, has it compacted
		// by the path, and returns the conversation (input items or messages) that the upstream
		// model received after the compaction.
		run func(t *testing.T) []gjson.Result
	}{
		{"responses client threshold", responsesClientThreshold},
		{"responses compact endpoint", responsesCompactEndpoint},
		{"responses transparent policy", responsesTransparent},
		{"messages compact_20260112 edit", messagesCompactEdit},
		{"messages on-demand compaction", messagesOnDemand},
		{"messages transparent policy", messagesTransparent},
		{"chat completions transparent policy", chatTransparent},
		{"claude code compaction turn", claudeCodeCompaction},
		{"codex local compaction turn", codexCompaction},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkUserFactInLedger(t, tc.run(t))
		})
	}
}

// withLedger gives a harness a ledger budget (the default, stated: some harnesses turn it off).
func withLedger(more func(*proxy.Config)) func(*proxy.Config) {
	return func(c *proxy.Config) {
		c.LedgerBytes = 6144
		c.RetainTokens = 1000
		c.Speculative.Fraction = -1 // the compaction is the crossing turn's own, not a speculation's
		if more != nil {
			more(c)
		}
	}
}

// checkUserFactInLedger fails unless exactly one text of the upstream conversation holds userFact,
// and that text is compactd's (a handoff, or the agent's summary compactd wrote) with userFact as a
// bullet of the "User said" section of its facts ledger. The user message that said it would be a
// second text, or one without a ledger.
func checkUserFactInLedger(t *testing.T, conv []gjson.Result) {
	t.Helper()
	var holders, ledgers []string
	for _, m := range conv {
		for _, s := range leafStrings(m, nil) {
			if strings.Contains(s, userFact) {
				holders = append(holders, s)
			}
			if l, ok := ledgerIn(s); ok {
				ledgers = append(ledgers, l)
			}
		}
	}
	if len(holders) != 1 {
		t.Fatalf("the user's sentence is in %d texts of the upstream conversation, want 1 (the handoff's facts ledger); ledgers seen:\n%s",
			len(holders), strings.Join(ledgers, "\n----\n"))
	}
	ledger, ok := ledgerIn(holders[0])
	if !ok {
		t.Fatalf("the user message itself reached the upstream, not a facts ledger holding its sentence:\n%.400s", holders[0])
	}
	for _, line := range strings.Split(ledgerSection(ledger, "User said"), "\n") {
		if line == "- "+userFact {
			return
		}
	}
	t.Fatalf("the facts ledger has no %q bullet under \"### User said\":\n%s", userFact, ledger)
}

// leafStrings appends every string value inside v.
func leafStrings(v gjson.Result, out []string) []string {
	switch {
	case v.IsObject() || v.IsArray():
		v.ForEach(func(_, x gjson.Result) bool {
			out = leafStrings(x, out)
			return true
		})
	case v.Type == gjson.String:
		out = append(out, v.Str)
	}
	return out
}

// ledgerIn returns the facts ledger in s, from its heading line to the end of s.
func ledgerIn(s string) (string, bool) {
	if strings.HasPrefix(s, handoff.FactsHeading+"\n") {
		return s, true
	}
	if p := strings.Index(s, "\n"+handoff.FactsHeading+"\n"); p >= 0 {
		return s[p+1:], true
	}
	return "", false
}

// ledgerSection is the body of the ledger's "### title" section ("" when it has none).
func ledgerSection(ledger, title string) string {
	p := strings.Index(ledger, "\n### "+title+"\n")
	if p < 0 {
		return ""
	}
	rest := ledger[p+len("\n### "+title+"\n"):]
	if e := strings.Index(rest, "\n### "); e >= 0 {
		rest = rest[:e]
	}
	return rest
}

// --- Responses ---------------------------------------------------------------------------------

// factResponsesInput is a Responses conversation: the developer prompt, userFactMessage and its
// answer, then rounds of a user message, a shell call, its output and an answer. Each round's
// user message is about 480 tokens, so RetainTokens 1000 keeps only the newest two of them.
func factResponsesInput(rounds int) []any {
	items := []any{
		map[string]any{"type": "message", "role": "developer", "content": "You are a careful coding agent."},
		map[string]any{"type": "message", "role": "user", "content": userFactMessage},
		assistantItem("Noted. I am looking at the parser now."),
	}
	for i := range rounds {
		id := fmt.Sprintf("call_%d", i)
		items = append(items,
			map[string]any{"type": "message", "role": "user", "content": filler(80)},
			map[string]any{"type": "function_call", "call_id": id, "name": "shell", "arguments": `{"cmd":"go test ./parser"}`},
			map[string]any{"type": "function_call_output", "call_id": id, "output": "ok  \texample.com/parser\t0.12s"},
			assistantItem(strings.Repeat("I changed the parser and the tests pass. ", 40)),
		)
	}
	return items
}

func assistantItem(text string) map[string]any {
	return map[string]any{"type": "message", "role": "assistant", "content": []map[string]any{{"type": "output_text", "text": text}}}
}

func userItem(text string) map[string]any {
	return map[string]any{"type": "message", "role": "user", "content": text}
}

// The client asks for compaction past 2,000 tokens (context_management), keeps the compaction item
// the response starts with and sends it back on the next turn.
func responsesClientThreshold(t *testing.T) []gjson.Result {
	h := newHarness(t, fakeupstream.Options{}, withLedger(nil))
	input := factResponsesInput(6)
	resp, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", input), threshold(2000))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Output) == 0 || resp.Output[0].Type != "compaction" {
		t.Fatalf("the turn past the client's threshold did not compact: %s", resp.RawJSON())
	}
	for _, o := range resp.Output {
		input = append(input, json.RawMessage(o.RawJSON()))
	}
	input = append(input, userItem("what next?"))
	if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", input)); err != nil {
		t.Fatal(err)
	}
	return h.lastUpstreamInput(t)
}

// POST /v1/responses/compact, then the next turn is its output (retained user messages and the
// compaction item) and a new message.
func responsesCompactEndpoint(t *testing.T) []gjson.Result {
	h := newHarness(t, fakeupstream.Options{}, withLedger(nil))
	c, err := h.client.Responses.Compact(context.Background(), responses.ResponseCompactParams{Model: testModel},
		option.WithJSONSet("input", factResponsesInput(6)))
	if err != nil {
		t.Fatal(err)
	}
	var next []any
	for _, o := range c.Output {
		next = append(next, json.RawMessage(o.RawJSON()))
	}
	if len(next) == 0 || c.Output[len(c.Output)-1].Type != "compaction" {
		t.Fatalf("the compact endpoint answered no compaction item: %s", c.RawJSON())
	}
	next = append(next, userItem("what next?"))
	if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", next)); err != nil {
		t.Fatal(err)
	}
	return h.lastUpstreamInput(t)
}

// The operator's policy compacts a client that asks for nothing; the next turn resends the whole
// history and the memo gives it the compaction back.
func responsesTransparent(t *testing.T) []gjson.Result {
	h := newHarness(t, fakeupstream.Options{}, withLedger(func(c *proxy.Config) {
		c.Policy = compact.Policy{Routes: map[dialect.Name]int{dialect.Responses: 3000}}
	}))
	input := factResponsesInput(6)
	send := func(want string) *responses.Response {
		t.Helper()
		var hr *http.Response
		resp, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
			option.WithJSONSet("input", input), option.WithResponseInto(&hr))
		if err != nil {
			t.Fatal(err)
		}
		if state := hr.Header.Get("X-Compactd-Compaction"); !strings.HasPrefix(state, want) {
			t.Fatalf("X-Compactd-Compaction %q, want %s…", state, want)
		}
		return resp
	}
	resp := send("compacted;")
	input = append(input, assistantItem(resp.OutputText()), userItem("what next?"))
	send("applied;")
	return h.lastUpstreamInput(t)
}

// --- Messages ----------------------------------------------------------------------------------

// factMessages is userFactMessage and its answer, then longHistory(n) and a last question.
func factMessages(n int, last string) []anthropic.BetaMessageParam {
	msgs := []anthropic.BetaMessageParam{
		userText(userFactMessage),
		{OfAssistant: &anthropic.BetaAssistantMessageParam{Content: []anthropic.BetaContentBlockParamUnion{
			anthropic.NewBetaTextBlock("Noted. I am looking at the parser now.")}}},
	}
	return append(append(msgs, longHistory(n)...), userText(last))
}

// The client's compact_20260112 edit compacts past 50,000 tokens (the API's least trigger); the
// next turn carries the compaction block back.
func messagesCompactEdit(t *testing.T) []gjson.Result {
	h := newMsgHarness(t, withLedger(nil))
	hist := factMessages(16, "what next?")
	msg := h.send(t, hist, compactEdit(50_000, false))
	if len(msg.Content) == 0 || msg.Content[0].Type != "compaction" {
		t.Fatalf("the turn past the trigger did not compact: %s", msg.RawJSON())
	}
	h.send(t, append(append(hist, msg.ToParam()), userText("and then?")), compactEdit(50_000, false))
	return h.lastMessages(t).Get("messages").Array()
}

// On-demand compaction (the request's compaction member) answers only the block; the next turn
// starts with it.
func messagesOnDemand(t *testing.T) []gjson.Result {
	h := newMsgHarness(t, withLedger(nil))
	msg, err := h.ant.Beta.Messages.New(context.Background(), onDemand(factMessages(2, "summarise please")))
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Type != "compaction" {
		t.Fatalf("on-demand compaction answered %s", msg.RawJSON())
	}
	h.send(t, []anthropic.BetaMessageParam{msg.ToParam(), userText("continue")}, noEdits)
	return h.lastMessages(t).Get("messages").Array()
}

// The operator's policy compacts a Messages client that asks for nothing; the memo applies it to
// the next turn.
func messagesTransparent(t *testing.T) []gjson.Result {
	h := newMsgHarness(t, withLedger(func(c *proxy.Config) {
		c.Policy = compact.Policy{Routes: map[dialect.Name]int{dialect.Messages: 30_000}}
	}))
	hist := factMessages(12, "what next?")
	send := func(want string) *anthropic.BetaMessage {
		t.Helper()
		var hr *http.Response
		msg, err := h.ant.Beta.Messages.New(context.Background(), params(hist, noEdits), antoption.WithResponseInto(&hr))
		if err != nil {
			t.Fatal(err)
		}
		if state := hr.Header.Get("X-Compactd-Compaction"); !strings.HasPrefix(state, want) {
			t.Fatalf("X-Compactd-Compaction %q, want %s…", state, want)
		}
		return msg
	}
	msg := send("compacted;")
	hist = append(hist, msg.ToParam(), userText("and then?"))
	send("applied;")
	return h.lastMessages(t).Get("messages").Array()
}

// --- Chat Completions --------------------------------------------------------------------------

// The operator's policy compacts a Chat Completions conversation (tool rounds included); the memo
// applies it to the next turn.
func chatTransparent(t *testing.T) []gjson.Result {
	h := newHarness(t, fakeupstream.Options{}, withLedger(func(c *proxy.Config) {
		c.Policy = compact.Policy{Routes: map[dialect.Name]int{dialect.Chat: 3000}}
	}))
	msgs := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage("You are a careful coding agent."),
		openai.UserMessage(userFactMessage),
		openai.AssistantMessage("Noted. I am looking at the parser now."),
	}
	for i := range 6 {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs, openai.UserMessage(filler(80)),
			openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
				ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: id, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "shell", Arguments: `{"cmd":"go test ./parser"}`}}}}}},
			openai.ToolMessage("ok  \texample.com/parser\t0.12s", id),
			openai.AssistantMessage(strings.Repeat("I changed the parser and the tests pass. ", 40)))
	}
	msgs = append(msgs, openai.UserMessage("what next?"))
	send := func(want string) *openai.ChatCompletion {
		t.Helper()
		var hr *http.Response
		cc, err := h.client.Chat.Completions.New(context.Background(), chatParams(msgs), option.WithResponseInto(&hr))
		if err != nil {
			t.Fatal(err)
		}
		if state := hr.Header.Get("X-Compactd-Compaction"); !strings.HasPrefix(state, want) {
			t.Fatalf("X-Compactd-Compaction %q, want %s…", state, want)
		}
		return cc
	}
	cc := send("compacted;")
	msgs = append(msgs, openai.AssistantMessage(cc.Choices[0].Message.Content), openai.UserMessage("and then?"))
	send("applied;")
	reqs := h.upstream(dialect.Chat)
	return gjson.GetBytes(reqs[len(reqs)-1].Body, "messages").Array()
}

// --- Agents' own compactions -------------------------------------------------------------------

// Claude Code's /compact turn is answered by compactd; Claude Code keeps what is inside the
// <summary> block and starts the next conversation with it (2.1.332: "This session is being
// continued …", then "Summary:" and the block's content), keeping none of the messages before.
func claudeCodeCompaction(t *testing.T) []gjson.Result {
	h := newMsgHarness(t, withLedger(nil))
	msgs := []anthropic.MessageParam{
		anthropic.NewUserMessage(anthropic.NewTextBlock(userFactMessage)),
		anthropic.NewAssistantMessage(anthropic.NewTextBlock("Noted. I am looking at the parser now.")),
	}
	for i := range 4 {
		id := fmt.Sprintf("toolu_%d", i)
		msgs = append(msgs,
			anthropic.NewUserMessage(anthropic.NewTextBlock(filler(80))),
			anthropic.NewAssistantMessage(anthropic.NewToolUseBlock(id, map[string]string{"command": "go test ./parser"}, "Bash")),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock(id, "ok  \texample.com/parser\t0.12s", false)),
			anthropic.NewAssistantMessage(anthropic.NewTextBlock("The parser tests pass.")))
	}
	p := agentParams(ccPrompt)
	p.Messages = append(msgs, anthropic.NewUserMessage(anthropic.NewTextBlock(ccPrompt)))
	cc := map[string]string{"X-Claude-Code-Session-Id": sessionID}
	status, marked, resp := rawMessages(t, h.proxyURL, mustBody(t, p, nil), cc)
	if status != http.StatusOK || marked != "claude-code" {
		t.Fatalf("status %d, X-Compactd-Agent-Compaction %q: compactd did not answer the compaction turn: %.300s", status, marked, resp)
	}
	reply := replyText(resp)
	_, summary, ok := strings.Cut(reply, "<summary>\n")
	summary, _, ok2 := strings.Cut(summary, "\n</summary>")
	if !ok || !ok2 {
		t.Fatalf("the reply has no <summary> block: %.300s", reply)
	}
	cont := "This session is being continued from a previous conversation that ran out of context. " +
		"The summary below covers the earlier portion of the conversation.\n\nSummary:\n" + summary
	next := p
	next.Messages = []anthropic.MessageParam{
		anthropic.NewUserMessage(anthropic.NewTextBlock(cont)),
		anthropic.NewUserMessage(anthropic.NewTextBlock("Continue with the parser.")),
	}
	if status, _, resp := rawMessages(t, h.proxyURL, mustBody(t, next, nil), cc); status != http.StatusOK {
		t.Fatalf("the turn after the compaction: status %d: %.300s", status, resp)
	}
	return h.lastMessages(t).Get("messages").Array()
}

// codexSummaryPrefix is what Codex (0.169 to 0.171) puts before the summary in the next turn.
const codexSummaryPrefix = "Another language model started to solve this problem and produced a summary of its thinking process. " +
	"You also have access to the state of the tools that were used by that language model. Use this to build on the work " +
	"that has already been done and avoid duplicating work. Here is the summary produced by the other language model, " +
	"use the information in this summary to assist with your own analysis:\n"

// Codex's local compaction turn (the captured request, with userFactMessage and more rounds
// before its prompt) is answered by compactd; Codex puts the output text behind its own prefix
// into the next turn (the captured post-compaction turn). Codex keeps the newest user messages up
// to 20,000 tokens: the seven filler messages after userFactMessage are over 20,000 tokens, so
// Codex would not keep it. The next turn sent here keeps only the captured turn's kept user
// message ("hello first turn") and leaves out the fillers Codex would keep too: none holds the fact.
func codexCompaction(t *testing.T) []gjson.Result {
	h := newHarness(t, fakeupstream.Options{}, withLedger(nil))
	extra := []any{userItem(userFactMessage), assistantItem("Noted. I am looking at the parser now.")}
	for i := range 7 {
		id := fmt.Sprintf("call_%d", i)
		extra = append(extra,
			map[string]any{"type": "message", "role": "user", "content": []map[string]any{{"type": "input_text", "text": filler(500)}}},
			map[string]any{"type": "function_call", "call_id": id, "name": "shell", "arguments": `{"command":["bash","-lc","go test ./parser"]}`},
			map[string]any{"type": "function_call_output", "call_id": id, "output": "ok  \texample.com/parser\t0.12s"},
			assistantItem("The parser tests pass."))
	}
	status, marked, resp := postCodex(t, h.proxyURL, "local_compaction_request.json", func(body []byte) []byte {
		// before the captured first user turn ("hello first turn"), after the injected context
		return insertItems(t, body, 3, extra)
	})
	if status != http.StatusOK || marked != "codex" {
		t.Fatalf("status %d, X-Compactd-Agent-Compaction %q: compactd did not answer the compaction turn: %.300s", status, marked, resp)
	}
	var text string
	for _, l := range strings.Split(string(resp), "\n") {
		if d, ok := strings.CutPrefix(l, "data: "); ok && gjson.Get(d, "type").Str == "response.completed" {
			text = gjson.Get(d, "response.output.0.content.0.text").Str
		}
	}
	if text == "" {
		t.Fatalf("no output text in compactd's answer: %.300s", resp)
	}
	status, _, resp = postCodex(t, h.proxyURL, "local_post_compaction_turn_request.json", func(body []byte) []byte {
		var err error
		if gjson.GetBytes(body, "input.4.content.0.text").Str[:40] != codexSummaryPrefix[:40] {
			t.Fatal("the captured post-compaction turn no longer has the summary at input[4]")
		}
		if body, err = sjson.SetBytes(body, "input.4.content.0.text", codexSummaryPrefix+text); err != nil {
			t.Fatal(err)
		}
		return body
	})
	if status != http.StatusOK {
		t.Fatalf("the turn after the compaction: status %d: %.300s", status, resp)
	}
	return h.lastUpstreamInput(t)
}

// postCodex posts a captured Codex request (its headers, except the transport's) with its body
// edited by edit; it returns the status, the agent-compaction header and the body.
func postCodex(t *testing.T, url, name string, edit func([]byte) []byte) (int, string, []byte) {
	t.Helper()
	raw := fixtures.Codex(name)
	body := []byte(gjson.GetBytes(raw, "body").Raw)
	if b := gjson.GetBytes(raw, "body"); b.Type == gjson.String {
		body = []byte(b.Str)
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/responses", bytes.NewReader(edit(body)))
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
	return resp.StatusCode, resp.Header.Get("X-Compactd-Agent-Compaction"), b
}

// insertItems puts items into body's input array before input[at].
func insertItems(t *testing.T, body []byte, at int, items []any) []byte {
	t.Helper()
	input := gjson.GetBytes(body, "input").Array()
	out := make([]any, 0, len(input)+len(items))
	for _, it := range input[:at] {
		out = append(out, json.RawMessage(it.Raw))
	}
	out = append(out, items...)
	for _, it := range input[at:] {
		out = append(out, json.RawMessage(it.Raw))
	}
	b, err := sjson.SetBytes(body, "input", out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
