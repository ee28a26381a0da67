package responses

import (
	"bytes"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn"
)

// The recall tool on the Responses API: a function tool; a round's calls are function_call
// output items, answered with function_call_output items; usage sums input, cached, output,
// reasoning and total tokens; responses echo the request's tools, so the recall tool is taken out
// of every response object the client sees; streamed events carry sequence numbers, renumbered.

// recall is the Responses side of one recall turn.
type recall struct {
	t        *Turn
	tool     turn.RecallTool
	toolJSON []byte
	strip    bool
	items    [][]byte // the upstream input so far
	usage    usageSum
	seq      int          // the client's next sequence number
	final    gjson.Result // the round's response.completed (or .incomplete) event
	// scratch holds the lines before an event's data, and its sequence number.
	scratch []byte
}

// Recall offers the tool unless the client's tools or tool choice leave no room for it.
func (t *Turn) Recall(env *turn.Env, tool turn.RecallTool) turn.Recall {
	if !turn.RecallAllowed(t.req.Tools, t.req.ToolChoice, tool.Name) { // the skim's: no second walk of the body
		return nil
	}
	return &recall{t: t, tool: tool, strip: env.Options.StripCodexFields, items: rawItems(t.items, env.Options.StripCodexFields),
		toolJSON: turn.MustJSON(map[string]any{
			"type": "function", "name": tool.Name, "description": tool.Description, "strict": true, "parameters": tool.Parameters,
		})}
}

func (d *recall) Request(last bool) []byte {
	// The input and the recall tool in one copy of the body (Rebuild), not a second parse and
	// copy of a multi-megabyte history to append the tool.
	var tool []byte
	if !last {
		tool = d.toolJSON
	}
	out := d.t.req.Rebuild(d.items, true, tool)
	if d.strip {
		out, _ = sjson.DeleteBytes(out, "client_metadata")
	}
	return out
}

// item classifies an output item.
func (d *recall) item(it gjson.Result) turn.RecallItem {
	ri := turn.RecallItem{Raw: []byte(it.Raw)}
	switch it.Get("type").Str {
	case "function_call":
		ri.Tool = true
		if it.Get("name").Str == d.tool.Name {
			ri.Call = &turn.RecallCall{ID: it.Get("call_id").Str, Query: gjson.Get(it.Get("arguments").Str, "query").Str}
		}
	case "custom_tool_call", "local_shell_call", "shell_call", "apply_patch_call", "computer_call":
		ri.Tool = true // the client's to run
	}
	return ri
}

func (d *recall) outputItems(output gjson.Result) []turn.RecallItem {
	var out []turn.RecallItem
	output.ForEach(func(_, it gjson.Result) bool {
		out = append(out, d.item(it))
		return true
	})
	return out
}

func (d *recall) JSONRound(data []byte) ([]turn.RecallItem, string) {
	output := gjson.GetBytes(data, "output")
	if !output.IsArray() {
		return nil, "has no output array"
	}
	d.usage.add(gjson.GetBytes(data, "usage"))
	return d.outputItems(output), ""
}

// withCompaction puts the turn's compaction item before the visible items.
func (d *recall) withCompaction(visible [][]byte) [][]byte {
	if d.t.item == nil {
		return visible
	}
	return append([][]byte{d.t.item}, visible...)
}

func (d *recall) FinalJSON(data []byte, visible [][]byte) []byte {
	data = withOutput(data, "output", d.withCompaction(visible))
	data = d.usage.apply(data, "usage")
	return d.hideTool(data, "tools")
}

func (d *recall) Event(_ string, data []byte) turn.RecallEvent {
	typ := gjson.GetBytes(data, "type").Str
	if d.t.stream.ResponseID == "" {
		if id := gjson.GetBytes(data, "response.id"); id.Exists() {
			d.t.stream.ResponseID = id.Str
		}
	}
	switch typ {
	case "response.created", "response.in_progress", "response.queued":
		return turn.RecallEvent{Kind: turn.EvStart, Data: d.hideTool(data, "response.tools")}
	case "response.completed", "response.incomplete":
		d.final = gjson.Parse(string(data)) // kept past the event: a copy
		return turn.RecallEvent{Kind: turn.EvStop}
	case "error", "response.failed":
		return turn.RecallEvent{Kind: turn.EvError, Data: d.hideTool(data, "response.tools")}
	}
	oi := gjson.GetBytes(data, "output_index")
	if !oi.Exists() {
		return turn.RecallEvent{Kind: turn.EvPass, Data: data}
	}
	e := turn.RecallEvent{Kind: turn.EvItem, Index: oi.Int(), Data: data}
	if typ == "response.output_item.added" {
		it := d.item(gjson.GetBytes(data, "item"))
		e.Start, e.Tool, e.Call = true, it.Tool, it.Call != nil
	}
	return e
}

