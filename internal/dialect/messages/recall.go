package messages

import (
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn"
)

// The recall tool on the Messages API: an Anthropic custom tool (name, description,
// input_schema); a round's calls are tool_use content blocks, answered by appending the round's
// assistant message and a user message of tool_result blocks (same tool_use_id). Anthropic
// rejects a history whose tool_use names a tool the request does not define, so the last round
// keeps the tool and sets tool_choice {"type":"none"} instead of dropping it. Usage sums
// input, output and cache tokens over the rounds; usage.iterations lists the compaction (when
// the turn compacted) and one "message" entry per round, as Anthropic reports a server-side
// tool loop. A stream carries no final copy of the message, so the blocks of each round are
// rebuilt from its deltas (text, thinking, signature, tool input, citations).

// ArchiveRef is the archive conversation of a turn that follows an agent compaction compactd
// answered, and the owner it was archived under: the conversation and owner named by the signed
// reference in compactd's note (turn.AgentRecallNote), when the first message holds one that
// verifies for the request's tenant (Env.FindRef; none while the archive or recall is off: Env.Recalls). No header
// is consulted: a session id a client sends names nothing it owns. A turn that applies a
// compaction of its own (a block, the memo) or compacted reads that compaction's archive
// instead, or none.
func (t *Turn) ArchiveRef(env *turn.Env) (string, string, bool) {
	req := t.req
	if t.a.CountTokens || !env.Recalls() || t.prev != nil || t.compacted || len(req.Messages) == 0 || len(req.Blocks) > 0 {
		return "", "", false
	}
	for _, b := range req.Messages[0].ContentBlocks() {
		if b.Type != api.BlockText {
			continue
		}
		text := gjson.GetBytes(b.Raw, "text").Str
		if !strings.Contains(text, turn.AgentRecallNote) {
			continue
		}
		if conv, o, ok := env.FindRef(text); ok {
			return conv, o, true
		}
	}
	return "", "", false
}

// Recall offers the tool unless the client's tools or tool choice leave no room for it, or the
// turn's last message is the assistant's (a prefill to continue: a recall round cannot continue
// a prefill). count_tokens samples nothing.
func (t *Turn) Recall(env *turn.Env, tool turn.RecallTool) turn.Recall {
	if n := len(t.req.Messages); t.a.CountTokens || n == 0 || t.req.Messages[n-1].Role == "assistant" {
		return nil
	}
	if !turn.RecallAllowed(t.req.Tools, []byte(gjson.GetBytes(t.req.Body, "tool_choice").Raw), tool.Name) {
		return nil
	}
	return &recall{t: t, env: env, tool: tool,
		toolJSON: turn.MustJSON(map[string]any{"name": tool.Name, "description": tool.Description, "input_schema": tool.Parameters})}
}

// recall is the Messages side of one recall turn.
type recall struct {
	scratch  []byte // the lines before an event's data
	t        *Turn
	env      *turn.Env
	tool     turn.RecallTool
	toolJSON []byte
	base     *api.MessagesRequest // the body compactd would have forwarded (Body), skimmed
	unread   bool                 // base did not skim: the rounds send it as it is
	msgs     [][]byte             // the upstream messages so far
	tools    []byte               // the client's tools and the recall tool

	// The sums over the rounds.
	input, output, cacheCreation, cacheRead, eph5m, eph1h int64
	iterations                                            [][]byte

	// The streamed round being read.
	startUsage gjson.Result
	model      string
	blocks     []*streamBlock
	delta      []byte // its message_delta
	stop       []byte // its message_stop
}

// streamBlock is a content block rebuilt from a stream.
type streamBlock struct {
	start                               []byte // content_block_start's content_block
	text, thinking, signature, jsonPart strings.Builder
	citations                           [][]byte
}

// init skims the body the turn would have forwarded, once, on the first round: the front
// reserves the memory for its rebuild before it runs the loop.
func (d *recall) init() {
	if d.base != nil {
		return
	}
	body := d.t.Body(d.env)
	base, err := api.ParseMessagesRequest(body)
	if err != nil {
		// compactd's own rendering of a body it skimmed: cannot happen, but never lose the turn
		// over it. The rounds then send that body as it is, without the tool.
		d.base, d.unread = &api.MessagesRequest{Body: body}, true
		return
	}
	d.base, d.msgs = base, api.Raws[[]byte](base.Messages)
	tools := base.Tools
	if len(tools) == 0 || gjson.ParseBytes(tools).Type == gjson.Null {
		tools = []byte("[]")
	}
	d.tools, _ = sjson.SetRawBytes(tools, "-1", d.toolJSON)
}

func (d *recall) Request(last bool) []byte {
	d.init()
	if d.unread {
		return d.base.Body
	}
	changes := []api.Member{
		{Key: "messages", Value: api.JSONArray(d.msgs)},
		{Key: "tools", Value: d.tools},
	}
	if last {
		// The tool stays defined (the history may hold calls of it); the model may call none.
		changes = append(changes, api.Member{Key: "tool_choice", Value: []byte(`{"type":"none"}`)})
	}
	return d.base.Rewrite(changes...)
}

