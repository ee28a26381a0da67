package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/proxy"
)

// The transparent policy on Responses: a client that asks for no compaction (no
// context_management) and drops what it does not know gets the upstream's answer unchanged —
// no compaction item — while compactd compacts what the upstream sees; the memo gives the next
// turns the same handoff back. Over 20 turns: one summariser call per compaction, never two
// compactions in a row, and between two compactions each upstream input extends the one before
// it byte for byte (the upstream's prompt cache keeps hitting).
func TestResponsesTransparentPolicy(t *testing.T) {
	for _, mode := range []struct {
		name   string
		mutate func(*proxy.Config)
	}{
		{"memo in memory", func(*proxy.Config) {}},
		{"memo in the archive database", withArchive(t, nil)},
	} {
		t.Run(mode.name, func(t *testing.T) {
			h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) {
				c.Policy = compact.Policy{Routes: map[dialect.Name]int{dialect.Responses: 8_000}}
				c.RetainTokens = 1_000
				c.Speculative.Fraction = -1 // one summary per compaction, counted exactly
				mode.mutate(c)
			})
			input := toAny(history(4, 400))
			var prev []gjson.Result
			summaries, compactions, lastState := 0, 0, ""
			for turn := 0; turn < 20; turn++ {
				input = append(input, map[string]any{"type": "message", "role": "user",
					"content": fmt.Sprintf("turn %d: %s", turn, strings.Repeat("go on with the parser ", 120))})
				var hr *http.Response
				resp, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
					option.WithJSONSet("input", input), option.WithResponseInto(&hr))
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range resp.Output {
					if o.Type == "compaction" {
						t.Fatalf("turn %d: a compaction item reached a client that asked for none", turn)
					}
				}
				up := h.lastUpstreamInput(t)
				state := hr.Header.Get("X-Compactd-Compaction")
				n := len(h.upstream(fakeupstream.KindSummary))
				switch {
				case strings.HasPrefix(state, "compacted;"):
					compactions++
					if n != summaries+1 {
						t.Fatalf("turn %d compacted with %d summariser calls, want 1", turn, n-summaries)
					}
					if strings.HasPrefix(lastState, "compacted;") {
						t.Fatalf("turn %d compacted again right after a compaction: it was not remembered", turn)
					}
					if !hasHandoff(up) {
						t.Fatalf("turn %d: no handoff in the upstream input", turn)
					}
				case strings.HasPrefix(state, "applied;"):
					if n != summaries {
						t.Fatalf("turn %d re-summarised instead of applying the remembered compaction", turn)
					}
					if len(up) <= len(prev) {
						t.Fatalf("turn %d: %d upstream items, fewer than the turn before (%d)", turn, len(up), len(prev))
					}
					for i := range prev {
						if up[i].Raw != prev[i].Raw {
							t.Fatalf("turn %d diverges from the turn before at input[%d]:\n%.200s\n%.200s", turn, i, prev[i].Raw, up[i].Raw)
						}
					}
				default:
					if compactions > 0 {
						t.Fatalf("turn %d after a compaction carries no X-Compactd-Compaction header", turn)
					}
				}
				summaries, prev, lastState = n, up, state
				// The client keeps only the assistant's messages, as a client that knows no
				// compaction items would.
				for _, o := range resp.Output {
					input = append(input, map[string]any{"type": "message", "role": "assistant",
						"content": []map[string]any{{"type": "output_text", "text": o.Content[0].Text}}})
				}
			}
			if compactions < 2 || summaries != compactions {
				t.Fatalf("%d compactions, %d summariser calls: want at least 2 compactions, one call each", compactions, summaries)
			}
		})
	}
}

func hasHandoff(items []gjson.Result) bool {
	for _, it := range items {
		if strings.HasPrefix(it.Get("content.0.text").Str, handoff.Prefix) || strings.HasPrefix(it.Get("content").Str, handoff.Prefix) {
			return true
		}
	}
	return false
}

// The transparent policy on Chat Completions with the openai-go chat client: a 20-turn agent
// conversation with large tool outputs, resent whole every turn. One summariser call per
// compaction, never two compactions in a row (the memo applies the last one), and between two
// compactions each upstream request's messages extend the turn before's, byte for byte.
func TestChatTransparentPolicyWithMemo(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) {
		c.Policy = compact.Policy{Routes: map[dialect.Name]int{dialect.Chat: 6_000}}
		c.RetainTokens = 1_000
		c.Speculative.Fraction = -1
	})
	msgs := chatHistory(2, 400)
	msgs = msgs[:len(msgs)-1]
	var prev []gjson.Result
	summaries, compactions, lastState := 0, 0, ""
	for turn := 0; turn < 20; turn++ {
		id := fmt.Sprintf("call_t%d", turn)
		msgs = append(msgs, openai.UserMessage(fmt.Sprintf("turn %d: run the next check", turn)),
			openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
				ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: id, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "shell", Arguments: `{"cmd":"go test"}`}}}}}},
			openai.ToolMessage(fmt.Sprintf("T%d ", turn)+strings.Repeat("ok  pkg/parser 0.12s line ", 60), id),
			openai.UserMessage(fmt.Sprintf("turn %d: what next?", turn)))
		var hr *http.Response
		cc, err := h.client.Chat.Completions.New(context.Background(), chatParams(msgs), option.WithResponseInto(&hr))
		if err != nil {
			t.Fatal(err)
		}
		reqs := h.upstream(dialect.Chat)
		up := gjson.GetBytes(reqs[len(reqs)-1].Body, "messages").Array()
		state := hr.Header.Get("X-Compactd-Compaction")
		n := len(h.upstream(fakeupstream.KindSummary))
		switch {
		case strings.HasPrefix(state, "compacted;"):
			compactions++
			if n != summaries+1 || strings.HasPrefix(lastState, "compacted;") {
				t.Fatalf("turn %d: %d summariser calls after %q", turn, n-summaries, lastState)
			}
		case strings.HasPrefix(state, "applied;"):
			if n != summaries {
				t.Fatalf("turn %d re-summarised instead of applying the remembered compaction", turn)
			}
			for i := range prev {
				if i >= len(up) || up[i].Raw != prev[i].Raw {
					t.Fatalf("turn %d diverges from the turn before at messages[%d] (state %q, last %q):\n%.300s\n%.300s", turn, i, state, lastState, prev[i].Raw, up[min(i, len(up)-1)].Raw)
				}
			}
		default:
			if compactions > 0 {
				t.Fatalf("turn %d after a compaction carries no X-Compactd-Compaction header", turn)
			}
		}
		summaries, prev, lastState = n, up, state
		msgs = append(msgs, openai.ChatCompletionMessageParamOfAssistant(cc.Choices[0].Message.Content))
	}
	if compactions < 2 || summaries != compactions {
		t.Fatalf("%d compactions, %d summariser calls: want at least 2 compactions, one call each", compactions, summaries)
	}
}
