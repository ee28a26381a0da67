package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
)

// The two explicit compaction routes: POST /v1/responses/compact (v1, JSON) and a Responses turn
// ending in a compaction_trigger item (v2, what Codex CLI sends; usually streamed). Both answer
// themselves: the upstream model is never called, and never sees the trigger.

// handleCompact serves POST /v1/responses/compact.
func (s *Server) handleCompact(w http.ResponseWriter, r *http.Request) {
	req, items, prev, ok := s.parseResponses(w, r)
	if !ok {
		return
	}
	if req.Model == "" {
		writeFault(w, dialectOpenAI, fault.InvalidParam("model", fault.CodeMissingParameter, "Missing required parameter: 'model'."))
		return
	}
	if req.Trigger >= 0 {
		writeFault(w, dialectOpenAI, fault.InvalidParam("input", fault.CodeInvalidValue, "A compaction_trigger item is not valid on /v1/responses/compact, which always compacts."))
		return
	}
	if !req.HasInput() {
		writeFault(w, dialectOpenAI, fault.InvalidParam("input", fault.CodeMissingParameter,
			"compactd needs the conversation in input: previous_response_id chains keep their state upstream, where compactd cannot compact it."))
		return
	}
	c, e := s.runExplicit(r, "compact_endpoint", req, items, prev)
	if e != nil {
		writeFault(w, dialectOpenAI, e)
		return
	}
	s.compacted(r, dialectOpenAI, "compact_endpoint", c)
	// output: the retained user messages, then exactly one compaction item, last. The client sends
	// [...output, new message] next, and the handoff rebuilds the same context from it.
	output := make([]json.RawMessage, 0, len(c.Window.Retained)+1)
	for _, it := range s.engine.KeepWindow(dialectOpenAI.engine(), nil, items, userOnly(c.Window), s.cfg.RetainTokens) {
		output = append(output, it.Raw)
	}
	output = append(output, c.item)
	body, _ := json.Marshal(map[string]any{
		"id":         newID("resp_"),
		"object":     "response.compaction",
		"created_at": time.Now().Unix(),
		"output":     output,
		"usage":      usageJSON(c.Usage),
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// runExplicit compacts for an explicit route. It never returns errNothingToCompact: with nothing to
// replace it still issues exactly one (empty) item, without a summariser call, because clients
// require one. A summary that came back no smaller than what it would replace is refused with
// 400 compaction_not_smaller (compactionFailure).
func (s *Server) runExplicit(r *http.Request, trigger string, req *api.ResponsesRequest, items []api.Item, prev *engine.Opened) (*compaction, *fault.Fault) {
	if !s.holdCompaction(r) {
		s.metrics.budgetRefused()
		return nil, s.budgetExceeded()
	}
	total, _ := s.cfg.Counter.Request(req.Instructions, items, req.Tools, 0)
	c, err := s.compactItems(r.Context(), r, compactRequest{model: req.Model, items: items, tokensBefore: total, prev: prev, conversation: conversationID(r, req.PromptCacheKey, prev), allowEmpty: true})
	if err != nil {
		s.compactionNotMade(r, dialectOpenAI, trigger, req.Model, err)
		if e := compactionFailure(err); e != nil {
			return nil, e
		}
		return nil, &fault.Fault{Kind: fault.ClientClosed, Message: "client closed request"}
	}
	return c, nil
}

// userOnly is a window that keeps only its retained user messages (not instructions), the part of
// the context /v1/responses/compact hands back.
func userOnly(w compact.Window) compact.Window {
	w.Instructions = nil
	return w
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

// handleTrigger answers a Responses turn whose last input item is compaction_trigger.
func (s *Server) handleTrigger(w http.ResponseWriter, r *http.Request, req *api.ResponsesRequest, items []api.Item, prev *engine.Opened) {
	respID, itemID, created := newID("resp_"), newID("cmp_"), time.Now().Unix()
	response := func(status string, output []json.RawMessage, usage any) map[string]any {
		if output == nil {
			output = []json.RawMessage{}
		}
		return map[string]any{
			"id": respID, "object": "response", "created_at": created, "status": status,
			"model": req.Model, "output": output, "usage": usage,
			"parallel_tool_calls": false, "tool_choice": "auto", "tools": []any{},
		}
	}
	if !req.Stream {
		c, e := s.runExplicit(r, "compaction_trigger", req, items, prev)
		if e != nil {
			writeFault(w, dialectOpenAI, e)
			return
		}
		s.compacted(r, dialectOpenAI, "compaction_trigger", c)
		body, _ := json.Marshal(response("completed", []json.RawMessage{c.item}, usageJSON(c.Usage)))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		return
	}

	seq := 0
	event := func(dst []byte, typ string, fields map[string]any) []byte {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		data, _ := json.Marshal(fields)
		return api.AppendSSE(dst, typ, data)
	}
	opening := func() []byte {
		b := event(nil, "response.created", map[string]any{"response": response("in_progress", nil, nil)})
		b = event(b, "response.in_progress", map[string]any{"response": response("in_progress", nil, nil)})
		return event(b, "response.output_item.added", map[string]any{
			"output_index": 0, "item": json.RawMessage(api.CompactionItem(itemID, "")),
		})
	}
	if !s.holdCompaction(r) {
		s.budgetRefused(w, dialectOpenAI)
		return
	}
	ka := startKeepAlive(w, s.cfg.KeepAlive, func(first bool) []byte {
		var b []byte
		if first {
			b = opening()
		}
		return event(b, "response.compaction.compacting", map[string]any{"item_id": itemID, "output_index": 0})
	})
	total, _ := s.cfg.Counter.Request(req.Instructions, items, req.Tools, 0)
	c, err := s.compactItems(r.Context(), r, compactRequest{id: itemID, model: req.Model, items: items, tokensBefore: total, prev: prev, conversation: conversationID(r, req.PromptCacheKey, prev), allowEmpty: true})
	committed := ka.Stop()
	if err != nil {
		s.compactionNotMade(r, dialectOpenAI, "compaction_trigger", req.Model, err)
		e := compactionFailure(err)
		switch {
		case e == nil: // client gone
		case committed:
			_, _ = w.Write(api.OpenAIFault(e).SSE(seq, respID))
		default:
			writeFault(w, dialectOpenAI, e)
		}
		return
	}
	s.compacted(r, dialectOpenAI, "compaction_trigger", c)
	var b []byte
	if !committed {
		b = opening()
	}
	b = event(b, "response.output_item.done", map[string]any{"output_index": 0, "item": json.RawMessage(c.item)})
	b = event(b, "response.completed", map[string]any{"response": response("completed", []json.RawMessage{c.item}, usageJSON(c.Usage))})
	writeEventStream(w, committed, b)
}
