package fakeupstream

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/tidwall/gjson"
)

// Wire types of the OpenAI Responses API, trimmed to what a completed text or function-call turn
// carries. Field names follow openai-go v3 responses.Response.

type oaiResponse struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"`
	CreatedAt          int64           `json:"created_at"`
	Status             string          `json:"status"`
	Background         bool            `json:"background"`
	CompletedAt        any             `json:"completed_at"`
	Error              any             `json:"error"`
	IncompleteDetails  any             `json:"incomplete_details"`
	Instructions       json.RawMessage `json:"instructions"`
	MaxOutputTokens    any             `json:"max_output_tokens"`
	MaxToolCalls       any             `json:"max_tool_calls"`
	Model              string          `json:"model"`
	Output             []any           `json:"output"`
	ParallelToolCalls  bool            `json:"parallel_tool_calls"`
	PreviousResponseID any             `json:"previous_response_id"`
	Reasoning          oaiReasoning    `json:"reasoning"`
	ServiceTier        string          `json:"service_tier"`
	Store              bool            `json:"store"`
	Temperature        float64         `json:"temperature"`
	Text               oaiTextConfig   `json:"text"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	Tools              json.RawMessage `json:"tools"`
	TopP               float64         `json:"top_p"`
	Truncation         string          `json:"truncation"`
	Usage              *oaiUsage       `json:"usage"`
	User               any             `json:"user"`
	Metadata           map[string]any  `json:"metadata"`
}

type oaiReasoning struct {
	Effort  any `json:"effort"`
	Summary any `json:"summary"`
}

type oaiTextConfig struct {
	Format struct {
		Type string `json:"type"`
	} `json:"format"`
	Verbosity string `json:"verbosity"`
}

type oaiUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
}

type oaiMessage struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Status  string          `json:"status"`
	Role    string          `json:"role"`
	Content []oaiOutputText `json:"content"`
}

type oaiOutputText struct {
	Type        string `json:"type"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
	Text        string `json:"text"`
}

