package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/turn"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/handoff"
)

func contextWithMsgTurn(ctx context.Context, mt *msgTurn) context.Context {
	return context.WithValue(ctx, msgTurnKey{}, mt)
}

// msgView is the conversation as the upstream will see it once compaction blocks are applied.
type msgView struct {
	msgs    []api.Message
	prev    *engine.Opened // the block that was handed off, nil if none
	changed bool
}

// resolveBlocks applies the compaction blocks of a request. Blocks with null content are no-ops
// and are removed. If a block carries a signature (on-demand compaction), it must be the only
// block with content and the first block of messages, and its signature must verify; otherwise
// the last block with content is the one in force. Its content must match the sealed summary
// (unless edited summaries are allowed). Every message before it, and every block before it in
// its message, is dropped, and the block becomes a user text message: the handoff.
func (s *Server) resolveBlocks(ctx context.Context, req *api.MessagesRequest) (msgView, *fault.Fault) {
	if len(req.Blocks) == 0 {
		return msgView{msgs: req.Messages}, nil
	}
	var withContent []api.BlockRef
	signedAt := -1
	for _, ref := range req.Blocks {
		b := gjson.ParseBytes(req.Messages[ref.Message].Blocks[ref.Block].Raw)
		if c := b.Get("content"); !c.Exists() || c.Type == gjson.Null {
			continue
		}
		if sig := b.Get("signature"); sig.Exists() && sig.Type != gjson.Null {
			signedAt = len(withContent)
		}
		withContent = append(withContent, ref)
	}
	if len(withContent) == 0 {
		return msgView{msgs: stripCompaction(req.Messages, 0), changed: true}, nil
	}
	ref := withContent[len(withContent)-1]
	signed := signedAt >= 0
	if signed {
		if len(withContent) > 1 {
			return msgView{}, fault.InvalidParam("", "compaction_block_ambiguous",
				fmt.Sprintf("messages holds %d compaction blocks with content; with on-demand compaction send only the block the conversation returned last, as the first block of messages.", len(withContent)))
		}
		ref = withContent[signedAt]
		if ref.Message != 0 || ref.Block != 0 {
			return msgView{}, fault.InvalidParam("", "compaction_block_misplaced",
				fmt.Sprintf("%s: a signed compaction block must be the first block of the first message.", ref.Path()))
		}
	}
	if req.Messages[ref.Message].Role == "system" {
		return msgView{}, fault.InvalidParam("", "compaction_block_misplaced",
			fmt.Sprintf("%s: a compaction block cannot be in a system message.", ref.Path()))
	}
	o, e := s.openBlock(ctx, req.Messages[ref.Message].Blocks[ref.Block].Raw, ref, signed)
	if e != nil {
		return msgView{}, e
	}
	s.metrics.handoffApplied(apiName(dialectAnthropic))
	return msgView{msgs: handoffMessages(req.Messages, ref, o), prev: o, changed: true}, nil
}

// openBlock verifies (when signed) and opens one compaction block and checks its content.
func (s *Server) openBlock(ctx context.Context, raw []byte, ref api.BlockRef, signed bool) (*engine.Opened, *fault.Fault) {
	path := ref.Path()
	b := gjson.ParseBytes(raw)
	content := b.Get("content")
	if content.Type != gjson.String {
		return nil, fault.InvalidParam(path+".content", "", "Input should be a valid string")
	}
	ec := b.Get("encrypted_content")
	if ec.Type != gjson.String || ec.Str == "" {
		return nil, fault.InvalidParam(path+".encrypted_content", "",
			"the compaction block has no encrypted_content; send the block back exactly as compactd returned it.")
	}
	sig := ""
	if signed {
		if sig = b.Get("signature").Str; sig == "" {
			sig = "-" // present but empty: verified, and refused
		}
	}
	o, e := s.openCompaction(ctx, dialectAnthropic, path+".encrypted_content", ec.Str, "", sig)
	if e != nil {
		return nil, e
	}
	if content.Str != o.Payload.Summary {
		if !s.cfg.AllowEditedSummaries {
			return nil, fault.InvalidParam(path+".content", fault.CodeCompactionContentMismatch,
				"the compaction block's content differs from the summary compactd issued; send the block back unchanged.")
		}
		o.Summary = content.Str
	}
	return o, nil
}