// block classifies a content block.
func (d *recall) block(b gjson.Result) turn.RecallItem {
	ri := turn.RecallItem{Raw: []byte(b.Raw)}
	if b.Get("type").Str == "tool_use" {
		ri.Tool = true
		if b.Get("name").Str == d.tool.Name {
			ri.Call = &turn.RecallCall{ID: b.Get("id").Str, Query: b.Get("input.query").Str}
		}
	}
	return ri
}

// addRound adds one round's usage: input and cache figures from final when it has them, else
// from start (a stream's message_start), output from final.
func (d *recall) addRound(start, final gjson.Result, model string) {
	pick := func(k string) int64 {
		if v := final.Get(k); v.Exists() {
			return v.Int()
		}
		return start.Get(k).Int()
	}
	d.input += pick("input_tokens")
	d.output += final.Get("output_tokens").Int()
	d.cacheCreation += pick("cache_creation_input_tokens")
	d.cacheRead += pick("cache_read_input_tokens")
	d.eph5m += pick("cache_creation.ephemeral_5m_input_tokens")
	d.eph1h += pick("cache_creation.ephemeral_1h_input_tokens")
	d.iterations = append(d.iterations, messageIteration(start, final, model))
}

// applyUsage writes the sums into the usage object at path of doc, with usage.iterations when
// there is more than one sampling to report.
func (d *recall) applyUsage(doc []byte, path string) []byte {
	for _, f := range []struct {
		k string
		v int64
	}{
		{"input_tokens", d.input}, {"output_tokens", d.output},
		{"cache_creation_input_tokens", d.cacheCreation}, {"cache_read_input_tokens", d.cacheRead},
	} {
		doc, _ = sjson.SetBytes(doc, path+"."+f.k, f.v)
	}
	if gjson.GetBytes(doc, path+".cache_creation").IsObject() {
		doc, _ = sjson.SetBytes(doc, path+".cache_creation.ephemeral_5m_input_tokens", d.eph5m)
		doc, _ = sjson.SetBytes(doc, path+".cache_creation.ephemeral_1h_input_tokens", d.eph1h)
	}
	if d.t.block != nil || len(d.iterations) > 1 {
		var iters [][]byte
		if d.t.block != nil {
			iters = append(iters, compactionIteration(d.t.compUsage))
		}
		doc, _ = sjson.SetRawBytes(doc, path+".iterations", api.JSONArray(append(iters, d.iterations...)))
	}
	return doc
}

// finish completes the final message (or message_delta) doc: usage, applied edits, and a stop
// reason that does not announce a tool call the client was not given.
func (d *recall) finish(doc []byte, usagePath, stopPath string, visible [][]byte) []byte {
	doc = d.applyUsage(doc, usagePath)
	if len(d.t.applied) > 0 {
		doc, _ = sjson.SetRawBytes(doc, "context_management", api.AppliedEditsJSON(d.t.applied))
	}
	if gjson.GetBytes(doc, stopPath).Str == "tool_use" {
		for _, b := range visible {
			if gjson.GetBytes(b, "type").Str == "tool_use" {
				return doc
			}
		}
		doc, _ = sjson.SetBytes(doc, stopPath, "end_turn")
	}
	return doc
}

func (d *recall) JSONRound(data []byte) ([]turn.RecallItem, string) {
	content := gjson.GetBytes(data, "content")
	if !content.IsArray() {
		return nil, "has no content array"
	}
	u := gjson.GetBytes(data, "usage")
	d.addRound(u, u, gjson.GetBytes(data, "model").Str)
	var items []turn.RecallItem
	content.ForEach(func(_, b gjson.Result) bool {
		items = append(items, d.block(b))
		return true
	})
	return items, ""
}

func (d *recall) FinalJSON(data []byte, visible [][]byte) []byte {
	content := visible
	if d.t.block != nil {
		content = append([][]byte{d.t.block}, visible...)
	}
	data, _ = sjson.SetRawBytes(data, "content", api.JSONArray(content))
	return d.finish(data, "usage", "stop_reason", visible)
}

