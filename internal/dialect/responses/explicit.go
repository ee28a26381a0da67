package responses

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/turn"
)

// The two explicit compaction routes: POST /v1/responses/compact (v1, JSON) and a turn ending in
// a compaction_trigger item (v2, what Codex CLI sends; usually streamed). Both are answered by
// compactd: the upstream model is never called, and never sees the trigger. With nothing to
// replace they still issue exactly one (empty) item, without a summariser call, because clients
// require one.

// Explicit: the compact endpoint, or a turn whose last input item is compaction_trigger.
func (t *Turn) Explicit(env *turn.Env) (string, engine.Request, *fault.Fault, bool) {
	trigger := ""
	switch {
	case t.a.CompactEndpoint:
		trigger = "compact_endpoint"
		if f := t.endpointFault(); f != nil {
			return trigger, engine.Request{}, f, true
		}
	case t.req.Trigger >= 0:
		trigger = "compaction_trigger"
		t.respID, t.itemID, t.created = engine.NewID("resp_"), engine.NewID("cmp_"), time.Now().Unix()
	default:
		return "", engine.Request{}, nil, false
	}
	total, _ := env.Counter.Request(t.req.Instructions, t.items, t.req.Tools, 0)
	return trigger, t.request(env, engine.Request{ID: t.itemID, Model: t.req.Model, Items: t.items, TokensBefore: total, Prev: t.prev,
		Conversation: env.Conversation(t.req.PromptCacheKey, t.prev), Retain: env.Retain, AllowEmpty: true, Explicit: true}), nil, true
}

func (t *Turn) endpointFault() *fault.Fault {
	switch {
	case t.req.Model == "":
		return fault.InvalidParam("model", fault.CodeMissingParameter, "Missing required parameter: 'model'.")
	case t.req.Trigger >= 0:
		return fault.InvalidParam("input", fault.CodeInvalidValue, "A compaction_trigger item is not valid on /v1/responses/compact, which always compacts.")
	case !t.req.HasInput():
		return fault.InvalidParam("input", fault.CodeMissingParameter,
			"compactd needs the conversation in input: previous_response_id chains keep their state upstream, where compactd cannot compact it.")
	}
	return nil
}

// Nothing: both routes allow an empty compaction, so there is always an item to answer with.
func (t *Turn) Nothing() *fault.Fault { return nil }

// ExplicitKeepAlive: a streamed compaction_trigger turn opens the response (created, in_progress,
// the item's output_item.added) with its first keep-alive, then says
// response.compaction.compacting, as OpenAI's own stream does while it compacts.
func (t *Turn) ExplicitKeepAlive() func(first bool) []byte {
	if t.a.CompactEndpoint {
		return nil
	}
	return func(first bool) []byte {
		var b []byte
		if first {
			b = t.opening()
		}
		return t.event(b, "response.compaction.compacting", map[string]any{"item_id": t.itemID, "output_index": 0})
	}
}

// Answer writes the explicit compaction's answer.
func (t *Turn) Answer(w http.ResponseWriter, c *engine.Compaction) {
	item := api.CompactionItem(c.ID, c.EncryptedContent)
	if t.a.CompactEndpoint {
		// output: the retained user messages, then exactly one compaction item, last. The client
		// sends [...output, new message] next, and the handoff rebuilds the same context from it.
		userOnly := c.Window
		userOnly.Instructions = nil
		output := make([]json.RawMessage, 0, len(c.Window.Retained)+1)
		for _, it := range t.env.Engine.KeepWindow(Adapter{}.Engine(), nil, c.Compacted, userOnly, t.env.Retain) {
			output = append(output, it.Raw)
		}
		output = append(output, item)
		writeJSON(w, map[string]any{
			"id": engine.NewID("resp_"), "object": "response.compaction", "created_at": time.Now().Unix(),
			"output": output, "usage": usageJSON(c.Usage),
		})
		return
	}
	done := t.response("completed", []json.RawMessage{item}, usageJSON(c.Usage))
	if !t.stream.Streamed {
		writeJSON(w, done)
		return
	}
	var b []byte
	if !t.stream.Committed {
		b = t.opening()
	}
	b = t.event(b, "response.output_item.done", map[string]any{"output_index": 0, "item": json.RawMessage(item)})
	b = t.event(b, "response.completed", map[string]any{"response": done})
	turn.WriteEvents(w, t.stream.Committed, b)
}

func writeJSON(w http.ResponseWriter, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// response is the trigger turn's response object.
func (t *Turn) response(status string, output []json.RawMessage, usage any) map[string]any {
	if output == nil {
		output = []json.RawMessage{}
	}
	return map[string]any{
		"id": t.respID, "object": "response", "created_at": t.created, "status": status,
		"model": t.req.Model, "output": output, "usage": usage,
		"parallel_tool_calls": false, "tool_choice": "auto", "tools": []any{},
	}
}

// event appends one event of the trigger turn's stream, numbered in its sequence.
func (t *Turn) event(dst []byte, typ string, fields map[string]any) []byte {
	fields["type"] = typ
	fields["sequence_number"] = t.stream.Seq
	t.stream.Seq++
	data, _ := json.Marshal(fields)
	return api.AppendSSE(dst, typ, data)
}

func (t *Turn) opening() []byte {
	t.stream.ResponseID = t.respID
	b := t.event(nil, "response.created", map[string]any{"response": t.response("in_progress", nil, nil)})
	b = t.event(b, "response.in_progress", map[string]any{"response": t.response("in_progress", nil, nil)})
	return t.event(b, "response.output_item.added", map[string]any{
		"output_index": 0, "item": json.RawMessage(api.CompactionItem(t.itemID, "")),
	})
}

// usageJSON renders summariser usage in the Responses usage shape.
func usageJSON(u summarizer.Usage) map[string]any {
	return map[string]any{
		"input_tokens":          u.InputTokens,
		"input_tokens_details":  map[string]any{"cached_tokens": u.CachedTokens},
		"output_tokens":         u.OutputTokens,
		"output_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
		"total_tokens":          u.TotalTokens,
	}
}
