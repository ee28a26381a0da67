package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/proxy"
)

// msgHarness is compactd with the fake upstream as both upstreams, and the real anthropic-sdk-go
// v2 client.
type msgHarness struct {
	*harness
	ant anthropic.Client
}

func newMsgHarness(t *testing.T, mutate func(*proxy.Config)) *msgHarness {
	t.Helper()
	h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) {
		c.AnthropicUpstream = c.Upstream
		if mutate != nil {
			mutate(c)
		}
	})
	return &msgHarness{harness: h, ant: anthropic.NewClient(
		option.WithBaseURL(h.proxyURL), option.WithAPIKey("sk-ant-test"), option.WithMaxRetries(0))}
}

const antModel = "claude-fake"

// longHistory is a conversation of n exchanges (user text, assistant thinking + text) of about
// 2,400 tokens each, each message carrying a distinct marker.
func longHistory(n int) []anthropic.BetaMessageParam {
	var out []anthropic.BetaMessageParam
	for i := 0; i < n; i++ {
		out = append(out,
			anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock(marker("U", i)+" "+strings.Repeat("please refactor the parser module ", 300))),
			anthropic.BetaMessageParam{OfAssistant: &anthropic.BetaAssistantMessageParam{Content: []anthropic.BetaContentBlockParamUnion{
				anthropic.NewBetaThinkingBlock("sig-"+marker("T", i), "thinking about "+marker("T", i)),
				anthropic.NewBetaTextBlock(marker("A", i) + " " + strings.Repeat("I changed parse.go line 42 ", 300)),
			}}},
		)
	}
	return out
}

func compactEdit(trigger int64, pause bool) anthropic.BetaContextManagementConfigParam {
	e := anthropic.BetaCompact20260112EditParam{Trigger: anthropic.BetaInputTokensTriggerParam{Value: trigger}}
	if pause {
		e.PauseAfterCompaction = param.NewOpt(true)
	}
	return anthropic.BetaContextManagementConfigParam{Edits: []anthropic.BetaContextManagementConfigEditUnionParam{{OfCompact20260112: &e}}}
}

func userText(s string) anthropic.BetaMessageParam {
	return anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock(s))
}

func params(msgs []anthropic.BetaMessageParam, cm anthropic.BetaContextManagementConfigParam) anthropic.BetaMessageNewParams {
	return anthropic.BetaMessageNewParams{
		Model: antModel, MaxTokens: 1024, Messages: msgs, ContextManagement: cm,
		System: []anthropic.BetaTextBlockParam{{Text: "You are a careful coding agent."}},
		Betas:  []anthropic.AnthropicBeta{anthropic.AnthropicBetaCompact2026_01_12},
	}
}

// lastMessages is the body of the last /v1/messages request the upstream received.
func (h *msgHarness) lastMessages(t *testing.T) gjson.Result {
	t.Helper()
	reqs := h.upstream(dialect.Messages)
	if len(reqs) == 0 {
		t.Fatal("upstream received no Messages request")
	}
	return gjson.ParseBytes(reqs[len(reqs)-1].Body)
}

func checkCompaction(t *testing.T, msg *anthropic.BetaMessage, wantBlocks int) anthropic.BetaCompactionBlock {
	t.Helper()
	if len(msg.Content) != wantBlocks {
		t.Fatalf("content has %d blocks, want %d: %s", len(msg.Content), wantBlocks, msg.RawJSON())
	}
	cb, ok := msg.Content[0].AsAny().(anthropic.BetaCompactionBlock)
	if !ok {
		t.Fatalf("content[0] is %q, want compaction", msg.Content[0].Type)
	}
	if !strings.HasPrefix(cb.Content, fakeupstream.SummaryPrefix) || !strings.HasPrefix(cb.EncryptedContent, "cmp_") {
		t.Fatalf("compaction block = %s", cb.RawJSON())
	}
	it := msg.Usage.Iterations
	if len(it) == 0 || it[0].Type != "compaction" || it[0].InputTokens == 0 {
		t.Fatalf("usage.iterations = %s", msg.Usage.JSON.Iterations.Raw())
	}
	return cb
}

// isMessagesHandoff reports whether text is the Messages handoff of summary, with or without a
// facts ledger.
func isMessagesHandoff(text, summary string) bool {
	rest, ok := strings.CutPrefix(text, handoff.MessagesText(summary, ""))
	return ok && (rest == "" || strings.HasPrefix(rest, handoff.LedgerHeading) && strings.HasSuffix(rest, "\n</facts>"))
}

