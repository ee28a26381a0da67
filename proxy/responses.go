package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/compactd/compactd/internal/fault"
	"io"
	"net/http"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/engine"
)

// readBody reads a request body under the configured limit. On failure it has answered the
// client in d's envelope: 413 past the size limit, 408 past the read deadline, 503 past the
// in-flight budget, 400 for a body that could not be read.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, d dialect) ([]byte, bool) {
	body, err := readAllSized(s.boundedBody(w, r), r.ContentLength, s.cfg.MaxBodyBytes)
	if err == nil {
		return body, true
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeFault(w, d, s.bodyTooLarge())
	case errors.Is(err, errBodyReadTimeout):
		writeFault(w, d, s.bodyTimeout())
	case errors.Is(err, errBudgetExceeded):
		s.budgetRefused(w, d)
	default:
		writeFault(w, d, &fault.Fault{Message: "compactd could not read the request body: " + err.Error()})
	}
	return nil, false
}

// parseResponses reads and skims a Responses request body and applies the handoff of the latest
// compaction item it carries. On failure it has answered the client.
func (s *Server) parseResponses(w http.ResponseWriter, r *http.Request) (*api.ResponsesRequest, []api.Item, *engine.Opened, bool) {
	body, ok := s.readBody(w, r, dialectOpenAI)
	if !ok {
		return nil, nil, nil, false
	}
	req, err := api.ParseResponsesRequest(body)
	if err != nil {
		writeFault(w, dialectOpenAI, api.BodyFault(err))
		return nil, nil, nil, false
	}
	// Foreign compaction items (OpenAI's own, say) are dropped or refused before anything else
	// reads the input: see foreign.go.
	req, ok = s.foreignResponses(w, req)
	if !ok {
		return nil, nil, nil, false
	}
	items := req.Items
	if req.Trigger >= 0 {
		if req.Trigger != len(items)-1 {
			writeFault(w, dialectOpenAI, fault.InvalidParam(fmt.Sprintf("input[%d]", req.Trigger), fault.CodeInvalidValue,
				"A compaction_trigger item must be the last item of input."))
			return nil, nil, nil, false
		}
		if gjson.GetBytes(items[req.Trigger].Raw, "id").Exists() {
			writeFault(w, dialectOpenAI, fault.InvalidParam(fmt.Sprintf("input[%d].id", req.Trigger), fault.CodeInvalidValue,
				"A compaction_trigger item must not carry an id."))
			return nil, nil, nil, false
		}
		items = items[:req.Trigger]
	}
	var prev *engine.Opened
	if req.Compaction >= 0 && req.Compaction < len(items) {
		o, e := s.openItem(r.Context(), items, req.Compaction)
		if e != nil {
			writeFault(w, dialectOpenAI, e)
			return nil, nil, nil, false
		}
		prev = o
		items = s.expand(items, req.Compaction, o)
	}
	return req, items, prev, true
}

