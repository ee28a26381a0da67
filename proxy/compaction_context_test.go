package proxy_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/proxy"
)

// Issue 23, defect 3: Claude Code sends a role:"system" entry in messages, listing its deferred
// tools (MCP tools included) and its environment. A transparent compaction keeps it verbatim,
// right after the handoff, on the compacting turn and on every turn the memo applies the
// compaction to. The body is a captured Claude Code 2.1.332 request, with earlier exchanges
// inserted so the conversation is worth compacting.
func TestMessagesKeepsClaudeCodeSystemEntry(t *testing.T) {
	raw, err := os.ReadFile("../internal/memo/testdata/claude-code-2.1.332/04_messages.json")
	if err != nil {
		t.Fatal(err)
	}
	orig := gjson.GetBytes(raw, "messages").Array()
	sysEntry := orig[1]
	if sysEntry.Get("role").Str != "system" || !strings.Contains(sysEntry.Get("content").Str, "deferred tools") {
		t.Fatalf("the capture's messages[1] is not Claude Code's system entry: %.200s", sysEntry.Raw)
	}
	var msgs []string
	for i, m := range orig {
		msgs = append(msgs, m.Raw)
		if i == 4 {
			for j := range 6 {
				msgs = append(msgs,
					`{"role":"user","content":"`+marker("U", j)+` `+strings.Repeat("please refactor the parser module ", 300)+`"}`,
					`{"role":"assistant","content":[{"type":"text","text":"`+marker("A", j)+` `+strings.Repeat("I changed parse.go line 42 ", 300)+`"}]}`)
			}
		}
	}
	body, _ := sjson.SetRawBytes(raw, "messages", []byte("["+strings.Join(msgs, ",")+"]"))
	body, _ = sjson.SetBytes(body, "stream", false)

	h := newMsgHarness(t, func(c *proxy.Config) {
		c.Policy = compact.Policy{Routes: map[dialect.Name]int{dialect.Messages: 20_000}}
		c.Speculative.Fraction = -1
	})
	post := func(body []byte) string {
		req, _ := http.NewRequest("POST", h.proxyURL+"/v1/messages", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Api-Key", "sk-ant-test")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %.300s", resp.StatusCode, b)
		}
		return resp.Header.Get("X-Compactd-Compaction")
	}
	check := func(turn string) {
		t.Helper()
		up := h.lastMessages(t).Get("messages").Array()
		if !strings.HasPrefix(up[0].Get("content.0.text").Str, handoff.MessagesPrefix) {
			t.Fatalf("%s: upstream messages[0] is not the handoff", turn)
		}
		n := 0
		for i, m := range up {
			if m.Get("role").Str == "system" {
				n++
				if i != 1 || m.Raw != sysEntry.Raw {
					t.Errorf("%s: the system entry is at messages[%d] (want 1) or changed", turn, i)
				}
			}
		}
		if n != 1 {
			t.Fatalf("%s: the upstream got %d role:system entries, want Claude Code's one", turn, n)
		}
	}
	if report := post(body); !strings.HasPrefix(report, "compacted;") {
		t.Fatalf("the turn did not compact: %q", report)
	}
	check("the compacting turn")

	next, _ := sjson.SetRawBytes(body, "messages.-1", []byte(`{"role":"assistant","content":[{"type":"text","text":"done"}]}`))
	next, _ = sjson.SetRawBytes(next, "messages.-1", []byte(`{"role":"user","content":"thanks, go on"}`))
	if report := post(next); !strings.HasPrefix(report, "applied;") {
		t.Fatalf("the next turn did not get the compaction from the memo: %q", report)
	}
	check("the memo's turn")
}

// The context that is not conversation — Responses developer and system messages, Chat system
// and developer messages — is kept verbatim, in order, ahead of the handoff.
func TestInstructionsSurviveCompaction(t *testing.T) {
	t.Run("responses", func(t *testing.T) {
		h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) {
			c.Policy = compact.Policy{Routes: map[dialect.Name]int{dialect.Responses: 3_000}}
			c.RetainTokens = 1_000
			c.Speculative.Fraction = -1
		})
		input := append([]any{map[string]any{"type": "message", "role": "system", "content": "SYS-MARK keep me"}}, toAny(history(4, 400))...)
		var hr *http.Response
		if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
			option.WithJSONSet("input", input), option.WithResponseInto(&hr)); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(hr.Header.Get("X-Compactd-Compaction"), "compacted;") {
			t.Fatalf("not compacted: %q", hr.Header.Get("X-Compactd-Compaction"))
		}
		up := h.lastUpstreamInput(t)
		if up[0].Get("role").Str != "system" || up[0].Get("content").Str != "SYS-MARK keep me" ||
			up[1].Get("role").Str != "developer" || up[1].Get("content").Str != "You are a careful coding agent." {
			t.Fatalf("instructions not kept first and verbatim: %.200s %.200s", up[0].Raw, up[1].Raw)
		}
	})
	t.Run("chat", func(t *testing.T) {
		h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) {
			c.Policy = compact.Policy{Routes: map[dialect.Name]int{dialect.Chat: 3_000}}
			c.RetainTokens = 1_000
			c.Speculative.Fraction = -1
		})
		msgs := append([]openai.ChatCompletionMessageParamUnion{openai.DeveloperMessage("DEV-MARK keep me")}, chatHistory(4, 1600)...)
		var hr *http.Response
		if _, err := h.client.Chat.Completions.New(context.Background(), chatParams(msgs), option.WithResponseInto(&hr)); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(hr.Header.Get("X-Compactd-Compaction"), "compacted;") {
			t.Fatalf("not compacted: %q", hr.Header.Get("X-Compactd-Compaction"))
		}
		reqs := h.upstream(dialect.Chat)
		up := gjson.GetBytes(reqs[len(reqs)-1].Body, "messages").Array()
		if up[0].Get("role").Str != "developer" || up[0].Get("content").Str != "DEV-MARK keep me" ||
			up[1].Get("role").Str != "system" || up[1].Get("content").Str != "You are a careful coding agent." {
			t.Fatalf("instructions not kept first and verbatim: %.200s %.200s", up[0].Raw, up[1].Raw)
		}
	})
}