// The upstream must see the summary behind the handoff prefix as the first (user) message, and
// never a compaction block, context_management with compact_20260112, or the compaction beta.
func checkUpstreamHandoff(t *testing.T, h *msgHarness, summary string, wantMessages int) gjson.Result {
	t.Helper()
	up := h.lastMessages(t)
	msgs := up.Get("messages").Array()
	if len(msgs) != wantMessages {
		t.Fatalf("upstream saw %d messages, want %d: %s", len(msgs), wantMessages, up.Get("messages").Raw)
	}
	first := msgs[0]
	if first.Get("role").Str != "user" || !isMessagesHandoff(first.Get("content.0.text").Str, summary) {
		t.Fatalf("upstream messages[0] = %.300s", first.Raw)
	}
	if strings.Contains(up.Raw, `"compaction"`) || strings.Contains(up.Raw, "compact_20260112") {
		t.Fatalf("a compaction block or edit reached the upstream")
	}
	reqs := h.upstream(dialect.Messages)
	if b := reqs[len(reqs)-1].Header.Get("Anthropic-Beta"); strings.Contains(b, "compact-2026") {
		t.Fatalf("compaction beta forwarded: %q", b)
	}
	if strings.Contains(up.Raw, marker("A", 0)) { // the summary quotes user entries, never assistant ones
		t.Fatalf("the compacted history reached the upstream")
	}
	return up
}

func TestMessagesThresholdCompactionAndHandoff(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "sse"}[stream], func(t *testing.T) {
			h := newMsgHarness(t, nil)
			ctx := context.Background()
			hist := append(longHistory(16), userText("what next?"))
			p := params(hist, compactEdit(50_000, false))
			var msg *anthropic.BetaMessage
			if stream {
				msg = accumulate(t, h.ant.Beta.Messages.NewStreaming(ctx, p))
			} else {
				var err error
				if msg, err = h.ant.Beta.Messages.New(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			cb := checkCompaction(t, msg, 2)
			if msg.Content[1].Type != "text" || !strings.HasPrefix(msg.Content[1].Text, "MOCK-REPLY") {
				t.Fatalf("content[1] = %s", msg.Content[1].RawJSON())
			}
			if msg.StopReason != "end_turn" || len(msg.Usage.Iterations) != 2 || msg.Usage.Iterations[1].Type != "message" {
				t.Fatalf("stop_reason %q, iterations %s", msg.StopReason, msg.Usage.JSON.Iterations.Raw())
			}
			if n := len(h.upstream(fakeupstream.KindSummary)); n != 1 {
				t.Fatalf("%d summariser calls, want 1", n)
			}
			checkUpstreamHandoff(t, h, cb.Content, 1)

			// Next turn: the client appends the assistant message (ToParam) and a new question;
			// the upstream sees the summary, the reply, and the question: nothing older.
			next := append(append(hist, msg.ToParam()), userText("and then?"))
			if _, err := h.ant.Beta.Messages.New(ctx, params(next, compactEdit(50_000, false))); err != nil {
				t.Fatal(err)
			}
			up := checkUpstreamHandoff(t, h, cb.Content, 3)
			if up.Get("messages.1.role").Str != "assistant" || up.Get("messages.2.content.0.text").Str != "and then?" {
				t.Fatalf("upstream messages = %.500s", up.Get("messages").Raw)
			}
			if n := len(h.upstream(fakeupstream.KindSummary)); n != 1 {
				t.Fatalf("below the threshold the next turn compacted again (%d summariser calls)", n)
			}
		})
	}
}

