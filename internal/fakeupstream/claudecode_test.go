package fakeupstream

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestClaudeCodeCompactReply: Claude Code's compaction request (its prompt beside the last
// tool_result, as 2.1.332 sends it) gets a <summary> block; other Messages requests, and the
// same words on the Responses route, are answered as before.
func TestClaudeCodeCompactReply(t *testing.T) {
	_, base := start(t, Options{})
	prompt := "Your task is to create a detailed summary of the conversation so far, paying close attention"
	for _, tc := range []struct {
		name, path, body string
		summary          bool
	}{
		{"prompt beside a tool_result", "/v1/messages", `{"model":"m","max_tokens":10,"messages":[
			{"role":"user","content":"read it"},
			{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"},{"type":"text","text":"` + prompt + `"}]}]}`, true},
		{"prompt alone", "/v1/messages", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"` + prompt + `"}]}`, true},
		{"ordinary turn", "/v1/messages", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hello"}]}`, false},
		{"prompt in an earlier message only", "/v1/messages", `{"model":"m","max_tokens":10,"messages":[
			{"role":"user","content":"` + prompt + `"},{"role":"assistant","content":"ok"},{"role":"user","content":"next"}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := post(t, base+tc.path, tc.body)
			if status != 200 {
				t.Fatalf("status %d: %s", status, body)
			}
			text := gjson.GetBytes(body, "content.0.text").Str
			got := strings.Contains(text, "<summary>"+ClaudeCodeSummary+"</summary>")
			if got != tc.summary {
				t.Errorf("summary reply = %v, want %v: %s", got, tc.summary, text)
			}
			if !tc.summary && !strings.HasPrefix(text, "MOCK-REPLY ") {
				t.Errorf("ordinary reply changed: %s", text)
			}
		})
	}
}

// TestInputTokens: InputTokens of a body is the input_tokens the fake reports for it, so an
// end-to-end test can size the upstream's view of each request; a body that is not JSON is 0.
func TestInputTokens(t *testing.T) {
	_, base := start(t, Options{})
	long := strings.Repeat("x", 4000)
	for _, tc := range []struct{ name, body string }{
		{"short", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hello"}]}`},
		{"system, tools and a tool result", `{"model":"m","max_tokens":10,"system":[{"type":"text","text":"` + long + `"}],
			"tools":[{"name":"Read","description":"` + long + `","input_schema":{"type":"object"}}],
			"messages":[{"role":"user","content":"read it"},
			{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"` + long + `","cache_control":{"type":"ephemeral"}}]}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := post(t, base+"/v1/messages", tc.body)
			if status != 200 {
				t.Fatalf("status %d: %s", status, body)
			}
			want := gjson.GetBytes(body, "usage.input_tokens").Int()
			if got := InputTokens([]byte(tc.body)); got != want || got < 1 {
				t.Errorf("InputTokens = %d, the fake reported %d", got, want)
			}
		})
	}
	if got := InputTokens([]byte(`{"messages":[`)); got != 0 {
		t.Errorf("InputTokens of invalid JSON = %d, want 0", got)
	}
}