func (d *recall) Event(_ string, data []byte) turn.RecallEvent {
	v := relay.ParseAlias(data) // its strings are data's: cloned where they outlive the event
	switch v.Get("type").Str {
	case "message_start":
		d.startUsage = gjson.Parse(strings.Clone(v.Get("message.usage").Raw))
		d.model = strings.Clone(v.Get("message.model").Str)
		d.blocks, d.delta, d.stop = d.blocks[:0], nil, nil
		return turn.RecallEvent{Kind: turn.EvStart, Data: data}
	case "content_block_start":
		e := turn.RecallEvent{Kind: turn.EvItem, Index: v.Get("index").Int(), Start: true, Data: data}
		cb := v.Get("content_block")
		it := d.block(cb)
		e.Tool, e.Call = it.Tool, it.Call != nil
		if e.Index == int64(len(d.blocks)) {
			d.blocks = append(d.blocks, &streamBlock{start: []byte(cb.Raw)})
		}
		return e
	case "content_block_delta":
		e := turn.RecallEvent{Kind: turn.EvItem, Index: v.Get("index").Int(), Data: data}
		if e.Index >= 0 && e.Index < int64(len(d.blocks)) {
			d.blocks[e.Index].add(v.Get("delta"))
		}
		return e
	case "content_block_stop":
		return turn.RecallEvent{Kind: turn.EvItem, Index: v.Get("index").Int(), Data: data}
	case "message_delta":
		d.delta = append([]byte(nil), data...)
		return turn.RecallEvent{Kind: turn.EvEnd}
	case "message_stop":
		d.stop = append([]byte(nil), data...)
		return turn.RecallEvent{Kind: turn.EvStop}
	case "error":
		return turn.RecallEvent{Kind: turn.EvError, Data: data}
	}
	return turn.RecallEvent{Kind: turn.EvPass, Data: data}
}

// add applies one delta to the block.
func (b *streamBlock) add(delta gjson.Result) {
	switch delta.Get("type").Str {
	case "text_delta":
		b.text.WriteString(delta.Get("text").Str)
	case "thinking_delta":
		b.thinking.WriteString(delta.Get("thinking").Str)
	case "signature_delta":
		b.signature.WriteString(delta.Get("signature").Str)
	case "input_json_delta":
		b.jsonPart.WriteString(delta.Get("partial_json").Str)
	case "citations_delta":
		b.citations = append(b.citations, []byte(delta.Get("citation").Raw))
	}
}

// raw renders the block whole: the start's fields, completed by the deltas.
func (b *streamBlock) raw() []byte {
	out := b.start
	set := func(k, v string) {
		if v != "" {
			out, _ = sjson.SetBytes(out, k, v)
		}
	}
	set("text", b.text.String())
	set("thinking", b.thinking.String())
	set("signature", b.signature.String())
	if in := b.jsonPart.String(); in != "" && gjson.Valid(in) {
		out, _ = sjson.SetRawBytes(out, "input", []byte(in))
	}
	if len(b.citations) > 0 {
		out, _ = sjson.SetRawBytes(out, "citations", api.JSONArray(b.citations))
	}
	return out
}

func (d *recall) Reindex(data []byte, index int64) (relay.Splice, bool) {
	return relay.SetNumber(data, "index", index)
}

func (d *recall) Render(out [][]byte, name string, data []byte, edits []relay.Splice) [][]byte {
	return relay.SpliceEvent(out, &d.scratch, &sse.Event{Name: name}, data, edits)
}

func (d *recall) Compacted() bool { return d.t.block != nil }

func (d *recall) Prelude() []byte {
	return compactionBlockEvents(nil, d.t.summary, d.t.ecStr, "")
}

func (d *recall) StreamRound() ([]turn.RecallItem, string) {
	if d.delta == nil {
		return nil, "ended its stream without a message_delta"
	}
	d.addRound(d.startUsage, gjson.GetBytes(d.delta, "usage"), d.model)
	items := make([]turn.RecallItem, len(d.blocks))
	for i, b := range d.blocks {
		items[i] = d.block(gjson.ParseBytes(b.raw()))
	}
	return items, ""
}

func (d *recall) FinalStream(visible [][]byte) []byte {
	delta := d.finish(d.delta, "usage", "delta.stop_reason", visible)
	stop := d.stop
	if len(stop) == 0 {
		stop = []byte(`{"type":"message_stop"}`)
	}
	return sse.AppendEvent(sse.AppendEvent(nil, "message_delta", delta), "message_stop", stop)
}

func (d *recall) Answer(items []turn.RecallItem, results []string) {
	var blocks, uses [][]byte
	k := 0
	for _, it := range items {
		b := gjson.ParseBytes(it.Raw)
		if b.Get("type").Str == "text" && b.Get("text").Str == "" {
			continue // Anthropic refuses empty text blocks in a request
		}
		blocks = append(blocks, it.Raw)
		if it.Call != nil {
			res := []byte(`{"type":"tool_result","tool_use_id":"","content":""}`)
			res, _ = sjson.SetBytes(res, "tool_use_id", it.Call.ID)
			res, _ = sjson.SetBytes(res, "content", results[k])
			uses = append(uses, res)
			k++
		}
	}
	d.msgs = append(d.msgs, api.AnthropicMessage("assistant", blocks), api.AnthropicMessage("user", uses))
}

// ErrorEvents closes a stream under way with Anthropic's error event: the upstream's own error
// envelope when it answered with one (upstreamErrorEvent), else the fault compactd answers.
func (d *recall) ErrorEvents(f *fault.Fault, status int, body []byte) []byte {
	if status != 0 {
		return upstreamErrorEvent(status, body)
	}
	return anthropicFault(f).SSE()
}