// A compaction keeps the tool directives of what it summarises (tool_addition and tool_removal
// blocks, "from this point in the conversation onward"), in order, right behind the handoff: a
// tool defined inline in the compacted range is still defined afterwards, so a later reference
// to it names a tool (the strict upstream refuses one that names nothing), and a tool removed
// there stays removed. The compacting turn sends the same messages the next turn rebuilds from
// the block, so the upstream's prompt cache keeps hitting.
func TestMessagesCompactionKeepsToolDirectives(t *testing.T) {
	for _, policy := range []string{"block", "transparent"} {
		t.Run(policy, func(t *testing.T) {
			h := newMsgHarness(t, func(c *proxy.Config) {
				if policy == "transparent" {
					c.Policy = compact.Policy{Routes: map[dialect.Name]int{dialect.Messages: 50_000}}
				}
				c.Speculative.Fraction = -1 // one summary, counted exactly
			})
			ctx := context.Background()
			grep := anthropic.BetaContentBlockParamUnion{OfToolAddition: &anthropic.BetaRequestToolAdditionBlockParam{
				Tool: anthropic.BetaRequestToolAdditionBlockToolUnionParam{OfToolDefinition: &anthropic.BetaToolChangeToolDefinitionParam{
					Definition: anthropic.BetaToolUnionParam{OfTool: &anthropic.BetaToolParam{Name: "grep", InputSchema: anthropic.BetaToolInputSchemaParam{}}}}}}}
			dropRead := anthropic.BetaContentBlockParamUnion{OfToolRemoval: &anthropic.BetaRequestToolRemovalBlockParam{
				Tool: anthropic.BetaRequestToolRemovalBlockToolUnionParam{OfToolReference: &anthropic.BetaToolChangeToolReferenceParam{Name: "Read"}}}}
			hist := longHistory(16)
			hist[0].OfUser.Content = append([]anthropic.BetaContentBlockParamUnion{grep}, hist[0].OfUser.Content...)
			hist[6].OfUser.Content = append(hist[6].OfUser.Content, dropRead)
			hist = append(hist, userText("what next?"))
			p := func(msgs []anthropic.BetaMessageParam) anthropic.BetaMessageNewParams {
				cm := compactEdit(50_000, false)
				if policy == "transparent" {
					cm = anthropic.BetaContextManagementConfigParam{}
				}
				q := params(msgs, cm)
				q.Tools = []anthropic.BetaToolUnionParam{{OfTool: &anthropic.BetaToolParam{Name: "Read", InputSchema: anthropic.BetaToolInputSchemaParam{}}}}
				q.Betas = append(q.Betas, anthropic.AnthropicBetaMidConversationToolChanges2026_07_01, anthropic.AnthropicBetaInlineTools2026_09_15)
				return q
			}
			msg, err := h.ant.Beta.Messages.New(ctx, p(hist))
			if err != nil {
				t.Fatal(err)
			}
			if n := len(h.upstream(fakeupstream.KindSummary)); n != 1 {
				t.Fatalf("%d summariser calls, want 1", n)
			}
			first := h.lastMessages(t).Get("messages").Array()
			directives := func(msgs []gjson.Result) []string {
				var out []string
				for i, m := range msgs {
					for _, b := range m.Get("content").Array() {
						if typ := b.Get("type").Str; typ == "tool_addition" || typ == "tool_removal" {
							out = append(out, fmt.Sprintf("%d %s %s %s%s", i, m.Get("role").Str, typ, b.Get("tool.name").Str, b.Get("tool.definition.name").Str))
						}
					}
				}
				return out
			}
			want := []string{"1 user tool_addition grep", "2 user tool_removal Read"}
			if got := directives(first); !slices.Equal(got, want) {
				t.Fatalf("the compacting turn's upstream directives = %q, want %q (right behind the handoff)", got, want)
			}

			// Next turn: the client adds the inline-defined tool back by reference, which only
			// names a tool if the definition is still in front of the model.
			next := slices.Clone(hist)
			addGrep := anthropic.BetaContentBlockParamUnion{OfToolAddition: &anthropic.BetaRequestToolAdditionBlockParam{
				Tool: anthropic.BetaRequestToolAdditionBlockToolUnionParam{OfToolReference: &anthropic.BetaToolChangeToolReferenceParam{Name: "grep"}}}}
			next = append(next, msg.ToParam(), anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock("search for it"), addGrep))
			if _, err := h.ant.Beta.Messages.New(ctx, p(next)); err != nil {
				t.Fatalf("the next turn: %v", err)
			}
			up := h.lastMessages(t).Get("messages").Array()
			if got, want := directives(up), append(want, fmt.Sprintf("%d user tool_addition grep", len(up)-1)); !slices.Equal(got, want) {
				t.Fatalf("the next turn's upstream directives = %q, want %q", got, want)
			}
			for i, m := range first {
				if i >= len(up) || up[i].Raw != m.Raw {
					t.Fatalf("upstream message %d differs between the compacting turn and the next:\n%.300s\n%.300s", i, m.Raw, up[min(i, len(up)-1)].Raw)
				}
			}
		})
	}
}

