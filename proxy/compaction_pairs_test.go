package proxy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// orphanToolResults lists the tool_result ids of Messages messages whose tool_use is not in the
// assistant message just before (what the Anthropic API refuses with a 400).
func orphanToolResults(msgs []gjson.Result) []string {
	var out []string
	for i, m := range msgs {
		m.Get("content").ForEach(func(_, b gjson.Result) bool {
			if b.Get("type").Str != "tool_result" {
				return true
			}
			id := b.Get("tool_use_id").Str
			found := false
			if i > 0 && msgs[i-1].Get("role").Str == "assistant" {
				msgs[i-1].Get("content").ForEach(func(_, u gjson.Result) bool {
					found = found || (u.Get("type").Str == "tool_use" && u.Get("id").Str == id)
					return !found
				})
			}
			if !found {
				out = append(out, id)
			}
			return true
		})
	}
	return out
}

// compactedTokens reads tokens_before and tokens_after from an X-Compactd-Compaction report.
func compactedTokens(t *testing.T, report string) (before, after int) {
	t.Helper()
	for _, part := range strings.Split(report, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		n, _ := strconv.Atoi(v)
		switch k {
		case "tokens_before":
			before = n
		case "tokens_after":
			after = n
		}
	}
	if before == 0 {
		t.Fatalf("no tokens_before in %q", report)
	}
	return before, after
}

// Issue 23, defect 1: with speculation on (the default fraction), a Messages turn just under a
// messages= threshold ends in a tool_result, and the next crosses it. The speculative summary
// used to cover the tool_use and keep its tool_result verbatim behind the handoff — an orphan
// tool_result, which the Anthropic API refuses. The speculative prefix now ends before the
// assistant's tool_use, so the pair is kept together, and the compacted request is smaller.
func TestMessagesSpeculationKeepsToolPairs(t *testing.T) {
	h := newMsgHarness(t, func(c *proxy.Config) {
		c.Policy = compact.Policy{Routes: map[dialect.Name]int{dialect.Messages: 25_000}}
	})
	toolUse := anthropic.BetaMessageParam{OfAssistant: &anthropic.BetaAssistantMessageParam{Content: []anthropic.BetaContentBlockParamUnion{
		anthropic.NewBetaToolUseBlock("toolu_A", map[string]any{"file_path": "notes.txt"}, "Read")}}}
	toolResult := anthropic.NewBetaUserMessage(anthropic.NewBetaToolResultBlock("toolu_A", "listen_port: 7431", false))
	// ~22.6k tokens: past 85% of 25k, under it; it ends in the tool_result.
	hist := append(longHistory(6), userText("read notes.txt"), toolUse, toolResult)
	var hr *http.Response
	if _, err := h.ant.Beta.Messages.New(context.Background(), params(hist, noEdits), antoption.WithResponseInto(&hr)); err != nil {
		t.Fatal(err)
	}
	if got := hr.Header.Get("X-Compactd-Compaction"); got != "" {
		t.Fatalf("the turn under the threshold was compacted: %q", got)
	}
	waitFor(t, func() bool { return len(h.upstream(fakeupstream.KindSummary)) == 1 }) // the speculative summary

	// The next turn crosses the threshold.
	answer := anthropic.BetaMessageParam{OfAssistant: &anthropic.BetaAssistantMessageParam{Content: []anthropic.BetaContentBlockParamUnion{
		anthropic.NewBetaTextBlock("The port is 7431. " + strings.Repeat("I also checked parse.go line 42 ", 500))}}}
	hist = append(hist, answer, userText("what was the port?"))
	p := params(hist, noEdits)
	clientBody, _ := json.Marshal(p)
	if _, err := h.ant.Beta.Messages.New(context.Background(), p, antoption.WithResponseInto(&hr)); err != nil {
		t.Fatal(err)
	}
	report := hr.Header.Get("X-Compactd-Compaction")
	if !strings.HasPrefix(report, "compacted;") {
		t.Fatalf("the crossing turn did not compact: %q", report)
	}
	if n := len(h.upstream(fakeupstream.KindSummary)); n != 1 {
		t.Errorf("%d summariser calls: the crossing turn should use the speculative summary", n)
	}
	up := h.lastMessages(t)
	msgs := up.Get("messages").Array()
	if orphans := orphanToolResults(msgs); len(orphans) > 0 {
		t.Fatalf("the upstream got tool_results without their tool_use: %v", orphans)
	}
	var shape []string
	for _, m := range msgs {
		shape = append(shape, m.Get("role").Str+":"+m.Get("content.0.type").Str)
	}
	if want := "user:text assistant:tool_use user:tool_result assistant:text user:text"; strings.Join(shape, " ") != want {
		t.Errorf("upstream messages %v, want %s", shape, want)
	}
	if before, after := compactedTokens(t, report); after >= before {
		t.Errorf("the compaction grew the request: tokens_before=%d tokens_after=%d", before, after)
	}
	if len(up.Raw) >= len(clientBody) {
		t.Errorf("the forwarded body (%d bytes) is not smaller than the client's (%d)", len(up.Raw), len(clientBody))
	}
}
