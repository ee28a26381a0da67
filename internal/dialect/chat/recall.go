package chat

import (
	"bytes"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/dialect/responses"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn"
)

// The recall tool on the Chat Completions API: a function tool ({"type":"function","function":
// {name, description, parameters}}); a round's calls are the tool_calls of choices[0].message
// (finish_reason "tool_calls"), answered by appending the round's assistant message (its text
// and the recall calls) and one "tool" message per call (same tool_call_id). The last round
// keeps the tool defined (the history holds calls of it) and sets tool_choice "none".
//
// A choice's message is split into units for the loop: unit 0 is its text (content, and
// whatever else a delta carries besides tool calls: refusal, a local model's reasoning_content),
// unit k+1 the tool call at index k. A stream's chunks carry no unit index of their own, so a
// chunk is the unit of the first tool call it carries, else unit 0; the first chunk of a round
// that only says the role is the response's opening, relayed in the first round only. Every
// chunk the client gets carries the first round's id (the openai SDKs' accumulators refuse a
// stream whose chunk ids change).
//
// Usage is summed over the rounds (prompt, completion and total tokens, cached and reasoning
// details). A stream's usage exists only when stream_options.include_usage is set, so compactd
// always asks the upstream for it; the client gets the final usage chunk (the sum) only when it
// asked for it itself, and otherwise no chunk carries a usage member, as OpenAI sends them.
// Recall applies to single-choice requests that define their tools in tools (n > 1 and the
// deprecated functions get no recall tool: their rounds cannot be told apart or fed back).

// recall is the Chat Completions side of one recall turn.
type recall struct {
	scratch  []byte // the lines before an event's data
	tool     turn.RecallTool
	req      *api.ChatRequest
	msgs     [][]byte // the upstream messages so far
	tools    []byte   // the client's tools and the recall tool
	usage    usageSum
	id       string // the first round's chunk id: the id of every chunk the client gets
	hasUsage bool   // the client asked for stream_options.include_usage
	sawUsage bool   // some streamed round reported usage

	// The streamed round being read.
	text     strings.Builder
	calls    []*streamCall
	finish   []byte // its chunk with a finish_reason
	usageRaw []byte // its usage chunk
}

var (
	_ turn.Recall      = (*recall)(nil)
	_ turn.DoneStopper = (*recall)(nil)
)

// streamCall is a tool call rebuilt from a stream's deltas.
type streamCall struct {
	id, typ, name string
	args          strings.Builder
}

// Recall offers the tool, from the turn's conversation as Body would send it, unless recall
// does not apply: more than one choice, the deprecated functions, a last message that is the
// assistant's (a prefill a recall round cannot continue), or the client's tools or tool choice
// leave no room for it.
func (t *Turn) Recall(_ *turn.Env, tool turn.RecallTool) turn.Recall {
	req := t.req
	if req.Functions != nil {
		return nil
	}
	if n := gjson.GetBytes(req.Body, "n"); n.Exists() && n.Type != gjson.Null && n.Int() != 1 {
		return nil
	}
	if n := len(req.Messages); n == 0 || req.Messages[n-1].Role == "assistant" {
		return nil
	}
	if !turn.RecallAllowed(req.Tools, []byte(gjson.GetBytes(req.Body, "tool_choice").Raw), tool.Name) {
		return nil
	}
	tools := req.Tools
	if len(tools) == 0 || gjson.ParseBytes(tools).Type == gjson.Null {
		tools = []byte("[]")
	}
	d := &recall{tool: tool, req: req, hasUsage: req.IncludeUsage, msgs: api.Raws[[]byte](t.msgs)}
	d.tools, _ = sjson.SetRawBytes(tools, "-1", toolJSON(tool))
	return d
}

// toolJSON is the Chat Completions function tool definition.
func toolJSON(tool turn.RecallTool) []byte {
	return turn.MustJSON(map[string]any{"type": "function", "function": map[string]any{
		"name": tool.Name, "description": tool.Description, "strict": true, "parameters": tool.Parameters,
	}})
}

func (d *recall) Request(last bool) []byte {
	out := d.req.WithMessages(d.msgs)
	out, _ = sjson.SetRawBytes(out, "tools", d.tools)
	if last {
		out, _ = sjson.SetBytes(out, "tool_choice", "none")
	}
	if d.req.Stream {
		out, _ = sjson.SetBytes(out, "stream_options.include_usage", true)
	}
	return out
}

