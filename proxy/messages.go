package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/turn"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/engine"
)

// The Anthropic Messages routes. A request that carries nothing compactd acts on (no compaction
// block, no compact_20260112 edit, no on-demand `compaction`, and no context-editing edit compactd
// is configured to apply) is forwarded byte for byte, and so is its response: Claude Code's
// traffic, pings and upstream error bodies included. Everything else goes through the same
// engine as the Responses side: handoff of the latest compaction block, threshold or on-demand
// summarisation, sealing, and a rewrite of the response that puts the compaction block first.

// msgTurn is the state a rewritten Messages request shares with the response hook.
type msgTurn struct {
	t *turnState // the dialect-neutral part: committed stream, for the shared error handler

	// block is the compaction block to put at content[0], nil when this turn did not compact.
	block          []byte
	summary, ecStr string
	compUsage      summarizer.Usage
	// applied are the context-editing edits compactd applied, reported in context_management.
	applied []api.AppliedEdit

	// countTokens marks a count_tokens call: its answer gains
	// context_management.original_input_tokens = input_tokens + removed.
	countTokens bool
	removed     int
}

func (mt *msgTurn) rewrites() bool {
	return mt.block != nil || len(mt.applied) > 0 || mt.countTokens || mt.t.Committed
}

type msgTurnKey struct{}

func msgTurnFrom(r *http.Request) *msgTurn {
	mt, _ := r.Context().Value(msgTurnKey{}).(*msgTurn)
	return mt
}

// messagesPrelude reads and skims a Messages request and validates its context_management. It
// forwards requests that use nothing compactd handles, and answers invalid ones; ok is false
// when the request has been answered either way. With agent an agent's own compaction turn is
// answered by compactd (agentcompact.go).
// With policy (a server-side threshold on the Messages route) a request that needs nothing else
// of compactd is read on too, to be counted, with a nil context management: compactd applies
// none of its edits and leaves it as sent, unvalidated, like the rest of such a request. So is
// an agent's turn after a compaction compactd archived (with agent), for the recall tool.
func (s *Server) messagesPrelude(w http.ResponseWriter, r *http.Request, policy, agent bool) (*api.MessagesRequest, *api.ContextManagement, bool) {
	body, req, ok := s.readMessages(w, r)
	if !ok {
		return nil, nil, false
	}
	if agent && s.agentCompaction(w, r, req) {
		return nil, nil, false // an agent's own compaction turn, answered by compactd
	}
	if !s.messagesNeedCompactd(req) {
		if policy || agent && s.maybeAgentRecall(r, req) {
			return req, nil, true
		}
		s.forwardMessages(w, r, nil, body)
		return nil, nil, false
	}
	cm, e := api.ParseMessagesContextManagement(req.ContextManagement)
	if e != nil {
		writeFault(w, dialectAnthropic, e)
		return nil, nil, false
	}
	return req, cm, true
}