func accumulate(t *testing.T, s interface {
	Next() bool
	Current() anthropic.BetaRawMessageStreamEventUnion
	Err() error
}) *anthropic.BetaMessage {
	t.Helper()
	var msg anthropic.BetaMessage
	for s.Next() {
		if err := msg.Accumulate(s.Current()); err != nil {
			t.Fatalf("accumulate: %v", err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return &msg
}

func TestMessagesPauseAfterCompaction(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "sse"}[stream], func(t *testing.T) {
			h := newMsgHarness(t, nil)
			p := params(append(longHistory(16), userText("go on")), compactEdit(50_000, true))
			var msg *anthropic.BetaMessage
			if stream {
				msg = accumulate(t, h.ant.Beta.Messages.NewStreaming(context.Background(), p))
			} else {
				var err error
				if msg, err = h.ant.Beta.Messages.New(context.Background(), p); err != nil {
					t.Fatal(err)
				}
			}
			checkCompaction(t, msg, 1)
			if msg.StopReason != anthropic.BetaStopReasonCompaction || msg.Usage.InputTokens != 0 || len(msg.Usage.Iterations) != 1 {
				t.Fatalf("stop_reason %q, usage %s", msg.StopReason, msg.Usage.RawJSON())
			}
			if n := len(h.upstream(dialect.Messages)); n != 0 {
				t.Fatalf("the model was sampled %d times after a paused compaction", n)
			}
		})
	}
}

func TestMessagesBelowThresholdForwardsWithoutEdit(t *testing.T) {
	h := newMsgHarness(t, nil)
	msg, err := h.ant.Beta.Messages.New(context.Background(), params([]anthropic.BetaMessageParam{userText("hi")}, compactEdit(50_000, false)))
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Type != "text" {
		t.Fatalf("content = %s", msg.RawJSON())
	}
	if up := h.lastMessages(t); up.Get("context_management").Exists() {
		t.Fatalf("context_management forwarded: %s", up.Get("context_management").Raw)
	}
}

// apiError unwraps an SDK error into status and error_code.
func apiError(t *testing.T, err error) (int, string, string) {
	t.Helper()
	var e *anthropic.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want an API error", err)
	}
	return e.StatusCode, string(e.ErrorCode()), gjson.Get(e.RawJSON(), "error.type").Str
}

func TestMessagesTamperedBlocks(t *testing.T) {
	h := newMsgHarness(t, nil)
	ctx := context.Background()
	hist := append(longHistory(16), userText("q"))
	msg, err := h.ant.Beta.Messages.New(ctx, params(hist, compactEdit(50_000, true)))
	if err != nil {
		t.Fatal(err)
	}
	cb := checkCompaction(t, msg, 1)
	send := func(content, ec string) error {
		b := anthropic.BetaCompactionBlockParam{Content: param.NewOpt(content), EncryptedContent: param.NewOpt(ec)}
		asst := anthropic.BetaMessageParam{OfAssistant: &anthropic.BetaAssistantMessageParam{
			Content: []anthropic.BetaContentBlockParamUnion{{OfCompaction: &b}}}}
		_, err := h.ant.Beta.Messages.New(ctx, params([]anthropic.BetaMessageParam{userText("old"), asst, userText("next")}, compactEdit(50_000, false)))
		return err
	}
	flipped := []byte(cb.EncryptedContent)
	flipped[len(flipped)-5] ^= 1
	tests := []struct {
		name, content, ec, code string
	}{
		{"encrypted_content flipped", cb.Content, string(flipped), ""},
		{"encrypted_content truncated", cb.Content, cb.EncryptedContent[:len(cb.EncryptedContent)/2], ""},
		{"foreign id", cb.Content, "cmp_other" + cb.EncryptedContent[strings.Index(cb.EncryptedContent, "."):], ""},
		{"content edited", cb.Content + " and more", cb.EncryptedContent, "compaction_content_mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, code, typ := apiError(t, send(tt.content, tt.ec))
			if status != 400 || code != tt.code || typ != "invalid_request_error" {
				t.Fatalf("got %d %q %q, want 400 invalid_request_error %q", status, typ, code, tt.code)
			}
		})
	}
	if err := send(cb.Content, cb.EncryptedContent); err != nil {
		t.Fatalf("the untouched block was refused: %v", err)
	}

	// An operator may allow edited summaries: the edit is then what the upstream sees.
	h2 := newMsgHarness(t, func(c *proxy.Config) { c.Sealer = h.ring; c.AllowEditedSummaries = true })
	h, edited := h2, "an edited summary"
	if err := send(edited, cb.EncryptedContent); err != nil {
		t.Fatal(err)
	}
	checkUpstreamHandoff(t, h, edited, 2)
}