// message splits a choice's message into units: its text (the message without tool_calls),
// then its tool calls.
func (d *recall) message(m gjson.Result) []turn.RecallItem {
	text, _ := sjson.DeleteBytes([]byte(m.Raw), "tool_calls")
	items := []turn.RecallItem{{Raw: text}}
	m.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
		items = append(items, d.toolCall(tc))
		return true
	})
	return items
}

func (d *recall) toolCall(tc gjson.Result) turn.RecallItem {
	ri := turn.RecallItem{Raw: []byte(tc.Raw), Tool: true}
	if tc.Get("function.name").Str == d.tool.Name {
		ri.Call = &turn.RecallCall{ID: tc.Get("id").Str, Query: gjson.Get(tc.Get("function.arguments").Str, "query").Str}
	}
	return ri
}

func (d *recall) JSONRound(data []byte) ([]turn.RecallItem, string) {
	m := gjson.GetBytes(data, "choices.0.message")
	if !m.IsObject() {
		return nil, "has no choices[0].message"
	}
	d.usage.add(gjson.GetBytes(data, "usage"))
	return d.message(m), ""
}

// finalText joins the text of the visible text units: what the model said before its recall
// calls, then its answer.
func finalText(visible [][]byte) (text string, any bool) {
	var b strings.Builder
	for _, v := range visible {
		if c := gjson.GetBytes(v, "content"); c.Type == gjson.String && gjson.GetBytes(v, "role").Exists() {
			b.WriteString(c.Str)
			any = true
		}
	}
	return b.String(), any
}

func (d *recall) FinalJSON(data []byte, visible [][]byte) []byte {
	var calls [][]byte
	for _, v := range visible {
		if !gjson.GetBytes(v, "role").Exists() {
			calls = append(calls, v)
		}
	}
	if text, ok := finalText(visible); ok {
		data, _ = sjson.SetBytes(data, "choices.0.message.content", text)
	}
	if len(calls) > 0 {
		data, _ = sjson.SetRawBytes(data, "choices.0.message.tool_calls", api.JSONArray(calls))
	} else {
		data, _ = sjson.DeleteBytes(data, "choices.0.message.tool_calls")
		if gjson.GetBytes(data, "choices.0.finish_reason").Str == "tool_calls" {
			data, _ = sjson.SetBytes(data, "choices.0.finish_reason", "stop")
		}
	}
	if gjson.GetBytes(data, "usage").IsObject() {
		data = d.usage.apply(data, "usage")
	}
	return data
}

func (d *recall) Event(_ string, data []byte) turn.RecallEvent {
	v := relay.ParseAlias(data) // its strings are data's: cloned where they outlive the event
	if d.id == "" {
		d.id = strings.Clone(v.Get("id").Str)
	}
	if v.Get("error").Exists() {
		return turn.RecallEvent{Kind: turn.EvError, Data: data}
	}
	choices := v.Get("choices")
	if u := v.Get("usage"); u.IsObject() && len(choices.Array()) == 0 {
		d.usageRaw = append([]byte(nil), data...)
		return turn.RecallEvent{Kind: turn.EvStop}
	}
	ch := v.Get("choices.0")
	if !ch.Exists() {
		return turn.RecallEvent{Kind: turn.EvPass, Data: data}
	}
	delta := ch.Get("delta")
	if c := delta.Get("content"); c.Type == gjson.String {
		d.text.WriteString(c.Str)
	}
	e := turn.RecallEvent{Kind: turn.EvItem, Data: data}
	first := true
	delta.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
		k := tc.Get("index").Int()
		if k < 0 || k > int64(len(d.calls)) {
			return true // not contiguous: never seen as a unit
		}
		opens := k == int64(len(d.calls))
		if opens {
			d.calls = append(d.calls, &streamCall{})
		}
		c := d.calls[k]
		if id := tc.Get("id").Str; id != "" {
			c.id = strings.Clone(id)
		}
		if typ := tc.Get("type").Str; typ != "" {
			c.typ = strings.Clone(typ)
		}
		c.name += strings.Clone(tc.Get("function.name").Str) // "" + s would be s itself
		c.args.WriteString(tc.Get("function.arguments").Str)
		if first {
			first = false
			e.Index, e.Start, e.Tool = k+1, opens, opens
			e.Call = opens && c.name == d.tool.Name
		}
		return true
	})
	if ch.Get("finish_reason").Type == gjson.String {
		d.finish = append([]byte(nil), data...)
		return turn.RecallEvent{Kind: turn.EvEnd}
	}
	if first {
		// A text chunk: unit 0, which the loop opens once. The round's first chunk that only
		// says the role (content empty or absent) is the response's opening.
		if d.text.Len() == 0 && len(d.calls) == 0 && delta.Get("content").Str == "" && !hasOtherDelta(delta) {
			return turn.RecallEvent{Kind: turn.EvStart, Data: data}
		}
		e.Index, e.Start = 0, true
	}
	return e
}

