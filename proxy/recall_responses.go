package proxy

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/sse"
)

// The recall tool on the Responses API: a function tool; a round's calls are function_call
// output items, answered with function_call_output items; usage sums input, cached, output,
// reasoning and total tokens; responses echo the request's tools, so the recall tool is taken out
// of every response object the client sees; streamed events carry sequence numbers, renumbered.

// responsesRecall is the Responses dialect of one recall turn.
type responsesRecall struct {
	s     *Server
	rt    *recallTurn
	req   *api.ResponsesRequest
	t     *turnState
	items [][]byte // the upstream input so far
	usage usageSum
	seq   int          // the client's next sequence number
	final gjson.Result // the round's response.completed (or .incomplete) event
	// scratch holds the lines before an event's data, and its sequence number.
	scratch []byte
}

// recallFor returns the recall state for a Responses turn, or nil when recall does not apply
// (recallConfig's reasons, or previous_response_id chains: the history is the upstream's).
func (s *Server) recallFor(ctx context.Context, req *api.ResponsesRequest, prev *engine.Opened, c *compaction) *responsesRecall {
	if req.PreviousResponseID != "" || s.cfg.Archive == nil {
		return nil
	}
	conv, owners := s.readSet(ctx, prev, c)
	rt, ok := s.recallConfig(conv, owners, req.Tools, req.ToolChoice) // the skim's: no second walk of the body
	if !ok {
		return nil
	}
	return &responsesRecall{s: s, rt: rt, req: req}
}

// forwardRecall runs a Responses turn that offers the recall tool, from the upstream input items.
func (s *Server) forwardRecall(w http.ResponseWriter, r *http.Request, t *turnState, d *responsesRecall, items [][]byte) {
	d.t, d.items = t, items
	s.runRecall(w, r, d.rt, d, t.stream, t.committed)
}

// toolJSON is the Responses function tool definition.
func (c RecallConfig) toolJSON() []byte {
	return mustMarshal(map[string]any{
		"type": "function", "name": c.ToolName, "description": c.Description, "strict": true,
		"parameters": querySchema(),
	})
}

func (d *responsesRecall) api() dialect { return dialectOpenAI }

func (d *responsesRecall) upstream() *url.URL { return d.s.cfg.Upstream }

func (d *responsesRecall) request(last bool) []byte {
	// The input and the recall tool in one copy of the body (Rebuild), not a second parse and
	// copy of a multi-megabyte history to append the tool.
	var tool []byte
	if !last {
		tool = d.rt.cfg.toolJSON()
	}
	out := d.req.Rebuild(d.items, true, tool)
	if d.s.cfg.StripCodexFields {
		out, _ = sjson.DeleteBytes(out, "client_metadata")
	}
	return out
}

// item classifies an output item.
func (d *responsesRecall) item(it gjson.Result) recallItem {
	ri := recallItem{raw: []byte(it.Raw)}
	switch it.Get("type").Str {
	case "function_call":
		ri.tool = true
		if it.Get("name").Str == d.rt.cfg.ToolName {
			ri.call = &recallCall{id: it.Get("call_id").Str, query: gjson.Get(it.Get("arguments").Str, "query").Str}
		}
	case "custom_tool_call", "local_shell_call", "shell_call", "apply_patch_call", "computer_call":
		ri.tool = true // the client's to run
	}
	return ri
}

func (d *responsesRecall) outputItems(output gjson.Result) []recallItem {
	var out []recallItem
	output.ForEach(func(_, it gjson.Result) bool {
		out = append(out, d.item(it))
		return true
	})
	return out
}

func (d *responsesRecall) jsonRound(data []byte) ([]recallItem, string) {
	output := gjson.GetBytes(data, "output")
	if !output.IsArray() {
		return nil, "has no output array"
	}
	d.usage.add(gjson.GetBytes(data, "usage"))
	return d.outputItems(output), ""
}

// withCompaction puts the turn's compaction item before the visible items.
func (d *responsesRecall) withCompaction(visible [][]byte) [][]byte {
	if d.t.item == nil {
		return visible
	}
	return append([][]byte{d.t.item}, visible...)
}

func (d *responsesRecall) finalJSON(data []byte, visible [][]byte) []byte {
	data = withOutput(data, "output", d.withCompaction(visible))
	data = d.usage.apply(data, "usage")
	return d.hideTool(data, "tools")
}

