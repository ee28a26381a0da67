package fakeupstream

import (
	"encoding/json"
	"net/http"
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
	if c.in.compaction != "" {
		c.badRequest(c.in.compaction)
		return
	}
	text, fc := c.reply(&c.srv.nMessages)
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