// hasOtherDelta reports whether a delta carries something besides role, content and tool calls
// (refusal, reasoning_content, …).
func hasOtherDelta(delta gjson.Result) bool {
	other := false
	delta.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "role", "content", "tool_calls":
			return true
		}
		other = v.Type != gjson.Null && !(v.Type == gjson.String && v.Str == "")
		return !other
	})
	return other
}

// Reindex is the identity: a Chat chunk has no unit index, and the tool calls the client gets
// are those of the final round, numbered as the upstream numbered them (a round that called the
// recall tool reaches the client only up to its first tool call).
func (d *recall) Reindex([]byte, int64) (relay.Splice, bool) { return relay.Splice{}, false }

// Render gives the chunk the first round's id, and takes usage out when the client did not ask
// for it (compactd asked the upstream for it).
func (d *recall) Render(out [][]byte, _ string, data []byte, edits []relay.Splice) [][]byte {
	if id := relay.GetAlias(data, "id"); id.Exists() && id.Str != d.id && d.id != "" && id.Index > 0 {
		edits = append(edits, relay.Splice{From: id.Index, To: id.Index + len(id.Raw), With: api.AppendString(nil, d.id)})
	}
	if !d.hasUsage && relay.GetAlias(data, "usage").Exists() {
		// The usage chunk, or a chunk that carries usage: small, edited as a whole.
		data, _ = sjson.DeleteBytes(relay.ApplySplices(data, edits), "usage")
		edits = nil
	}
	return relay.SpliceEvent(out, &d.scratch, &sse.Event{}, data, edits)
}

// renderBytes is Render as one slice, for the few chunks compactd builds itself.
func (d *recall) renderBytes(data []byte) []byte {
	return bytes.Join(d.Render(nil, "", data, nil), nil)
}

// Compacted is false: a Chat compaction has no unit on the wire.
func (d *recall) Compacted() bool { return false }

func (d *recall) Prelude() []byte { return nil }

// DoneStops: a round whose finish chunk came is complete at [DONE] (an upstream that sends no
// usage chunk).
func (d *recall) DoneStops() bool { return d.finish != nil }

func (d *recall) StreamRound() ([]turn.RecallItem, string) {
	if d.finish == nil {
		return nil, "ended its stream without a finish_reason"
	}
	switch {
	case d.usageRaw != nil:
		d.usage.add(gjson.GetBytes(d.usageRaw, "usage"))
		d.sawUsage = true
	case gjson.GetBytes(d.finish, "usage").IsObject(): // an upstream that puts it on the finish chunk
		d.usage.add(gjson.GetBytes(d.finish, "usage"))
		d.sawUsage = true
	}
	msg := []byte(`{"role":"assistant","content":null}`)
	if d.text.Len() > 0 {
		msg, _ = sjson.SetBytes(msg, "content", d.text.String())
	}
	items := []turn.RecallItem{{Raw: msg}}
	for _, c := range d.calls {
		tc := []byte(`{"id":"","type":"function","function":{"name":"","arguments":""}}`)
		tc, _ = sjson.SetBytes(tc, "id", c.id)
		if c.typ != "" {
			tc, _ = sjson.SetBytes(tc, "type", c.typ)
		}
		tc, _ = sjson.SetBytes(tc, "function.name", c.name)
		tc, _ = sjson.SetBytes(tc, "function.arguments", c.args.String())
		items = append(items, d.toolCall(gjson.ParseBytes(tc)))
	}
	// The next round starts afresh; the final chunks of this one stay for FinalStream.
	d.text.Reset()
	d.calls = nil
	return items, ""
}