func (d *responsesRecall) event(_ string, data []byte) recallEvent {
	typ := gjson.GetBytes(data, "type").Str
	if d.t.responseID == "" {
		if id := gjson.GetBytes(data, "response.id"); id.Exists() {
			d.t.responseID = id.Str
		}
	}
	switch typ {
	case "response.created", "response.in_progress", "response.queued":
		return recallEvent{kind: evStart, data: d.hideTool(data, "response.tools")}
	case "response.completed", "response.incomplete":
		d.final = gjson.Parse(string(data)) // kept past the event: a copy
		return recallEvent{kind: evStop}
	case "error", "response.failed":
		return recallEvent{kind: evError, data: d.hideTool(data, "response.tools")}
	}
	oi := gjson.GetBytes(data, "output_index")
	if !oi.Exists() {
		return recallEvent{kind: evPass, data: data}
	}
	e := recallEvent{kind: evItem, index: oi.Int(), data: data}
	if typ == "response.output_item.added" {
		it := d.item(gjson.GetBytes(data, "item"))
		e.start, e.tool, e.call = true, it.tool, it.call != nil
	}
	return e
}

func (d *responsesRecall) reindex(data []byte, index int64) (relay.Splice, bool) {
	oi := relay.GetAlias(data, "output_index")
	if oi.Int() == index {
		return relay.Splice{}, false
	}
	return relay.NumberAt(oi, index)
}

// render numbers the event in the client's sequence.
func (d *responsesRecall) render(out [][]byte, name string, data []byte, edits []relay.Splice) [][]byte {
	if e, ok := relay.NumberAt(relay.GetAlias(data, "sequence_number"), int64(d.seq)); ok {
		edits = append(edits, e)
	} else { // an event without one: it gets one (a copy, of an event that has no number)
		data, _ = sjson.SetBytes(relay.ApplySplices(data, edits), "sequence_number", d.seq)
		edits = nil
	}
	d.seq++
	return relay.SpliceEvent(out, &d.scratch, &sse.Event{Name: name}, data, edits)
}

func (d *responsesRecall) compacted() bool { return d.t.item != nil }

func (d *responsesRecall) prelude() []byte {
	b := compactionItemEvents(nil, d.t.itemID, d.t.item, 0, d.seq)
	d.seq += 2
	return b
}

func (d *responsesRecall) streamRound() ([]recallItem, string) {
	output := d.final.Get("response.output")
	if !output.IsArray() {
		return nil, "sent a final event without an output array"
	}
	d.usage.add(d.final.Get("response.usage"))
	return d.outputItems(output), ""
}

func (d *responsesRecall) finalStream(visible [][]byte) []byte {
	// withOutput builds a new event; d.final's bytes are only read.
	data := withOutput(unsafe.Slice(unsafe.StringData(d.final.Raw), len(d.final.Raw)), "response.output", d.withCompaction(visible))
	data = d.usage.apply(data, "response.usage")
	data = d.hideTool(data, "response.tools")
	return renderBytes(d, gjson.GetBytes(data, "type").Str, data)
}

func (d *responsesRecall) answer(items []recallItem, results []string) {
	k := 0
	for _, it := range items {
		d.items = append(d.items, it.raw)
		if it.call == nil {
			continue
		}
		out := []byte(`{"type":"function_call_output","call_id":"","output":""}`)
		out, _ = sjson.SetBytes(out, "call_id", it.call.id)
		out, _ = sjson.SetBytes(out, "output", results[k])
		d.items = append(d.items, out)
		k++
	}
}

func (d *responsesRecall) failure(f recallFailure) *api.OpenAIError {
	if f.status != 0 && f.err == nil {
		return upstreamErrorFromBody(f.status, f.body)
	}
	return api.OpenAIFault(f.fault(dialectOpenAI, d.t.item != nil))
}

func (d *responsesRecall) writeError(w http.ResponseWriter, r *http.Request, f recallFailure) {
	if f.err != nil {
		d.s.upstreamError(dialectOpenAI)(w, r, f.err)
		return
	}
	d.failure(f).Write(w)
}

func (d *responsesRecall) errorEvents(f recallFailure) []byte {
	b := d.failure(f).SSE(d.seq, d.t.responseID)
	d.seq += 2
	return b
}

// hideTool removes the recall tool from the tools array at path: responses echo the request's
// tools, and the client must not learn of one it did not send.
func (d *responsesRecall) hideTool(doc []byte, path string) []byte {
	tools := gjson.GetBytes(doc, path)
	if !tools.IsArray() {
		return doc
	}
	kept := make([][]byte, 0, len(tools.Array()))
	found := false
	for _, t := range tools.Array() {
		if t.Get("name").Str == d.rt.cfg.ToolName && t.Get("type").Str == "function" {
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