// handleMessages serves POST /v1/messages.
func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	policy := s.cfg.Policy.ForRoute(dialectAnthropic.Name())
	req, cm, ok := s.messagesPrelude(w, r, policy.Threshold > 0, true)
	if !ok {
		return
	}
	onDemand := req.Compaction != nil && string(bytes.TrimSpace(req.Compaction)) != "null"
	var instructions string
	if onDemand {
		var e *fault.Fault
		if instructions, e = api.ParseCompactionConfig(req.Compaction); e != nil {
			writeFault(w, dialectAnthropic, e)
			return
		}
	}
	view, e := s.resolveBlocksForeign(r.Context(), w, req)
	if e != nil {
		writeFault(w, dialectAnthropic, e)
		return
	}
	if onDemand {
		s.compactOnDemand(w, r, req, view, instructions)
		return
	}

	mt := &msgTurn{t: &turnState{Stream: turn.Stream{Streamed: req.Stream}}}
	msgs, changed := view.msgs, view.changed
	if s.cfg.AnthropicApplyEdits && cm != nil {
		var edited bool
		msgs, mt.applied, edited = s.applyEdits(req, cm, msgs)
		changed = changed || edited
	}
	// The threshold: the client's compact_20260112 edit, or the operator's policy for the route
	// (compact.Policy, as on Responses).
	var th compact.Threshold
	instructions, pause := "", false
	if cm != nil && cm.Compact != nil {
		th = compact.Threshold{Set: true, Tokens: cm.Compact.Trigger}
		instructions, pause = cm.Compact.Instructions, cm.Compact.Pause
	}
	compacted, applied := false, false
	var comp *compaction
	if limit, trigger := policy.Effective(th); limit > 0 {
		// transparent: the operator's policy for a client that asked for nothing (Claude Code;
		// see compaction.go): no compaction block goes back, the memo remembers instead.
		transparent := trigger == "policy" && (cm == nil || cm.Compact == nil) && len(req.Blocks) == 0
		var mem *engine.Memory
		if transparent {
			if mem = s.engine.Remembered(r.Context(), dialectAnthropic.Engine(), s.scope(r.Context()), api.Raws[json.RawMessage](api.CountItems(msgs))); mem != nil && mem.Opened != nil {
				view.prev, applied, changed = mem.Opened, true, true
				msgs = memoHandoffMessages(msgs, mem.Items, mem.Opened)
				s.markApplied(w, r, dialectAnthropic, mem)
			}
		}
		covers := len(req.Messages)
		total, _ := s.cfg.Counter.Request(req.System, api.CountItems(msgs), req.Tools, limit)
		if !compact.Over(total, limit) && s.engine.Speculating(total, limit) {
			// The background job outlives the turn: it gets its own copy of the message list.
			kept := slices.Clone(msgs)
			s.engine.Speculate(engine.SpecRequest{Dialect: dialectAnthropic.Engine(), Tenant: s.tenantOf(r.Context()), Model: req.Model,
				Owner: s.ownerOf(r.Context()), Conversation: conversationLabel(r, "", view.prev),
				Auth: s.summariserAuth(r), Units: api.CountItems(kept), Prefix: func(n int) []api.Item { return api.MessageItems(kept[:n]) },
				Total: total, Limit: limit})
		}
		if compact.Over(total, limit) {
			head, keep := msgs, []api.Message(nil)
			if transparent {
				head, keep = s.splitCurrentTurn(msgs, limit)
			}
			in := s.messagesCompactIn(r, req, head, view.prev)
			if len(keep) > 0 {
				in.finish = keepCurrentTurn(s, req, in.finish, keep)
			}
			in.Instructions, in.TokensBefore, in.Speculate = instructions, total, true
			in.Memory, in.Covers = mem, covers-len(keep)
			c, answered := s.thresholdCompaction(w, r, mt.t, trigger, in)
			if answered {
				return
			}
			if c != nil {
				if pause {
					s.writeCompactionMessage(w, req, mt, c, false)
					return
				}
				msgs, changed, compacted, comp = c.msgs, true, true, c
				if transparent {
					markCompactedTurn(w, mt.t.st(), c)
				} else {
					mt.block, mt.summary, mt.ecStr, mt.compUsage = c.item, c.Summary, c.EncryptedContent, c.Usage
				}
			}
		}
	}
	needed := s.messagesNeedCompactd(req)
	recall := s.messagesRecallFor(r, req, view.prev, comp)
	if !compacted && !applied && !needed && recall == nil {
		// Read only to be counted against the policy, and under it: forwarded as it came.
		s.forwardMessages(w, r, nil, req.Body)
		return
	}

	if !compacted && !holdOf(r).Rebuild() {
		s.budgetRefused(w, dialectAnthropic) // a body-sized rewrite, beside the body
		return
	}
	var changes []api.Member
	if changed {
		changes = append(changes, api.Member{Key: "messages", Value: api.JSONArray(api.Raws[[]byte](msgs))})
	}
	if req.ContextManagement != nil && needed {
		var keep []byte // nil removes context_management
		if !s.cfg.AnthropicApplyEdits {
			keep = cm.OthersJSON()
		}
		changes = append(changes, api.Member{Key: "context_management", Value: keep})
	}
	if recall != nil {
		s.forwardMessagesRecall(w, r, mt, recall, req, changes) // recall_messages.go
		return
	}
	out := req.Body
	if len(changes) > 0 {
		out = req.Rewrite(changes...)
	}
	s.forwardMessages(w, r, mt, out)
}

// readMessages reads and skims a Messages body. A body compactd cannot skim (not JSON, too deep,
// the wrong shape, duplicate members, a compaction block where compactd does not open one) is
// answered with a 400 and never forwarded: forwarding it unchecked would carry whatever
// compaction blocks it holds past compactd. On failure it has answered the client.
func (s *Server) readMessages(w http.ResponseWriter, r *http.Request) ([]byte, *api.MessagesRequest, bool) {
	body, ok := s.readBody(w, r, dialectAnthropic)
	if !ok {
		return nil, nil, false
	}
	req, err := api.ParseMessagesRequest(body)
	if err != nil {
		writeFault(w, dialectAnthropic, api.BodyFault(err))
		return nil, nil, false
	}
	return body, req, true
}

