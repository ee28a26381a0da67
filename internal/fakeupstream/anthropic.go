package fakeupstream

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"

	"github.com/tidwall/gjson"
)

// Wire types of the Anthropic Messages API (anthropic-sdk-go v2 Message, Usage, stream events).

type antMessage struct {
	ID           string     `json:"id"`
	Type         string     `json:"type"`
	Role         string     `json:"role"`
	Model        string     `json:"model"`
	Content      []antBlock `json:"content"`
	StopReason   any        `json:"stop_reason"`
	StopSequence any        `json:"stop_sequence"`
	Usage        antUsage   `json:"usage"`
}

// antBlock is a text or tool_use content block; exactly one of Text and (ID, Name, Input) is set.
type antBlock struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

type antUsage struct {
	InputTokens              int64  `json:"input_tokens"`
	CacheCreationInputTokens int64  `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64  `json:"cache_read_input_tokens"`
	OutputTokens             int64  `json:"output_tokens"`
	ServiceTier              string `json:"service_tier,omitempty"`
}

func (c *call) serveMessages() {
	if !c.in.valid {
		c.badRequest("invalid JSON body")
		return
	}
	text, fc := c.messagesReply()
	reqID := c.id("req_", "request")
	c.w.Header().Set("request-id", reqID)
	msg := antMessage{
		ID: c.id("msg_", "message"), Type: "message", Role: "assistant",
		Model:      c.model("claude-fake"),
		StopReason: "end_turn",
		Usage:      antUsage{InputTokens: c.in.inputToks, ServiceTier: "standard"},
	}
	var block antBlock
	var pieces []string
	if fc != nil {
		// tool_use input must be an object; a directive with malformed args calls with {}.
		input := json.RawMessage(fc.args)
		if !json.Valid(input) || input[0] != '{' {
			input = json.RawMessage("{}")
		}
		block = antBlock{Type: "tool_use", ID: c.id("toolu_", "tool"), Name: fc.name, Input: input}
		msg.StopReason = "tool_use"
		msg.Usage.OutputTokens = outputTokens(fc.name + string(input))
		pieces = splitDeltas(string(input), c.srv.opt.Deltas)
	} else {
		block = antBlock{Type: "text", Text: &text}
		msg.Usage.OutputTokens = outputTokens(text)
		pieces = splitDeltas(text, c.srv.opt.Deltas)
	}
	if !c.in.stream {
		msg.Content = []antBlock{block}
		c.writeJSON(http.StatusOK, msg)
		return
	}

	s := c.startSSE()
	start := msg
	start.Content = []antBlock{}
	start.StopReason = nil
	start.Usage.OutputTokens = 1
	empty := ""
	startBlock := antBlock{Type: "text", Text: &empty}
	if fc != nil {
		startBlock = antBlock{Type: "tool_use", ID: block.ID, Name: block.Name, Input: json.RawMessage("{}")}
	}
	type obj = map[string]any
	if !s.event("message_start", -1, obj{"message": start}) ||
		!s.event("content_block_start", -1, obj{"index": 0, "content_block": startBlock}) ||
		!s.event("ping", -1, obj{}) {
		return
	}
	for i, p := range pieces {
		if i > 0 {
			c.sleep(c.srv.opt.TokenDelay)
		}
		delta := obj{"type": "text_delta", "text": p}
		if fc != nil {
			delta = obj{"type": "input_json_delta", "partial_json": p}
		}
		if !s.event("content_block_delta", -1, obj{"index": 0, "delta": delta}) {
			return
		}
	}
	final := msg.Usage
	final.ServiceTier = ""
	if !s.event("content_block_stop", -1, obj{"index": 0}) ||
		!s.event("message_delta", -1, obj{
			"delta": obj{"stop_reason": msg.StopReason, "stop_sequence": nil}, "usage": final}) {
		return
	}
	s.event("message_stop", -1, obj{})
}

func (c *call) serveCountTokens() {
	if !c.in.valid {
		c.badRequest("invalid JSON body")
		return
	}
	c.writeJSON(http.StatusOK, struct {
		InputTokens int64 `json:"input_tokens"`
	}{c.in.inputToks})
}

// messagesReply is reply with the fake model's tool behaviour on Messages:
//
//   - tool_choice {"type":"none"} is honoured: the model calls no tool, it answers.
//   - "[[call-always:NAME {args}]]" in the last user message calls NAME on every turn, tool
//     results or not (a model that will not stop calling a tool), unless tool_choice forbids it.
//   - after the result of a recall tool (one whose name contains "recall"), the reply quotes
//     the result, as a model answering from what it recalled would: "MOCK-REPLY n: …" then
//     "\nRecalled with NAME: " and the result's text.
func (c *call) messagesReply() (string, *toolCall) {
	text, fc := c.reply(&c.srv.nMessages)
	if c.in.summary {
		return text, fc
	}
	if fc == nil {
		fc = callAlways(c.in.lastUser)
	}
	if fc != nil && c.in.top["tool_choice"].Get("type").Str == "none" {
		fc = nil
	}
	if fc != nil {
		return "", fc
	}
	if text == "" {
		text = replyText(c.srv.nMessages.Load(), c.in.lastUser)
	}
	if name, result, ok := c.recallResult(); ok && c.srv.opt.Answer == nil {
		text += "\nRecalled with " + name + ": " + firstRunes(result, 4000)
	}
	return text, nil
}

var callAlwaysDirective = regexp.MustCompile(`(?s)\[\[call-always:([A-Za-z0-9_.\-]+)\s*(.*?)\]\]`)

func callAlways(s string) *toolCall {
	m := callAlwaysDirective.FindStringSubmatch(s)
	if m == nil {
		return nil
	}
	args := strings.TrimSpace(m[2])
	if args == "" {
		args = "{}"
	}
	return &toolCall{name: m[1], args: args}
}

// recallResult finds, in the last message (a user message), the tool_result of a call of a
// recall tool made by the assistant message before it, and returns the tool's name and the
// result's text.
func (c *call) recallResult() (name, result string, ok bool) {
	msgs := c.in.top["messages"].Array()
	if len(msgs) < 2 {
		return "", "", false
	}
	last, prev := msgs[len(msgs)-1], msgs[len(msgs)-2]
	if member(last, "role").Str != "user" || member(prev, "role").Str != "assistant" {
		return "", "", false
	}
	names := map[string]string{}
	member(prev, "content").ForEach(func(_, b gjson.Result) bool {
		if member(b, "type").Str == "tool_use" && strings.Contains(member(b, "name").Str, "recall") {
			names[member(b, "id").Str] = member(b, "name").Str
		}
		return true
	})
	member(last, "content").ForEach(func(_, b gjson.Result) bool {
		if member(b, "type").Str != "tool_result" {
			return true
		}
		if n, found := names[member(b, "tool_use_id").Str]; found {
			name, result, ok = n, contentText(member(b, "content")), true
		}
		return !ok
	})
	return name, result, ok
}