func onDemand(msgs []anthropic.BetaMessageParam) anthropic.BetaMessageNewParams {
	p := params(msgs, anthropic.BetaContextManagementConfigParam{})
	p.Compaction = anthropic.BetaCompactionConfigUnionParam{OfSummarize: &anthropic.BetaSummarizeCompactionParam{}}
	p.Betas = []anthropic.AnthropicBeta{anthropic.AnthropicBetaCompact2026_09_04}
	return p
}

func TestMessagesOnDemand(t *testing.T) {
	h := newMsgHarness(t, nil)
	ctx := context.Background()
	hist := append(longHistory(2), userText("summarise please"))
	msg, err := h.ant.Beta.Messages.New(ctx, onDemand(hist))
	if err != nil {
		t.Fatal(err)
	}
	cb := checkCompaction(t, msg, 1)
	if cb.Signature == "" || msg.StopReason != anthropic.BetaStopReasonCompaction {
		t.Fatalf("block %s, stop_reason %q", cb.RawJSON(), msg.StopReason)
	}
	if n := len(h.upstream(dialect.Messages)); n != 0 {
		t.Fatalf("on-demand compaction sampled the model %d times", n)
	}
	// Streamed, it accumulates to the same shape, signature included.
	smsg := accumulate(t, h.ant.Beta.Messages.NewStreaming(ctx, onDemand(hist)))
	if scb := checkCompaction(t, smsg, 1); scb.Signature == "" || scb.Content != cb.Content {
		t.Fatalf("streamed block = %s", scb.RawJSON())
	}

	// A conversation that ends on the assistant's answer is finished: it compacts.
	if _, err := h.ant.Beta.Messages.New(ctx, onDemand(longHistory(2))); err != nil {
		t.Fatalf("on-demand compaction of a conversation ending on an answer: %v", err)
	}

	// The block comes back first; the upstream sees the summary.
	if _, err := h.ant.Beta.Messages.New(ctx, params([]anthropic.BetaMessageParam{msg.ToParam(), userText("continue")}, anthropic.BetaContextManagementConfigParam{})); err != nil {
		t.Fatal(err)
	}
	checkUpstreamHandoff(t, h, cb.Content, 2)
	// And it can be compacted again on demand, folding the summary in.
	if _, err := h.ant.Beta.Messages.New(ctx, onDemand([]anthropic.BetaMessageParam{msg.ToParam(), userText("more work")})); err != nil {
		t.Fatal(err)
	}

	signed := func(mutate func(*anthropic.BetaCompactionBlockParam)) anthropic.BetaMessageParam {
		b := cb.ToParam()
		if mutate != nil {
			mutate(&b)
		}
		return anthropic.BetaMessageParam{OfAssistant: &anthropic.BetaAssistantMessageParam{
			Content: []anthropic.BetaContentBlockParamUnion{{OfCompaction: &b}}}}
	}
	tests := []struct {
		name string
		msgs []anthropic.BetaMessageParam
		code string
	}{
		{"misplaced", []anthropic.BetaMessageParam{userText("hi"), signed(nil), userText("x")}, "compaction_block_misplaced"},
		{"ambiguous", []anthropic.BetaMessageParam{signed(nil), userText("x"), signed(nil), userText("y")}, "compaction_block_ambiguous"},
		{"signature invalid", []anthropic.BetaMessageParam{signed(func(b *anthropic.BetaCompactionBlockParam) {
			b.Signature = param.NewOpt(b.Signature.Value[:len(b.Signature.Value)-2] + "AA")
		}), userText("x")}, "compaction_signature_invalid"},
		{"encrypted_content swapped", []anthropic.BetaMessageParam{signed(func(b *anthropic.BetaCompactionBlockParam) {
			b.EncryptedContent = param.NewOpt(b.EncryptedContent.Value + "x")
		}), userText("x")}, "compaction_signature_invalid"},
		{"content mismatch", []anthropic.BetaMessageParam{signed(func(b *anthropic.BetaCompactionBlockParam) {
			b.Content = param.NewOpt("I rewrote history")
		}), userText("x")}, "compaction_content_mismatch"},
		{"nothing to summarize", []anthropic.BetaMessageParam{}, "compaction_nothing_to_summarize"},
		// The last turn's tool call awaits its result: the result the client sends next would
		// answer a tool_use the summary replaced, which the upstream refuses.
		{"incomplete turn", []anthropic.BetaMessageParam{userText("read it"), {OfAssistant: &anthropic.BetaAssistantMessageParam{
			Content: []anthropic.BetaContentBlockParamUnion{anthropic.NewBetaTextBlock("reading"), anthropic.NewBetaToolUseBlock("toolu_1", map[string]any{"path": "a.go"}, "Read")}}}},
			"compaction_incomplete_turn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.ant.Beta.Messages.New(ctx, onDemand(tt.msgs))
			if status, code, _ := apiError(t, err); status != 400 || code != tt.code {
				t.Fatalf("got %d %q, want 400 %q", status, code, tt.code)
			}
		})
	}
}