type oaiFunctionCall struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Status    string `json:"status"`
	Arguments string `json:"arguments"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
}

func outputText(text string) oaiOutputText {
	return oaiOutputText{Type: "output_text", Annotations: []any{}, Logprobs: []any{}, Text: text}
}

// rawOr returns the request's top-level field key as raw JSON, or def when absent.
func (c *call) rawOr(key, def string) json.RawMessage {
	if r := c.in.top[key]; r.Exists() {
		return json.RawMessage(r.Raw)
	}
	return json.RawMessage(def)
}

// boolOr returns the request's top-level boolean key, or def when absent.
func (c *call) boolOr(key string, def bool) bool {
	if r := c.in.top[key]; r.Exists() {
		return r.Bool()
	}
	return def
}

func (c *call) model(def string) string {
	if c.in.model != "" {
		return c.in.model
	}
	return def
}

// newResponse is the Response envelope echoing the request's settings, as OpenAI does.
func (c *call) newResponse(id string) *oaiResponse {
	r := &oaiResponse{
		ID:                id,
		Object:            "response",
		CreatedAt:         createdAt,
		Status:            "in_progress",
		Instructions:      c.rawOr("instructions", "null"),
		Model:             c.model("fake-model"),
		Output:            []any{},
		ParallelToolCalls: c.boolOr("parallel_tool_calls", true),
		ServiceTier:       "default",
		Store:             c.boolOr("store", true),
		Temperature:       1,
		ToolChoice:        c.rawOr("tool_choice", `"auto"`),
		Tools:             c.rawOr("tools", "[]"),
		TopP:              1,
		Truncation:        "disabled",
		Metadata:          map[string]any{},
	}
	r.Text.Format.Type = "text"
	r.Text.Verbosity = "medium"
	return r
}

func (c *call) complete(r *oaiResponse, output any, outText string) {
	r.Status = "completed"
	r.CompletedAt = createdAt
	r.Output = []any{output}
	u := &oaiUsage{InputTokens: c.in.inputToks, OutputTokens: outputTokens(outText)}
	u.TotalTokens = u.InputTokens + u.OutputTokens
	r.Usage = u
}

func (c *call) badRequest(msg string) { c.fail(http.StatusBadRequest, "", msg) }

// reply decides a turn's answer: the summary for a summariser call, else the route's next
// MOCK-REPLY text or, when the last user message asks for one, a tool call. turns is the route's
// own counter, so summariser calls and errors do not shift later replies.
func (c *call) reply(turns *atomic.Int64) (text string, fc *toolCall) {
	if c.in.summary {
		return c.summaryText(), nil
	}
	n := turns.Add(1)
	if t, ok := c.claudeCodeCompactReply(); ok {
		return t, nil
	}
	if t, call, ok := c.answerTurn(); ok {
		return t, call
	}
	if fc = c.in.call; fc == nil {
		text = replyText(n, c.in.lastUser)
	}
	return text, fc
}

func (c *call) serveResponses() {
	if !c.in.valid {
		c.badRequest("We could not parse the JSON body of your request.")
		return
	}
	text, fc := c.reply(&c.srv.nResponses)
	resp := c.newResponse(c.id("resp_", "response"))
	var item any
	if fc != nil {
		text = fc.name + fc.args // what output_tokens is estimated from
		item = oaiFunctionCall{ID: c.id("fc_", "item"), Type: "function_call", Status: "completed",
			Arguments: fc.args, CallID: c.id("call_", "call"), Name: fc.name}
	} else {
		item = oaiMessage{ID: c.id("msg_", "item"), Type: "message", Status: "completed",
			Role: "assistant", Content: []oaiOutputText{outputText(text)}}
	}
	if !c.in.stream {
		c.complete(resp, item, text)
		c.writeJSON(http.StatusOK, resp)
		return
	}
	c.streamResponse(resp, item, text)
}

// streamResponse writes the Responses SSE sequence for one output item at output_index 0.
func (c *call) streamResponse(resp *oaiResponse, item any, text string) {
	s := c.startSSE()
	seq := int64(0)
	emit := func(typ string, fields map[string]any) bool {
		seq++
		return s.event(typ, seq-1, fields)
	}
	if !emit("response.created", map[string]any{"response": resp}) ||
		!emit("response.in_progress", map[string]any{"response": resp}) {
		return
	}
	switch it := item.(type) {
	case oaiMessage:
		added := it
		added.Status = "in_progress"
		added.Content = []oaiOutputText{}
		ids := func(m map[string]any) map[string]any {
			m["item_id"], m["output_index"], m["content_index"] = it.ID, 0, 0
			return m
		}
		if !emit("response.output_item.added", map[string]any{"output_index": 0, "item": added}) ||
			!emit("response.content_part.added", ids(map[string]any{"part": outputText("")})) {
			return
		}
		for i, d := range splitDeltas(text, c.srv.opt.Deltas) {
			if i > 0 {
				c.sleep(c.srv.opt.TokenDelay)
			}
			if !emit("response.output_text.delta", ids(map[string]any{"delta": d, "logprobs": []any{}})) {
				return
			}
		}
		if !emit("response.output_text.done", ids(map[string]any{"text": text, "logprobs": []any{}})) ||
			!emit("response.content_part.done", ids(map[string]any{"part": outputText(text)})) {
			return
		}
	case oaiFunctionCall:
		added := it
		added.Status, added.Arguments = "in_progress", ""
		ids := func(m map[string]any) map[string]any {
			m["item_id"], m["output_index"] = it.ID, 0
			return m
		}
		if !emit("response.output_item.added", map[string]any{"output_index": 0, "item": added}) {
			return
		}
		for i, d := range splitDeltas(it.Arguments, c.srv.opt.Deltas) {
			if i > 0 {
				c.sleep(c.srv.opt.TokenDelay)
			}
			if !emit("response.function_call_arguments.delta", ids(map[string]any{"delta": d})) {
				return
			}
		}
		if !emit("response.function_call_arguments.done", ids(map[string]any{"name": it.Name, "arguments": it.Arguments})) {
			return
		}
	}
	if !emit("response.output_item.done", map[string]any{"output_index": 0, "item": item}) {
		return
	}
	c.complete(resp, item, text)
	emit("response.completed", map[string]any{"response": resp})
}

// Chat Completions wire types (openai-go v3 ChatCompletion / ChatCompletionChunk).

type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	Usage             *chatUsage   `json:"usage,omitempty"`
	ServiceTier       string       `json:"service_tier"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     any         `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type chatMessage struct {
	Role        string         `json:"role"`
	Content     any            `json:"content"`
	Refusal     any            `json:"refusal"`
	Annotations []any          `json:"annotations"`
	ToolCalls   []chatToolCall `json:"tool_calls,omitempty"`
}

type chatToolCall struct {
	Index    *int   `json:"index,omitempty"` // chunks only
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
		AudioTokens  int64 `json:"audio_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens          int64 `json:"reasoning_tokens"`
		AudioTokens              int64 `json:"audio_tokens"`
		AcceptedPredictionTokens int64 `json:"accepted_prediction_tokens"`
		RejectedPredictionTokens int64 `json:"rejected_prediction_tokens"`
	} `json:"completion_tokens_details"`
}