// handoffMessages is the conversation from the block at ref on: the handoff text (summary and
// facts ledger) as a user text block in place of the block (sharing the block's message when
// that is a user message), the role:"system" messages before it (systemMessages), the messages a
// speculative compaction kept verbatim behind the summary (payload.Tail of those before the
// block's message, as many as the client still sends), the rest of the block's message, then
// every later message, with null-content
// compaction blocks removed throughout. It is what the compacting turn sent upstream followed
// by what came after, byte for byte, so the upstream's prompt cache keeps hitting.
func handoffMessages(msgs []api.Message, ref api.BlockRef, o *engine.Opened) []api.Message {
	text := api.Block{Raw: api.TextBlock(handoff.MessagesText(o.Summary, o.Payload.Ledger)), Type: api.BlockText}
	tail := min(o.Payload.Tail, ref.Message)
	m := msgs[ref.Message]
	rest := withoutCompaction(m.Blocks[ref.Block+1:])
	sys := systemMessages(msgs[:ref.Message-tail])
	out := make([]api.Message, 0, len(msgs)-ref.Message+1+tail+len(sys))
	if m.Role == "user" && tail == 0 {
		hm := api.NewMessage("user", append([]api.Block{text}, rest...))
		hm.Handoff = true
		out = append(out, hm)
		out = append(out, sys...)
	} else {
		hm := api.NewMessage("user", []api.Block{text})
		hm.Handoff = true
		out = append(out, hm)
		out = append(out, sys...)
		out = append(out, stripCompaction(msgs[ref.Message-tail:ref.Message], 0)...)
		if len(rest) > 0 {
			out = append(out, m.WithBlocks(rest))
		}
	}
	return append(out, stripCompaction(msgs, ref.Message+1)...)
}

// memoHandoffMessages is the conversation after the compaction o of msgs[:n], as the memo
// remembers it for a client that carries no compaction block (the transparent policy): the
// handoff message, the role:"system" messages it did not summarise (systemMessages), the messages
// a speculative compaction kept verbatim behind the summary, then msgs[n:] — what the compacting
// turn sent upstream followed by what came after, byte for byte.
func memoHandoffMessages(msgs []api.Message, n int, o *engine.Opened) []api.Message {
	tail := min(o.Payload.Tail, n)
	hm := api.NewMessage("user", []api.Block{{Raw: api.TextBlock(handoff.MessagesText(o.Summary, o.Payload.Ledger)), Type: api.BlockText}})
	hm.Handoff = true
	out := append([]api.Message{hm}, systemMessages(msgs[:n-tail])...)
	return append(out, msgs[n-tail:]...)
}

// systemMessages are the role:"system" messages of msgs, in order. They are context, not
// conversation — Claude Code sends one in messages listing its deferred tools (MCP tools
// included) and its environment — so a compaction keeps them verbatim (compact.IsContext: they
// are the window's instructions, never summarised) right after the handoff, where they stay in
// order with what is kept: the first message is still the user's (the handoff), as the
// Messages API wants.
func systemMessages(msgs []api.Message) []api.Message {
	var out []api.Message
	for _, m := range msgs {
		if m.Role == "system" {
			out = append(out, m)
		}
	}
	return out
}

// splitCurrentTurn splits a transparent turn's messages (after any handoff the memo applied) at
// the current turn: its last user prompt (a user message that is not the handoff and carries no
// tool_result) and everything after it. A client that asked for no compaction (Claude Code) has
// just sent that prompt, or is in the middle of answering it with tool calls; summarising it away
// would leave the model only a summary of what it is being asked right now, so the transparent
// policy keeps the current turn verbatim behind the handoff (tool_use and tool_result pairs
// complete, since it starts at a prompt) and summarises what came before. keep is nil — the
// whole conversation is compacted, as with Anthropic's own compaction — when there is no such
// prompt, nothing of the client's before it, or the current turn alone would take half the
// threshold.
func (s *Server) splitCurrentTurn(msgs []api.Message, limit int) (head, keep []api.Message) {
	k := -1
	for i := len(msgs) - 1; i >= 0 && k < 0; i-- {
		if m := msgs[i]; m.Role == "user" && !m.Handoff && !hasToolResult(m) {
			k = i
		}
	}
	if k <= 0 || !slices.ContainsFunc(msgs[:k], func(m api.Message) bool { return !m.Handoff }) {
		return msgs, nil
	}
	if !compact.SafeCuts(api.CountItems(msgs))[k] {
		return msgs, nil // a tool_use before the prompt answered after it: no cut there
	}
	if kept, _ := s.cfg.Counter.Request(nil, api.CountItems(msgs[k:]), nil, 0); 2*kept > limit {
		return msgs, nil
	}
	return msgs[:k], msgs[k:]
}

func hasToolResult(m api.Message) bool {
	return slices.ContainsFunc(m.Blocks, func(b api.Block) bool { return b.Type == "tool_result" })
}