// failing is a summariser that is down.
type failing struct{}

func (failing) Summarize(context.Context, summarizer.Request) (summarizer.Result, error) {
	return summarizer.Result{}, &summarizer.Error{Status: 503, Retryable: true}
}

func TestMessagesSummariserOutage(t *testing.T) {
	h := newMsgHarness(t, func(c *proxy.Config) { c.Summarizer = failing{} })
	ctx := context.Background()
	for name, p := range map[string]anthropic.BetaMessageNewParams{
		"on demand": onDemand(longHistory(1)),
		"threshold": params(append(longHistory(16), userText("q")), compactEdit(50_000, false)),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := h.ant.Beta.Messages.New(ctx, p)
			status, code, typ := apiError(t, err)
			if status != 529 || code != "compaction_unavailable" || typ != "overloaded_error" {
				t.Fatalf("got %d %q %q, want 529 overloaded_error compaction_unavailable", status, typ, code)
			}
		})
	}
	if n := len(h.upstream(dialect.Messages)); n != 0 {
		t.Fatalf("a failed compaction still called the model")
	}
}

func TestMessagesValidation(t *testing.T) {
	h := newMsgHarness(t, nil)
	tests := []struct{ name, cm, want string }{
		{"trigger below minimum", `{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":1000}}]}`, "greater than or equal to 50000"},
		{"trigger type", `{"edits":[{"type":"compact_20260112","trigger":{"type":"tool_uses","value":60000}}]}`, "trigger.type"},
		{"unknown edit", `{"edits":[{"type":"compact_20990101"}]}`, "does not match any of the expected tags"},
		{"extra field", `{"edits":[{"type":"compact_20260112","bogus":1}]}`, "Extra inputs are not permitted"},
		{"pause not bool", `{"edits":[{"type":"compact_20260112","pause_after_compaction":"yes"}]}`, "valid boolean"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"model":"claude-fake","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"context_management":` + tt.cm + `}`
			resp, err := http.Post(h.proxyURL+"/v1/messages", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 || gjson.GetBytes(b, "type").Str != "error" ||
				gjson.GetBytes(b, "error.type").Str != "invalid_request_error" || !strings.Contains(gjson.GetBytes(b, "error.message").Str, tt.want) {
				t.Fatalf("got %d %s", resp.StatusCode, b)
			}
		})
	}
}

