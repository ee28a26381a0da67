package fakeupstream

import (
	"strings"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/jsonx"
)

// Claude Code compacts by asking the model itself for a summary: its last user message holds
// "Your task is to create a detailed summary of the conversation so far" (2.1.332) and it
// rejects any reply without a <summary> block. claudeCodeCompactPrompt recognises that request
// so the fake can answer it the way Claude Code requires, and the end-to-end tests of the hooks
// (internal/agenthooks) can drive a real Claude Code compaction against this server.
const claudeCodeCompactPrompt = "create a detailed summary of the conversation so far"

// ClaudeCodeSummary is the summary the fake gives a Claude Code compaction request.
const ClaudeCodeSummary = "MOCK-CLAUDE-CODE-SUMMARY: the user asked the agent to read a file."

// claudeCodeCompactReply is the reply to a Claude Code compaction request, or false when the
// request is not one. Claude Code puts the prompt in the last user message, often beside the
// last tool_result, so it is read from there rather than from parsed.lastUser (which skips
// messages that carry tool results).
func (c *call) claudeCodeCompactReply() (string, bool) {
	if c.route != routeMessages {
		return "", false
	}
	var last string
	c.in.top["messages"].ForEach(func(_, m gjson.Result) bool {
		if member(m, "role").Str == "user" {
			last = contentText(member(m, "content"))
		}
		return true
	})
	if !strings.Contains(last, claudeCodeCompactPrompt) {
		return "", false
	}
	return "<analysis>mock analysis</analysis>\n<summary>" + ClaudeCodeSummary + "</summary>", true
}

// InputTokens is the input_tokens the fake reports for a request body (text bytes of system,
// tools and messages / 4): what an end-to-end test compares the upstream's view against.
func InputTokens(body []byte) int64 {
	if jsonx.Valid(body) != nil {
		return 0
	}
	return estimateTokens(topFields(gjson.ParseBytes(body)))
}