func (d *recall) FinalStream(visible [][]byte) []byte {
	calls := false
	for _, v := range visible {
		calls = calls || !gjson.GetBytes(v, "role").Exists()
	}
	fin := d.finish
	if !calls && gjson.GetBytes(fin, "choices.0.finish_reason").Str == "tool_calls" {
		fin, _ = sjson.SetBytes(fin, "choices.0.finish_reason", "stop")
	}
	if gjson.GetBytes(fin, "usage").IsObject() {
		fin, _ = sjson.SetRawBytes(fin, "usage", d.usage.object(gjson.GetBytes(fin, "usage")))
	}
	out := d.renderBytes(fin)
	// An upstream that ignores include_usage reports nothing, and neither does compactd.
	if d.hasUsage && d.sawUsage && !gjson.GetBytes(fin, "usage").IsObject() {
		u := d.usageRaw
		if u == nil { // the final round's usage came on an earlier round's chunks only
			u, _ = sjson.SetRawBytes(fin, "choices", []byte("[]"))
		}
		u, _ = sjson.SetRawBytes(u, "usage", d.usage.object(gjson.GetBytes(u, "usage")))
		out = append(out, d.renderBytes(u)...)
	}
	return sse.AppendEvent(out, "", doneMarker)
}

func (d *recall) Answer(items []turn.RecallItem, results []string) {
	msg := []byte(`{"role":"assistant","content":null}`)
	var calls, tools [][]byte
	k := 0
	for _, it := range items {
		if it.Call == nil {
			if c := gjson.GetBytes(it.Raw, "content"); c.Type == gjson.String && c.Str != "" {
				msg, _ = sjson.SetBytes(msg, "content", c.Str)
			}
			continue
		}
		calls = append(calls, it.Raw)
		res := []byte(`{"role":"tool","tool_call_id":"","content":""}`)
		res, _ = sjson.SetBytes(res, "tool_call_id", it.Call.ID)
		res, _ = sjson.SetBytes(res, "content", results[k])
		tools = append(tools, res)
		k++
	}
	msg, _ = sjson.SetRawBytes(msg, "tool_calls", api.JSONArray(calls))
	d.msgs = append(append(d.msgs, msg), tools...)
	d.finish, d.usageRaw = nil, nil
}

// ErrorEvents closes a stream under way with an error chunk: compactd's fault, or the
// upstream's own error answer.
func (d *recall) ErrorEvents(f *fault.Fault, status int, body []byte) []byte {
	if status != 0 {
		return errorChunk(responses.UpstreamError(status, body))
	}
	return errorChunk(api.OpenAIFault(f))
}

// usageSum adds Chat Completions usage objects.
type usageSum struct{ prompt, completion, total, cached, reasoning int64 }

func (u *usageSum) add(v gjson.Result) {
	u.prompt += v.Get("prompt_tokens").Int()
	u.completion += v.Get("completion_tokens").Int()
	u.total += v.Get("total_tokens").Int()
	u.cached += v.Get("prompt_tokens_details.cached_tokens").Int()
	u.reasoning += v.Get("completion_tokens_details.reasoning_tokens").Int()
}

// object is the usage object base (the final round's) with the sums in it.
func (u *usageSum) object(base gjson.Result) []byte {
	doc := []byte(`{}`)
	if base.IsObject() {
		doc = []byte(base.Raw)
	}
	doc, _ = sjson.SetBytes(doc, "prompt_tokens", u.prompt)
	doc, _ = sjson.SetBytes(doc, "completion_tokens", u.completion)
	doc, _ = sjson.SetBytes(doc, "total_tokens", u.total)
	if base.Get("prompt_tokens_details").IsObject() {
		doc, _ = sjson.SetBytes(doc, "prompt_tokens_details.cached_tokens", u.cached)
	}
	if base.Get("completion_tokens_details").IsObject() {
		doc, _ = sjson.SetBytes(doc, "completion_tokens_details.reasoning_tokens", u.reasoning)
	}
	return doc
}

// apply writes the sums into the usage object at path of doc.
func (u *usageSum) apply(doc []byte, path string) []byte {
	doc, _ = sjson.SetRawBytes(doc, path, u.object(gjson.GetBytes(doc, path)))
	return doc
}