func TestMessagesCountTokens(t *testing.T) {
	h := newMsgHarness(t, nil)
	ctx := context.Background()
	hist := append(longHistory(16), userText("q"))
	msg, err := h.ant.Beta.Messages.New(ctx, params(hist, compactEdit(50_000, false)))
	if err != nil {
		t.Fatal(err)
	}
	summaries := len(h.upstream(fakeupstream.KindSummary))
	next := append(append(hist, msg.ToParam()), userText("next"))
	// A huge history behind the block, with a compaction edit whose trigger it crosses: counting
	// applies the block and never compacts.
	next = append(longHistory(16), next...)
	res, err := h.ant.Beta.Messages.CountTokens(ctx, anthropic.BetaMessageCountTokensParams{
		Model: antModel, Messages: next, ContextManagement: compactEdit(50_000, false),
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(h.upstream(fakeupstream.KindSummary)); n != summaries {
		t.Fatalf("count_tokens compacted")
	}
	reqs := h.upstream(fakeupstream.KindCountTokens)
	if len(reqs) != 1 {
		t.Fatalf("%d count_tokens requests upstream", len(reqs))
	}
	up := gjson.ParseBytes(reqs[0].Body)
	if n := len(up.Get("messages").Array()); n != 3 || strings.Contains(up.Raw, `"compaction"`) {
		t.Fatalf("upstream counted %d messages: %.300s", n, up.Raw)
	}
	orig := res.ContextManagement.OriginalInputTokens
	if res.InputTokens <= 0 || orig <= 10*res.InputTokens {
		t.Fatalf("input_tokens %d, original_input_tokens %d", res.InputTokens, orig)
	}
}

// A Claude-Code-shaped streaming request (its betas, ?beta=true, clear_thinking edit, system
// blocks, tools) goes through byte-exact both ways, pings and error bodies included.
func TestMessagesPassThroughByteExact(t *testing.T) {
	h := newMsgHarness(t, nil)
	body := `{"model":"claude-sonnet-4-5","max_tokens":32000,"stream":true,` +
		`"system":[{"type":"text","text":"You are Claude Code, Anthropic's official CLI for Claude.","cache_control":{"type":"ephemeral"}}],` +
		`"messages":[{"role":"user","content":[{"type":"text","text":"list the files"}]}],` +
		`"tools":[{"name":"Bash","description":"Run a command","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}],` +
		`"metadata":{"user_id":"user_abc"},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}}`
	do := func(base string, hdr map[string]string) (int, http.Header, []byte) {
		req, _ := http.NewRequest("POST", base+"/v1/messages?beta=true", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Api-Key", "sk-ant-test")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Add("Anthropic-Beta", "claude-code-20250219,interleaved-thinking-2025-05-14")
		req.Header.Add("Anthropic-Beta", "context-management-2025-06-27")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	for _, tt := range []struct {
		name string
		hdr  map[string]string
	}{
		{"stream", nil},
		{"upstream error", map[string]string{fakeupstream.HeaderStatus: "529"}},
		{"v2 sdk version and bearer", map[string]string{"Anthropic-Version": "2026-10-21", "Authorization": "Bearer sk-ant-oat"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h.fake.Reset()
			wantStatus, _, want := do(h.upURL, tt.hdr)
			h.fake.Reset()
			status, _, got := do(h.proxyURL, tt.hdr)
			if status != wantStatus || !bytes.Equal(got, want) {
				t.Fatalf("through compactd: %d %q\ndirect: %d %q", status, got, wantStatus, want)
			}
			if tt.hdr == nil && !bytes.Contains(got, []byte("event: ping\n")) {
				t.Fatalf("no ping in the stream")
			}
			rec := h.fake.Requests()[0]
			if string(rec.Body) != body || rec.RawQuery != "beta=true" ||
				strings.Join(rec.Header.Values("Anthropic-Beta"), "|") != "claude-code-20250219,interleaved-thinking-2025-05-14|context-management-2025-06-27" {
				t.Fatalf("upstream got query %q betas %q body changed=%v", rec.RawQuery, rec.Header.Values("Anthropic-Beta"), string(rec.Body) != body)
			}
			for k, v := range tt.hdr {
				if rec.Header.Get(k) != v {
					t.Fatalf("header %s = %q, want %q", k, rec.Header.Get(k), v)
				}
			}
		})
	}
}

func TestMessagesApplyEdits(t *testing.T) {
	h := newMsgHarness(t, func(c *proxy.Config) { c.AnthropicApplyEdits = true })
	keep1 := anthropic.BetaClearThinking20251015EditParam{Keep: anthropic.BetaClearThinking20251015EditKeepUnionParam{
		OfThinkingTurns: &anthropic.BetaThinkingTurnsParam{Value: 1}}}
	cm := anthropic.BetaContextManagementConfigParam{Edits: []anthropic.BetaContextManagementConfigEditUnionParam{{OfClearThinking20251015: &keep1}}}
	p := params(append(longHistory(3), userText("q")), cm)
	p.Betas = []anthropic.AnthropicBeta{anthropic.AnthropicBetaContextManagement2025_06_27}
	for _, stream := range []bool{false, true} {
		var msg *anthropic.BetaMessage
		if stream {
			msg = accumulate(t, h.ant.Beta.Messages.NewStreaming(context.Background(), p))
		} else {
			var err error
			if msg, err = h.ant.Beta.Messages.New(context.Background(), p); err != nil {
				t.Fatal(err)
			}
		}
		ae := msg.ContextManagement.AppliedEdits
		if len(ae) != 1 || ae[0].Type != "clear_thinking_20251015" || ae[0].ClearedThinkingTurns != 2 || ae[0].ClearedInputTokens <= 0 {
			t.Fatalf("stream=%v applied_edits = %s", stream, msg.ContextManagement.RawJSON())
		}
		up := h.lastMessages(t)
		if up.Get("context_management").Exists() || strings.Count(up.Raw, `"type":"thinking"`) != 1 || !strings.Contains(up.Raw, marker("T", 2)) {
			t.Fatalf("upstream body: %.400s", up.Raw)
		}
		reqs := h.upstream(dialect.Messages)
		if b := reqs[len(reqs)-1].Header.Get("Anthropic-Beta"); strings.Contains(b, "context-management") {
			t.Fatalf("context-management beta forwarded although compactd applied the edits: %q", b)
		}
	}
}

// The rewritten stream, read raw: every event has an `event:` line equal to its data's type,
// the compaction block is block 0 (null content at start, one compaction_delta), the upstream's
// blocks follow re-indexed, the ping survives, and message_delta carries the iterations.
func TestMessagesSSEFraming(t *testing.T) {
	for _, keepAlive := range []bool{false, true} {
		t.Run(map[bool]string{false: "prompt", true: "committed by pings"}[keepAlive], func(t *testing.T) {
			// With keepAlive the summariser waits until the client has the response headers,
			// which only the keep-alive can have sent.
			gate := make(chan struct{})
			h := newMsgHarness(t, func(c *proxy.Config) {
				if keepAlive {
					c.Summarizer = gated{c.Summarizer, gate}
					c.KeepAlive = time.Millisecond
				}
			})
			p := params(append(longHistory(16), userText("q")), compactEdit(50_000, false))
			body := mustJSON(t, p)
			body, _ = sjson.SetBytes(body, "stream", true)
			resp, err := http.Post(h.proxyURL+"/v1/messages", "application/json", bytes.NewReader(body))
			close(gate)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, raw)
			}
			var types []string
			var blockTypes []string
			for _, ev := range strings.Split(strings.TrimSpace(string(raw)), "\n\n") {
				lines := strings.Split(ev, "\n")
				if len(lines) != 2 || !strings.HasPrefix(lines[0], "event: ") || !strings.HasPrefix(lines[1], "data: ") {
					t.Fatalf("malformed event %q", ev)
				}
				data := gjson.Parse(strings.TrimPrefix(lines[1], "data: "))
				if name := strings.TrimPrefix(lines[0], "event: "); name != data.Get("type").Str {
					t.Fatalf("event %q carries type %q", name, data.Get("type").Str)
				}
				types = append(types, data.Get("type").Str)
				if data.Get("type").Str == "content_block_start" {
					if int(data.Get("index").Int()) != len(blockTypes) {
						t.Fatalf("block index %d, want %d", data.Get("index").Int(), len(blockTypes))
					}
					blockTypes = append(blockTypes, data.Get("content_block.type").Str)
					if len(blockTypes) == 1 && (data.Get("content_block.content").Type != gjson.Null || data.Get("content_block.encrypted_content").Type != gjson.Null) {
						t.Fatalf("compaction block start carries content: %s", data.Raw)
					}
				}
				if data.Get("type").Str == "message_delta" && len(data.Get("usage.iterations").Array()) != 2 {
					t.Fatalf("message_delta usage = %s", data.Get("usage").Raw)
				}
			}
			if !reflect.DeepEqual(blockTypes, []string{"compaction", "text"}) {
				t.Fatalf("blocks %v", blockTypes)
			}
			if !slices.Contains(types, "ping") || types[len(types)-1] != "message_stop" {
				t.Fatalf("events %v", types)
			}
			if keepAlive && types[0] != "ping" {
				t.Fatalf("a slow summariser did not commit the stream with pings: %v", types[:3])
			}
			if n := strings.Count(string(raw), `"compaction_delta"`); n != 1 {
				t.Fatalf("%d compaction_delta events", n)
			}
		})
	}
}

// gated holds the summariser until gate is closed.
type gated struct {
	s    summarizer.Summarizer
	gate chan struct{}
}

func (g gated) Summarize(ctx context.Context, r summarizer.Request) (summarizer.Result, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return summarizer.Result{}, ctx.Err()
	}
	return g.s.Summarize(ctx, r)
}

// Messages compactions archive the raw messages they replaced, searchable by conversation.
func TestMessagesCompactionIsArchived(t *testing.T) {
	var store archive.Store
	h := newMsgHarness(t, withArchive(t, func(c *proxy.Config) { store = c.Archive; c.AnthropicUpstream = c.Upstream }))
	hist := append(longHistory(16), userText("what next?"))
	if _, err := h.ant.Beta.Messages.New(context.Background(), params(hist, compactEdit(50_000, false)),
		option.WithHeader("X-Compactd-Session", "conv-ant")); err != nil {
		t.Fatal(err)
	}
	convs, err := store.Conversations(context.Background(), "")
	if err != nil || len(convs) != 1 || convs[0].ID != "conv-ant" {
		t.Fatalf("conversations = %+v, err %v", convs, err)
	}
}