func (d *recall) Reindex(data []byte, index int64) (relay.Splice, bool) {
	return relay.SetNumber(data, "output_index", index)
}

// render numbers the event in the client's sequence.
func (d *recall) Render(out [][]byte, name string, data []byte, edits []relay.Splice) [][]byte {
	if e, ok := relay.NumberAt(relay.GetAlias(data, "sequence_number"), int64(d.seq)); ok {
		edits = append(edits, e)
	} else { // an event without one: it gets one (a copy, of an event that has no number)
		data, _ = sjson.SetBytes(relay.ApplySplices(data, edits), "sequence_number", d.seq)
		edits = nil
	}
	d.seq++
	return relay.SpliceEvent(out, &d.scratch, &sse.Event{Name: name}, data, edits)
}

func (d *recall) Compacted() bool { return d.t.item != nil }

func (d *recall) Prelude() []byte {
	b := compactionItemEvents(nil, d.t.itemID, d.t.item, 0, d.seq)
	d.seq += 2
	return b
}

func (d *recall) StreamRound() ([]turn.RecallItem, string) {
	output := d.final.Get("response.output")
	if !output.IsArray() {
		return nil, "sent a final event without an output array"
	}
	d.usage.add(d.final.Get("response.usage"))
	return d.outputItems(output), ""
}

func (d *recall) FinalStream(visible [][]byte) []byte {
	// withOutput builds a new event; d.final's bytes are only read.
	data := withOutput(unsafe.Slice(unsafe.StringData(d.final.Raw), len(d.final.Raw)), "response.output", d.withCompaction(visible))
	data = d.usage.apply(data, "response.usage")
	data = d.hideTool(data, "response.tools")
	return bytes.Join(d.Render(nil, gjson.GetBytes(data, "type").Str, data, nil), nil)
}

func (d *recall) Answer(items []turn.RecallItem, results []string) {
	k := 0
	for _, it := range items {
		d.items = append(d.items, it.Raw)
		if it.Call == nil {
			continue
		}
		out := []byte(`{"type":"function_call_output","call_id":"","output":""}`)
		out, _ = sjson.SetBytes(out, "call_id", it.Call.ID)
		out, _ = sjson.SetBytes(out, "output", results[k])
		d.items = append(d.items, out)
		k++
	}
}

// ErrorEvents closes a stream under way with OpenAI's error events, in the client's sequence.
func (d *recall) ErrorEvents(f *fault.Fault, status int, body []byte) []byte {
	e := api.OpenAIFault(f)
	if status != 0 {
		e = UpstreamError(status, body)
	}
	b := e.SSE(d.seq, d.t.stream.ResponseID)
	d.seq += 2
	return b
}

// hideTool removes the recall tool from the tools array at path: responses echo the request's
// tools, and the client must not learn of one it did not send.
func (d *recall) hideTool(doc []byte, path string) []byte {
	tools := gjson.GetBytes(doc, path)
	if !tools.IsArray() {
		return doc
	}
	kept := make([][]byte, 0, len(tools.Array()))
	found := false
	for _, t := range tools.Array() {
		if t.Get("name").Str == d.tool.Name && t.Get("type").Str == "function" {
			found = true
			continue
		}
		kept = append(kept, []byte(t.Raw))
	}
	if !found {
		return doc
	}
	return withOutput(doc, path, kept)
}

// usageSum adds Responses usage objects.
type usageSum struct{ input, cached, output, reasoning, total int64 }

func (u *usageSum) add(v gjson.Result) {
	u.input += v.Get("input_tokens").Int()
	u.cached += v.Get("input_tokens_details.cached_tokens").Int()
	u.output += v.Get("output_tokens").Int()
	u.reasoning += v.Get("output_tokens_details.reasoning_tokens").Int()
	u.total += v.Get("total_tokens").Int()
}

// apply writes the sum into the usage object at path of doc.
func (u *usageSum) apply(doc []byte, path string) []byte {
	for _, f := range []struct {
		k string
		v int64
	}{
		{"input_tokens", u.input}, {"input_tokens_details.cached_tokens", u.cached}, {"output_tokens", u.output},
		{"output_tokens_details.reasoning_tokens", u.reasoning}, {"total_tokens", u.total},
	} {
		doc, _ = sjson.SetBytes(doc, path+"."+f.k, f.v)
	}
	return doc
}

// withOutput replaces the array at path with items.
func withOutput(doc []byte, path string, items [][]byte) []byte {
	arr := append([]byte{'['}, bytes.Join(items, []byte{','})...)
	arr = append(arr, ']')
	doc, _ = sjson.SetRawBytes(doc, path, arr)
	return doc
}
