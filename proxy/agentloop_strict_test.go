package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/proxy"
)

// An agent loop on /v1/messages under the transparent policy, every request ending in a
// tool_result, with speculation off and on (issue 23 defect 1: a speculative summary covered a
// tool_use and the upstream got its tool_result as an orphan). The strict fake upstream refuses
// any request whose tool pairing the Messages API would refuse, and the harness fails the test
// on a refusal; the loop must also compact more than once, so the memo's re-application and the
// crossing turns are both exercised.
func TestMessagesAgentLoopUnderStrictUpstream(t *testing.T) {
	for _, frac := range []float64{-1, 0.85} {
		t.Run(fmt.Sprintf("speculative-fraction=%v", frac), func(t *testing.T) {
			h := newMsgHarness(t, func(c *proxy.Config) {
				c.Policy = compact.Policy{Routes: map[dialect.Name]int{dialect.Messages: 30_000}}
				c.Speculative.Fraction = frac
			})
			hist := []anthropic.BetaMessageParam{userText("fix the build " + strings.Repeat("please ", 50))}
			compactions := 0
			for i := 0; i < 60; i++ {
				id := fmt.Sprintf("toolu_%02d", i)
				hist = append(hist,
					anthropic.BetaMessageParam{OfAssistant: &anthropic.BetaAssistantMessageParam{Content: []anthropic.BetaContentBlockParamUnion{
						anthropic.NewBetaTextBlock("reading"), anthropic.NewBetaToolUseBlock(id, map[string]any{"file_path": "x.go"}, "Read")}}},
					anthropic.NewBetaUserMessage(anthropic.NewBetaToolResultBlock(id, strings.Repeat("line of code here ", 400), false)))
				var hr *http.Response
				if _, err := h.ant.Beta.Messages.New(context.Background(), params(hist, noEdits), antoption.WithResponseInto(&hr)); err != nil {
					t.Fatalf("turn %d: %v", i, err)
				}
				if strings.HasPrefix(hr.Header.Get("X-Compactd-Compaction"), "compacted;") {
					compactions++
				}
			}
			if compactions < 2 {
				t.Errorf("%d compactions in 60 turns, want at least 2", compactions)
			}
		})
	}
}