// messagesNeedCompactd reports whether compactd has anything to do with the request.
func (s *Server) messagesNeedCompactd(req *api.MessagesRequest) bool {
	if len(req.Blocks) > 0 || req.Compaction != nil {
		return true
	}
	cm := gjson.ParseBytes(req.ContextManagement)
	if len(req.ContextManagement) == 0 || cm.Type == gjson.Null {
		return false
	}
	if s.cfg.AnthropicApplyEdits {
		return true
	}
	found := !cm.Get("edits").IsArray() // malformed: compactd validates it
	cm.Get("edits").ForEach(func(_, e gjson.Result) bool {
		t := e.Get("type").Str
		found = found || (t != api.EditClearThinking && t != api.EditClearToolUses)
		return !found
	})
	return found
}

// applyEdits applies the context-editing edits compactd is configured to apply.
func (s *Server) applyEdits(req *api.MessagesRequest, cm *api.ContextManagement, msgs []api.Message) ([]api.Message, []api.AppliedEdit, bool) {
	count := func(raw []byte) int { return s.cfg.Counter.Item(raw) }
	var applied []api.AppliedEdit
	if cm.ClearToolUses != nil {
		total, _ := s.cfg.Counter.Request(req.System, api.CountItems(msgs), req.Tools, cm.ClearToolUses.TriggerInputTokens)
		var ae *api.AppliedEdit
		if msgs, ae = cm.ClearToolUses.Apply(msgs, total, count); ae != nil {
			applied = append(applied, *ae)
		}
	}
	if cm.ClearThinking != nil {
		var ae *api.AppliedEdit
		if msgs, ae = cm.ClearThinking.Apply(msgs, count); ae != nil {
			applied = append(applied, *ae)
		}
	}
	return msgs, applied, len(applied) > 0
}

// forwardMessages sends body to the Anthropic upstream in place of the client's. mt is nil for
// pass-through; otherwise the compaction betas (which only compactd implements) are dropped
// from anthropic-beta, and the context-management beta too when compactd applied the edits.
func (s *Server) forwardMessages(w http.ResponseWriter, r *http.Request, mt *msgTurn, body []byte) {
	ctx := r.Context()
	if mt != nil {
		ctx = withTurn(ctx, mt.t)
		ctx = contextWithMsgTurn(ctx, mt)
	}
	out := withBody(r, ctx, body)
	var rw http.ResponseWriter = w
	if mt != nil {
		out.Header = out.Header.Clone() // edited below; withBody shares the client's
		drop := []string{api.BetaCompact, api.BetaCompactOnDemand}
		if s.cfg.AnthropicApplyEdits {
			drop = append(drop, api.BetaContextManagement)
		}
		api.DropBetas(out.Header, drop...)
		if mt.rewrites() {
			// compactd reads the response to rewrite it: let the transport negotiate (and undo)
			// compression itself.
			out.Header.Del("Accept-Encoding")
		}
		if mt.t.Committed {
			rw = committedWriter{w}
		}
	}
	s.forwardAnthropic.ServeHTTP(rw, out)
}

// handleCountTokens serves POST /v1/messages/count_tokens: compaction blocks are applied (the
// count is of what the upstream would see), context-editing edits too when compactd applies
// them, and compaction is never triggered. When context management changed anything the answer
// carries context_management.original_input_tokens.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	req, cm, ok := s.messagesPrelude(w, r, false, false)
	if !ok {
		return
	}
	view, e := s.resolveBlocksForeign(r.Context(), w, req)
	if e != nil {
		writeFault(w, dialectAnthropic, e)
		return
	}
	msgs, changed := view.msgs, view.changed
	if s.cfg.AnthropicApplyEdits && cm != nil {
		var edited bool
		msgs, _, edited = s.applyEdits(req, cm, msgs)
		changed = changed || edited
	}
	mt := &msgTurn{t: &turnState{}, countTokens: true}
	if changed {
		before, _ := s.cfg.Counter.Request(req.System, api.CountItems(req.Messages), req.Tools, 0)
		after, _ := s.cfg.Counter.Request(req.System, api.CountItems(msgs), req.Tools, 0)
		mt.removed = max(0, before-after)
	}
	if req.Compaction == nil && !changed && req.ContextManagement == nil {
		// Nothing to take out or change: the body goes as it came, not as a copy of itself.
		s.forwardMessages(w, r, mt, req.Body)
		return
	}
	if !holdOf(r).Rebuild() {
		s.budgetRefused(w, dialectAnthropic) // a body-sized rewrite, beside the body
		return
	}
	changes := []api.Member{{Key: "compaction", Value: nil}}
	if changed {
		changes = append(changes, api.Member{Key: "messages", Value: api.JSONArray(api.Raws[[]byte](msgs))})
	}
	if req.ContextManagement != nil {
		var keep []byte
		if !s.cfg.AnthropicApplyEdits {
			keep = cm.OthersJSON()
		}
		changes = append(changes, api.Member{Key: "context_management", Value: keep})
	}
	s.forwardMessages(w, r, mt, req.Rewrite(changes...))
}
