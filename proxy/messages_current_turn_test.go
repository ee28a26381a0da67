package proxy_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/proxy"
)

// A transparent Messages compaction keeps the client's current turn verbatim behind the
// handoff: the prompt it just sent, or the prompt with the tool calls and results it is in the
// middle of. Found with the real Claude Code: summarising the whole conversation, that turn
// included, left the model only the summary's first words of the prompt it was being asked, so
// Claude Code's Read never ran (and with --memo=false no later turn's prompt reached the model
// at all). The next turn gets the same upstream prefix from the memo, the kept turn included. A
// current turn that alone takes half the threshold is compacted with the rest, as before.
func TestMessagesTransparentKeepsCurrentTurn(t *testing.T) {
	prompt := "Turn 12: read notes.txt and tell me the port"
	toolUse := anthropic.BetaMessageParam{OfAssistant: &anthropic.BetaAssistantMessageParam{Content: []anthropic.BetaContentBlockParamUnion{
		anthropic.NewBetaToolUseBlock("toolu_1", map[string]any{"file_path": "notes.txt"}, "Read")}}}
	toolResult := anthropic.NewBetaUserMessage(anthropic.NewBetaToolResultBlock("toolu_1", "listen_port: 7431", false))
	for _, tc := range []struct {
		name string
		turn []anthropic.BetaMessageParam
		kept []string // the roles and first block types the upstream sees after the handoff
	}{
		{"a new prompt", []anthropic.BetaMessageParam{userText(prompt)}, []string{"user:text"}},
		{"a prompt and its tool round", []anthropic.BetaMessageParam{userText(prompt), toolUse, toolResult},
			[]string{"user:text", "assistant:tool_use", "user:tool_result"}},
		{"a current turn past half the threshold", []anthropic.BetaMessageParam{userText(prompt + strings.Repeat(" and more words", 6000))}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newMsgHarness(t, func(c *proxy.Config) {
				c.Policy = compact.Policy{Routes: map[dialect.Name]int{dialect.Messages: 30_000}}
				c.Speculative.Fraction = -1
			})
			hist := append(longHistory(12), tc.turn...)
			var hr *http.Response
			msg, err := h.ant.Beta.Messages.New(context.Background(), params(hist, noEdits), antoption.WithResponseInto(&hr))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(hr.Header.Get("X-Compactd-Compaction"), "compacted;") {
				t.Fatalf("the turn did not compact: %q", hr.Header.Get("X-Compactd-Compaction"))
			}
			up := h.lastMessages(t).Get("messages").Array()
			if !strings.HasPrefix(up[0].Get("content.0.text").Str, handoff.MessagesPrefix) {
				t.Fatalf("upstream messages[0] is not the handoff: %.200s", up[0].Raw)
			}
			var got []string
			for _, m := range up[1:] {
				got = append(got, m.Get("role").Str+":"+m.Get("content.0.type").Str)
			}
			if strings.Join(got, " ") != strings.Join(tc.kept, " ") {
				t.Fatalf("after the handoff the upstream sees %v, want %v", got, tc.kept)
			}
			if tc.kept != nil && up[1].Get("content.0.text").Str != prompt {
				t.Errorf("the prompt did not reach the upstream verbatim: %.200s", up[1].Raw)
			}
			handoffRaw := up[0].Raw

			// The next turn: the memo applies the same compaction, the kept turn after the handoff.
			hist = append(hist, msg.ToParam(), userText("thanks, go on"))
			if _, err := h.ant.Beta.Messages.New(context.Background(), params(hist, noEdits), antoption.WithResponseInto(&hr)); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(hr.Header.Get("X-Compactd-Compaction"), "applied;") {
				t.Fatalf("the next turn did not get the compaction from the memo: %q", hr.Header.Get("X-Compactd-Compaction"))
			}
			next := h.lastMessages(t).Get("messages").Array()
			if len(next) != len(up)+2 || next[0].Raw != handoffRaw {
				t.Fatalf("the next turn's upstream view is %d messages (want %d) or its handoff changed", len(next), len(up)+2)
			}
			for i := 1; i < len(up); i++ {
				if next[i].Get("content").Raw != up[i].Get("content").Raw {
					t.Errorf("message %d changed between the two turns", i)
				}
			}
		})
	}
}