// handleResponses serves POST /v1/responses: handoff, threshold, compaction, forward, rewrite.
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	req, items, prev, ok := s.parseResponses(w, r)
	if !ok {
		return
	}
	if req.Trigger >= 0 {
		s.handleTrigger(w, r, req, items, prev)
		return
	}
	if s.codexAgentCompaction(w, r, req, items) {
		return // Codex's own local compaction turn, answered by compactd (agentcompact.go)
	}
	var th compact.Threshold
	if req.ContextManagement != nil {
		var err error
		if th, err = compact.ParseContextManagement(req.ContextManagement); err != nil {
			writeFault(w, dialectOpenAI, paramFault(err, "context_management"))
			return
		}
	}
	t := newTurn(r.Context(), req.Stream)
	changed := prev != nil
	var c *compaction
	if limit, trigger := s.cfg.Policy.ForRoute(dialectOpenAI.name()).Effective(th); limit > 0 && req.PreviousResponseID == "" {
		// transparent: the operator's policy for a client that asked for nothing (see
		// compaction.go); its compactions go to the memo, and come back from it.
		transparent := trigger == "policy" && req.ContextManagement == nil && req.Compaction < 0
		var mem *engine.Memory
		if transparent {
			if mem = s.engine.Remembered(r.Context(), dialectOpenAI.engine(), s.scope(r.Context()), api.Raws[json.RawMessage](items)); mem != nil && mem.Opened != nil {
				prev, changed = mem.Opened, true
				items = s.handoffAt(items[:mem.Items], items[mem.Items:], prev)
				s.markApplied(w, r, dialectOpenAI, mem)
			}
		}
		covers := len(req.Items)
		total, _ := s.cfg.Counter.Request(req.Instructions, items, req.Tools, limit)
		if !compact.Over(total, limit) {
			s.engine.Speculate(engine.SpecRequest{Dialect: dialectOpenAI.engine(), Tenant: s.tenantOf(r.Context()), Model: req.Model,
				Owner: s.ownerOf(r.Context()), Conversation: conversationLabel(r, req.PromptCacheKey, prev),
				Auth: s.summariserAuth(r), Units: items, Retain: s.cfg.RetainTokens, Total: total, Limit: limit})
		}
		if compact.Over(total, limit) {
			var answered bool
			c, answered = s.thresholdCompaction(w, r, t, trigger,
				s.responsesCompactIn(r, compactRequest{model: req.Model, items: items, tokensBefore: total, prev: prev,
					conversation: conversationID(r, req.PromptCacheKey, prev), speculate: true, memory: mem, covers: covers}))
			if answered {
				return
			}
			if c != nil {
				items, changed = c.items, true
				if transparent {
					markCompactedTurn(w, t, c)
				} else {
					t.item, t.itemID = c.item, c.ID
				}
			}
		}
	}
	rt := s.recallFor(r.Context(), req, prev, c)
	if c == nil && (rt != nil || changed || req.ContextManagement != nil || s.cfg.StripCodexFields) && !s.holdRebuild(r) {
		s.budgetRefused(w, dialectOpenAI) // a body-sized rebuild, beside the body
		return
	}
	if rt != nil {
		s.forwardRecall(w, r, t, rt, rawItems(items, s.cfg.StripCodexFields))
		return
	}
	out := req.Body
	if changed || req.ContextManagement != nil || s.cfg.StripCodexFields {
		if !changed && req.InputString {
			out = req.Body // only context_management to drop; keep the string input as sent
			out, _ = sjson.DeleteBytes(out, "context_management")
		} else {
			out = req.WithInput(rawItems(items, s.cfg.StripCodexFields), true)
		}
		if s.cfg.StripCodexFields {
			out, _ = sjson.DeleteBytes(out, "client_metadata")
		}
	}
	s.forwardBody(w, r, t, out)
}

// forwardBody sends body to the upstream in place of the client's and relays the answer.
func (s *Server) forwardBody(w http.ResponseWriter, r *http.Request, t *turnState, body []byte) {
	out := withBody(r, withTurn(r.Context(), t), body)
	var rw http.ResponseWriter = w
	if t.committed {
		rw = committedWriter{w}
	}
	s.forward.ServeHTTP(rw, out)
}

// rawItems returns the items' JSON, without Codex-only metadata when strip is set.
func rawItems(items []api.Item, strip bool) [][]byte {
	out := make([][]byte, len(items))
	for i, it := range items {
		out[i] = it.Raw
		if strip && bytes.Contains(it.Raw, []byte(`"internal_chat_message_metadata_passthrough"`)) {
			out[i], _ = sjson.DeleteBytes(it.Raw, "internal_chat_message_metadata_passthrough")
		}
	}
	return out
}

// paramFault is the 400 for a validation error from package compact.
func paramFault(err error, fallbackParam string) *fault.Fault {
	var pe *compact.ParamError
	if errors.As(err, &pe) {
		return fault.InvalidParam(pe.Param, fault.CodeInvalidValue, pe.Message)
	}
	return fault.InvalidParam(fallbackParam, fault.CodeInvalidValue, err.Error())
}

// readAllSized reads a body in one allocation when its length is declared (agents send
// multi-megabyte bodies with Content-Length), instead of io.ReadAll's doubling growth.
func readAllSized(r io.Reader, declared, limit int64) ([]byte, error) {
	if declared <= 0 || declared > limit {
		return io.ReadAll(r)
	}
	buf := make([]byte, declared, declared+1)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	// A body longer than declared is the server's to reject; read one more byte to be sure.
	var extra [1]byte
	if n, _ := r.Read(extra[:]); n > 0 {
		rest, err := io.ReadAll(r)
		return append(append(buf, extra[:n]...), rest...), err
	}
	return buf, nil
}