// keepCurrentTurn wraps a compaction's finish so that the compacted context the upstream sees
// ends with keep (the current turn, verbatim), counted in the tokens after.
func keepCurrentTurn(s *Server, req *api.MessagesRequest, finish func(*compaction) (int, int), keep []api.Message) func(*compaction) (int, int) {
	return func(c *compaction) (int, int) {
		_, replaced := finish(c)
		c.msgs = append(c.msgs, keep...)
		after, _ := s.cfg.Counter.Request(req.System, api.CountItems(c.msgs), req.Tools, 0)
		return after, replaced
	}
}

func withoutCompaction(blocks []api.Block) []api.Block {
	out := make([]api.Block, 0, len(blocks))
	for _, b := range blocks {
		if b.Type != api.BlockCompaction {
			out = append(out, b)
		}
	}
	return out
}

// stripCompaction returns msgs[from:] without compaction blocks; a message left empty is dropped.
func stripCompaction(msgs []api.Message, from int) []api.Message {
	out := make([]api.Message, 0, len(msgs)-from)
	for _, m := range msgs[from:] {
		kept := withoutCompaction(m.Blocks)
		switch {
		case len(kept) == len(m.Blocks):
			out = append(out, m)
		case len(kept) > 0:
			out = append(out, m.WithBlocks(kept))
		}
	}
	return out
}

// messagesCompactIn is the core's view of compacting msgs, a Messages conversation (after any
// earlier handoff): its neutral items (api.MessageItems), one unit per message for speculation
// and the kept tail, no retain budget (Anthropic's compaction keeps nothing of the conversation
// verbatim: system and tools are outside messages and stay), and, as the compacted context, the
// handoff as one user message, the role:"system" messages of what it summarised (kept verbatim:
// systemMessages), then a speculative compaction's verbatim tail.
func (s *Server) messagesCompactIn(r *http.Request, req *api.MessagesRequest, msgs []api.Message, prev *engine.Opened) compactIn {
	return compactIn{
		dialect: dialectAnthropic,
		Request: engine.Request{
			Model: req.Model, Conversation: conversationID(r, "", prev),
			Auth: s.summariserAuth(r), Items: api.MessageItems(msgs),
			Units: api.CountItems(msgs), Prefix: func(n int) []api.Item { return api.MessageItems(msgs[:n]) },
			Prev: prev,
		},
		finish: func(c *compaction) (int, int) {
			text := c.Handoff
			if text == "" {
				text = handoff.MessagesText("", "") // the next turn's handoff renders the same
			}
			hm := api.NewMessage("user", []api.Block{{Raw: api.TextBlock(text), Type: api.BlockText}})
			hm.Handoff = true
			sys := systemMessages(msgs[:len(msgs)-c.Tail])
			c.msgs = append(append([]api.Message{hm}, sys...), msgs[len(msgs)-c.Tail:]...)
			after, _ := s.cfg.Counter.Request(req.System, api.CountItems(c.msgs), req.Tools, 0)
			return after, len(msgs) - c.Tail - len(sys)
		},
	}
}

// compactOnDemand answers a request with `compaction: {type: summarize}`: the conversation is
// summarised into a signed block and nothing is sampled.
func (s *Server) compactOnDemand(w http.ResponseWriter, r *http.Request, req *api.MessagesRequest, view msgView, instructions string) {
	mt := &msgTurn{t: &turnState{Stream: turn.Stream{Streamed: req.Stream}}}
	nothing := fault.InvalidParam("", "compaction_nothing_to_summarize",
		"messages holds no user or assistant content to summarize.")
	if len(api.MessageItems(view.msgs)) == 0 {
		writeFault(w, dialectAnthropic, nothing)
		return
	}
	if !holdOf(r).Compaction() {
		s.budgetRefused(w, dialectAnthropic)
		return
	}
	var ka *keepAlive
	if req.Stream {
		ka = startKeepAlive(w, s.cfg.KeepAlive, dialectAnthropic.KeepAlive)
	}
	total, _ := s.cfg.Counter.Request(req.System, api.CountItems(view.msgs), req.Tools, 0)
	in := s.messagesCompactIn(r, req, view.msgs, view.prev)
	in.Instructions, in.TokensBefore, in.Sign, in.Explicit = instructions, total, true, true
	c, err := s.compactCore(r.Context(), in)
	mt.t.Committed = ka != nil && ka.Stop()
	if err != nil {
		s.compactionNotMade(r, dialectAnthropic, "on_demand", req.Model, err)
		switch e := compactionFailure(err); {
		case errors.Is(err, errNothingToCompact) || errors.Is(err, summarizer.ErrNothingToSummarize):
			writeFaultTo(w, dialectAnthropic, mt.t.st(), nothing)
		case e != nil:
			writeFaultTo(w, dialectAnthropic, mt.t.st(), e)
		}
		return
	}
	s.compacted(r, dialectAnthropic, "on_demand", c)
	s.writeCompactionMessage(w, req, mt, c, true)
}
