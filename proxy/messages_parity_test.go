package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/proxy"
)

// Messages compactions go through the same core as Responses ones: the facts ledger, the gap
// check, speculative compaction and the server-side policy apply to them too.

// toolRound is an assistant Bash tool_use and the user's tool_result for it.
func toolRound(id, command, output string) []anthropic.BetaMessageParam {
	return []anthropic.BetaMessageParam{
		{OfAssistant: &anthropic.BetaAssistantMessageParam{Content: []anthropic.BetaContentBlockParamUnion{
			anthropic.NewBetaToolUseBlock(id, map[string]any{"command": command}, "Bash")}}},
		anthropic.NewBetaUserMessage(anthropic.NewBetaToolResultBlock(id, output, false)),
	}
}

// noEdits is a request without context_management.
var noEdits anthropic.BetaContextManagementConfigParam

// send runs one non-streamed Messages turn.
func (h *msgHarness) send(t *testing.T, msgs []anthropic.BetaMessageParam, cm anthropic.BetaContextManagementConfigParam) *anthropic.BetaMessage {
	t.Helper()
	msg, err := h.ant.Beta.Messages.New(context.Background(), params(msgs, cm))
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// The ledger line and (with --gap-check) the gap-check findings are sealed in the block and
// rendered in the next turn's handoff.
func TestMessagesLedgerAndGapCheck(t *testing.T) {
	for _, gap := range []bool{false, true} {
		t.Run(map[bool]string{false: "ledger", true: "gap-check"}[gap], func(t *testing.T) {
			h := newMsgHarness(t, func(c *proxy.Config) { c.GapCheck = gap })
			hist := longHistory(16)
			hist = append(append(append([]anthropic.BetaMessageParam{}, hist[:2]...),
				toolRound("toolu_cfg", "cat config.yaml", "server:\n  port: 8443\n  # "+plantedFact+"\n")...), hist[2:]...)
			hist = append(hist, userText("go on"))
			msg := h.send(t, hist, compactEdit(50_000, false))
			cb := checkCompaction(t, msg, 2)
			if n, want := len(h.upstream(fakeupstream.KindSummary)), map[bool]int{false: 1, true: 2}[gap]; n != want {
				t.Fatalf("%d summariser calls, want %d", n, want)
			}
			next := append(append(hist, msg.ToParam()), userText("and then?"))
			h.send(t, next, compactEdit(50_000, false))
			up := checkUpstreamHandoff(t, h, cb.Content, 3)
			text := up.Get("messages.0.content.0.text").Str
			if !strings.Contains(text, compact.LedgerHeading) || !strings.Contains(text, "cat config.yaml") {
				t.Fatalf("the next turn's handoff lacks the ledger line of the command run: %q", text[len(handoff.MessagesPrefix):])
			}
			if strings.Contains(text, "### "+compact.GapCheckTitle) != gap {
				t.Fatalf("gap check findings in the handoff = %v, want %v", !gap, gap)
			}
		})
	}
}

// Past the speculative fraction a turn starts summarising in the background; the crossing turn
// uses that summary (no summariser call of its own) and keeps what followed the prefix verbatim
// behind it; the turns after rebuild the same upstream context byte for byte.
func TestMessagesSpeculativeCompaction(t *testing.T) {
	h := newMsgHarness(t, func(c *proxy.Config) { c.Speculative.Fraction = 0.5 })
	// ~43k tokens: below the 50k trigger, past half of it.
	hist := append(longHistory(11), userText("q1"))
	r1 := h.send(t, hist, compactEdit(50_000, false))
	if r1.Content[0].Type == "compaction" {
		t.Fatal("compacted below the threshold")
	}
	waitFor(t, func() bool { return len(h.upstream(fakeupstream.KindSummary)) == 1 })

	// The crossing turn: a long new message takes it past 50k.
	big := "U-CROSS " + strings.Repeat("please refactor the parser module ", 3000)
	hist = append(append(hist, r1.ToParam()), userText(big))
	r2 := h.send(t, hist, compactEdit(50_000, false))
	cb := checkCompaction(t, r2, 2)
	if n := len(h.upstream(fakeupstream.KindSummary)); n != 1 {
		t.Fatalf("%d summariser calls, want 1: the crossing turn should use the speculative summary", n)
	}
	crossing := checkUpstreamHandoff(t, h, cb.Content, 4).Get("messages").Array()
	// The speculated prefix ended before the first turn's newest user message: it, the reply
	// and the new message follow the summary verbatim.
	if crossing[1].Get("content.0.text").Str != "q1" || crossing[2].Get("role").Str != "assistant" || !strings.HasPrefix(crossing[3].Get("content.0.text").Str, "U-CROSS") {
		t.Fatalf("upstream context after the handoff = %.300s", crossing[1:])
	}

	// Two more turns carry the block (without context_management: they do not compact).
	hist = append(append(hist, r2.ToParam()), userText("U-AFTER"))
	r3 := h.send(t, hist, noEdits)
	third := h.lastMessages(t).Get("messages").Array()
	hist = append(append(hist, r3.ToParam()), userText("U-AFTER-2"))
	h.send(t, hist, noEdits)
	fourth := h.lastMessages(t).Get("messages").Array()
	samePrefix(t, "the turn after the crossing turn", crossing, third)
	samePrefix(t, "the second turn after it", third, fourth)
	if n := len(h.upstream(fakeupstream.KindSummary)); n != 1 {
		t.Fatalf("%d summariser calls after the crossing turn", n-1)
	}
}

// samePrefix fails unless every message of prev is, byte for byte, the same message of next.
func samePrefix(t *testing.T, what string, prev, next []gjson.Result) {
	t.Helper()
	if len(next) <= len(prev) {
		t.Fatalf("%s: %d messages, want more than %d", what, len(next), len(prev))
	}
	for i := range prev {
		if next[i].Raw != prev[i].Raw {
			t.Fatalf("%s diverges from the turn before at messages[%d]:\n%.300s\n%.300s", what, i, prev[i].Raw, next[i].Raw)
		}
	}
}

// Two consecutive turns carrying the same (non-speculative) block send the upstream the same
// prefix, byte for byte, and the handoff is the Messages one: it does not claim that recent
// messages were kept verbatim, since a Messages compaction keeps none.
func TestMessagesHandoffIsByteStable(t *testing.T) {
	h := newMsgHarness(t, nil)
	hist := append(longHistory(16), userText("go on"))
	r1 := h.send(t, hist, compactEdit(50_000, false))
	cb := checkCompaction(t, r1, 2)
	crossing := h.lastMessages(t).Get("messages").Array()
	hist = append(append(hist, r1.ToParam()), userText("and then?"))
	r2 := h.send(t, hist, compactEdit(50_000, false))
	second := checkUpstreamHandoff(t, h, cb.Content, 3).Get("messages").Array()
	hist = append(append(hist, r2.ToParam()), userText("and after that?"))
	h.send(t, hist, compactEdit(50_000, false))
	third := h.lastMessages(t).Get("messages").Array()
	samePrefix(t, "the turn after the compaction", crossing, second)
	samePrefix(t, "the second turn carrying the block", second, third)
	if text := crossing[0].Get("content.0.text").Str; strings.Contains(text, "kept verbatim above") || !strings.HasPrefix(text, handoff.MessagesPrefix) {
		t.Fatalf("Messages handoff text = %.400q", text)
	}
}

// The operator's --compact-threshold applies to Messages requests without context_management,
// transparently: the client (which asked for nothing) gets the upstream's answer unchanged, no
// compaction block, and an X-Compactd-Compaction header; the memo remembers the compaction, so
// the turns after it get the same handoff back without a new summary — one summariser call per
// compaction over a 20-turn conversation, and every upstream request between two compactions
// extends the one before it, byte for byte. A threshold for one route leaves the other alone.
func TestMessagesTransparentPolicy(t *testing.T) {
	h := newMsgHarness(t, func(c *proxy.Config) {
		c.Policy = compact.Policy{Threshold: 0, Routes: map[dialect.Name]int{dialect.Messages: 30_000}}
		c.Speculative.Fraction = -1 // one summary per compaction, counted exactly
	})
	hist := longHistory(8)
	var prev []gjson.Result
	summaries, compactions, lastState := 0, 0, ""
	for turn := 0; turn < 20; turn++ {
		hist = append(hist, userText(fmt.Sprintf("turn %d: %s", turn, strings.Repeat("go on with the parser ", 400))))
		var hr *http.Response
		msg, err := h.ant.Beta.Messages.New(context.Background(), params(hist, noEdits), antoption.WithResponseInto(&hr))
		if err != nil {
			t.Fatal(err)
		}
		hdr := hr.Header
		for _, b := range msg.Content {
			if b.Type == "compaction" {
				t.Fatalf("turn %d: a compaction block reached a client that asked for none", turn)
			}
		}
		up := h.lastMessages(t).Get("messages").Array()
		state := hdr.Get("X-Compactd-Compaction")
		n := len(h.upstream(fakeupstream.KindSummary))
		switch {
		case strings.HasPrefix(state, "compacted;"):
			compactions++
			if strings.HasPrefix(lastState, "compacted;") {
				t.Fatalf("turn %d compacted again right after a compaction: the compacted context was not remembered", turn)
			}
			if n != summaries+1 {
				t.Fatalf("turn %d compacted with %d summariser calls, want 1", turn, n-summaries)
			}
			if !strings.HasPrefix(up[0].Get("content.0.text").Str, handoff.MessagesPrefix) {
				t.Fatalf("turn %d: upstream messages[0] is not the handoff: %.200s", turn, up[0].Raw)
			}
		case strings.HasPrefix(state, "applied;"):
			if n != summaries {
				t.Fatalf("turn %d re-summarised (%d calls) instead of applying the remembered compaction", turn, n-summaries)
			}
			if prev != nil {
				samePrefix(t, fmt.Sprintf("turn %d", turn), prev, up)
			}
		default:
			if compactions > 0 {
				t.Fatalf("turn %d after a compaction carries no X-Compactd-Compaction header", turn)
			}
		}
		summaries, prev, lastState = n, up, state
		hist = append(hist, msg.ToParam())
	}
	if compactions < 2 {
		t.Fatalf("%d compactions in 20 turns, want at least 2 (chained)", compactions)
	}
	if summaries != compactions {
		t.Fatalf("%d summariser calls for %d compactions", summaries, compactions)
	}

	// The Responses route has no policy here: a long input goes through uncompacted.
	r, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", toAny(history(30, 400))))
	if err != nil {
		t.Fatal(err)
	}
	if r.Output[0].Type == "compaction" {
		t.Fatal("the Messages policy compacted a Responses turn")
	}
}

// With a Messages policy on, a request under it that uses nothing else of compactd still goes
// through byte for byte (Claude Code's traffic): request body, query, betas and response.
func TestMessagesPolicyBelowThresholdIsByteExact(t *testing.T) {
	h := newMsgHarness(t, func(c *proxy.Config) { c.Policy = compact.Policy{Threshold: 1_000_000} })
	body := `{"model":"claude-sonnet-4-5","max_tokens":32000,"stream":true,` +
		`"system":[{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}],` +
		`"messages":[{"role":"user","content":[{"type":"text","text":"list the files"}]}],` +
		`"metadata":{"user_id":"user_abc"},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}}`
	do := func(base string) []byte {
		req, _ := http.NewRequest("POST", base+"/v1/messages?beta=true", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Api-Key", "sk-ant-test")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Add("Anthropic-Beta", "claude-code-20250219,compact-2026-01-12")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	h.fake.Reset()
	want := do(h.upURL)
	h.fake.Reset()
	got := do(h.proxyURL)
	if !bytes.Equal(got, want) {
		t.Fatalf("response through compactd differs:\n%q\n%q", got, want)
	}
	rec := h.fake.Requests()[0]
	if string(rec.Body) != body || rec.RawQuery != "beta=true" || rec.Header.Get("Anthropic-Beta") != "claude-code-20250219,compact-2026-01-12" {
		t.Fatalf("upstream got query %q betas %q body changed=%v", rec.RawQuery, rec.Header.Values("Anthropic-Beta"), string(rec.Body) != body)
	}
}