type chatChunk struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	Created           int64             `json:"created"`
	Model             string            `json:"model"`
	ServiceTier       string            `json:"service_tier"`
	SystemFingerprint string            `json:"system_fingerprint"`
	Choices           []chatChunkChoice `json:"choices"`
	Usage             *chatUsage        `json:"usage"`
}

type chatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     any       `json:"logprobs"`
	FinishReason any       `json:"finish_reason"`
}

type chatDelta struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content,omitempty"`
	Refusal   any            `json:"refusal,omitempty"`
	ToolCalls []chatToolCall `json:"tool_calls,omitempty"`
}

func (c *call) serveChat() {
	if !c.in.valid {
		c.badRequest("We could not parse the JSON body of your request.")
		return
	}
	text, fc := c.chatReply()
	id := c.id("chatcmpl-", "chat")
	usage := &chatUsage{PromptTokens: c.in.inputToks}
	var tc chatToolCall
	finish := "stop"
	if fc != nil {
		finish = "tool_calls"
		tc = chatToolCall{ID: c.id("call_", "call"), Type: "function"}
		tc.Function.Name, tc.Function.Arguments = fc.name, fc.args
		usage.CompletionTokens = outputTokens(fc.name + fc.args)
	} else {
		usage.CompletionTokens = outputTokens(text)
	}
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens

	if !c.in.stream {
		msg := chatMessage{Role: "assistant", Content: text, Annotations: []any{}}
		if fc != nil {
			msg.Content = nil
			msg.ToolCalls = []chatToolCall{tc}
		}
		c.writeJSON(http.StatusOK, chatCompletion{
			ID: id, Object: "chat.completion", Created: createdAt, Model: c.model("fake-model"),
			Choices:     []chatChoice{{Message: msg, FinishReason: finish}},
			Usage:       usage,
			ServiceTier: "default", SystemFingerprint: "fp_fakeupstream",
		})
		return
	}

	includeUsage := c.in.top["stream_options"].Get("include_usage").Bool()
	s := c.startSSE()
	chunk := func(d chatDelta, finish any) bool {
		ch := chatChunk{ID: id, Object: "chat.completion.chunk", Created: createdAt,
			Model: c.model("fake-model"), ServiceTier: "default", SystemFingerprint: "fp_fakeupstream",
			Choices: []chatChunkChoice{{Delta: d, FinishReason: finish}}}
		return s.raw("", chunkJSON(ch, includeUsage))
	}
	empty := ""
	first := chatDelta{Role: "assistant", Content: &empty}
	var pieces []string
	if fc != nil {
		first.Content = nil
		zero := 0
		head := tc
		head.Index = &zero
		head.Function.Arguments = ""
		first.ToolCalls = []chatToolCall{head}
		pieces = splitDeltas(fc.args, c.srv.opt.Deltas)
	} else {
		pieces = splitDeltas(text, c.srv.opt.Deltas)
	}
	if !chunk(first, nil) {
		return
	}
	for i, p := range pieces {
		if i > 0 {
			c.sleep(c.srv.opt.TokenDelay)
		}
		d := chatDelta{}
		if fc != nil {
			zero := 0
			part := chatToolCall{Index: &zero}
			part.Function.Arguments = p
			d.ToolCalls = []chatToolCall{part}
		} else {
			d.Content = &p
		}
		if !chunk(d, nil) {
			return
		}
	}
	if !chunk(chatDelta{}, finish) {
		return
	}
	if includeUsage {
		ch := chatChunk{ID: id, Object: "chat.completion.chunk", Created: createdAt,
			Model: c.model("fake-model"), ServiceTier: "default", SystemFingerprint: "fp_fakeupstream",
			Choices: []chatChunkChoice{}, Usage: usage}
		if !s.raw("", chunkJSON(ch, true)) {
			return
		}
	}
	s.raw("", []byte("[DONE]"))
}

// chatReply is reply with the fake model's tool behaviour on Chat Completions, as messagesReply
// on Messages: tool_choice "none" is honoured, "[[call-always:NAME {args}]]" calls NAME on every
// turn tool results or not (unless tool_choice forbids it), and after the result of a recall
// tool (a "tool" message answering an assistant tool call whose name contains "recall") the reply
// quotes it: "MOCK-REPLY n: …" then "\nRecalled with NAME: " and the result's text.
func (c *call) chatReply() (string, *toolCall) {
	text, fc := c.reply(&c.srv.nChat)
	if c.in.summary {
		return text, fc
	}
	if fc == nil {
		fc = callAlways(c.in.lastUser)
	}
	if fc != nil && c.in.top["tool_choice"].Str == "none" {
		fc = nil
	}
	if fc != nil {
		return "", fc
	}
	if text == "" {
		text = replyText(c.srv.nChat.Load(), c.in.lastUser)
	}
	if name, result, ok := c.chatRecallResult(); ok && c.srv.opt.Answer == nil {
		text += "\nRecalled with " + name + ": " + firstRunes(result, 4000)
	}
	return text, nil
}

// chatRecallResult returns the recall tool's name and result when the conversation ends with an
// assistant message calling it and the "tool" messages answering it.
func (c *call) chatRecallResult() (name, result string, ok bool) {
	msgs := c.in.top["messages"].Array()
	i := len(msgs) - 1
	for i >= 0 && msgs[i].Get("role").Str == "tool" {
		i--
	}
	if i < 0 || i == len(msgs)-1 || msgs[i].Get("role").Str != "assistant" {
		return "", "", false
	}
	names := map[string]string{}
	msgs[i].Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
		if n := tc.Get("function.name").Str; strings.Contains(n, "recall") {
			names[member(tc, "id").Str] = n
		}
		return true
	})
	for _, m := range msgs[i+1:] {
		if n, found := names[member(m, "tool_call_id").Str]; found {
			return n, contentText(member(m, "content")), true
		}
	}
	return "", "", false
}

// chunkJSON encodes a chunk; "usage" is present (null until the last chunk) only when the client
// asked for stream_options.include_usage, as OpenAI does.
func chunkJSON(ch chatChunk, includeUsage bool) []byte {
	if includeUsage {
		return marshal(ch)
	}
	type noUsage struct {
		ID                string            `json:"id"`
		Object            string            `json:"object"`
		Created           int64             `json:"created"`
		Model             string            `json:"model"`
		ServiceTier       string            `json:"service_tier"`
		SystemFingerprint string            `json:"system_fingerprint"`
		Choices           []chatChunkChoice `json:"choices"`
	}
	return marshal(noUsage{ch.ID, ch.Object, ch.Created, ch.Model, ch.ServiceTier, ch.SystemFingerprint, ch.Choices})
}
