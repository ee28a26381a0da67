package messages

import (
	"slices"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/turn"
)

// handoffMessages is the conversation from the block at ref on: the handoff text (summary and
// facts ledger) as a user text block in place of the block (sharing the block's message when
// that is a user message and no tool directive is kept), what the compaction kept of the
// messages before it (keptContext: their role:"system" messages and tool directives), the
// messages a speculative compaction kept verbatim behind the summary (payload.Tail of those
// before the block's message, as many as the client still sends), the rest of the block's
// message, then every later message, with null-content compaction blocks removed throughout. It
// is what the compacting turn sent upstream followed by what came after, byte for byte, so the
// upstream's prompt cache keeps hitting.
func handoffMessages(msgs []api.Message, ref api.BlockRef, o *engine.Opened) []api.Message {
	text := api.Block{Raw: api.TextBlock(handoff.MessagesText(o.Summary, o.Payload.Ledger)), Type: api.BlockText}
	tail := min(o.Payload.Tail, ref.Message)
	m := msgs[ref.Message]
	rest := withoutCompaction(m.Blocks[ref.Block+1:])
	kept, directives := keptContext(msgs[:ref.Message-tail])
	out := make([]api.Message, 0, len(msgs)-ref.Message+1+tail+len(kept))
	if m.Role == "user" && tail == 0 && !directives {
		// The rest of the block's message shares the handoff's; the system messages kept are
		// context wherever they stand. Tool directives take the layout below: their order
		// against what follows decides which tools the model has.
		hm := api.NewMessage("user", append([]api.Block{text}, rest...))
		hm.Handoff = true
		out = append(out, hm)
		out = append(out, kept...)
	} else {
		hm := api.NewMessage("user", []api.Block{text})
		hm.Handoff = true
		out = append(out, hm)
		out = append(out, kept...)
		out = append(out, stripCompaction(msgs[ref.Message-tail:ref.Message], 0)...)
		if len(rest) > 0 {
			out = append(out, m.WithBlocks(rest))
		}
	}
	return append(out, stripCompaction(msgs, ref.Message+1)...)
}

// memoHandoffMessages is the conversation after the compaction o of msgs[:n], as the memo
// remembers it for a client that carries no compaction block (the transparent policy): the
// handoff message, what it kept of the messages it summarised (keptContext), the messages a
// speculative compaction kept verbatim behind the summary, then msgs[n:] — what the compacting
// turn sent upstream followed by what came after, byte for byte.
func memoHandoffMessages(msgs []api.Message, n int, o *engine.Opened) []api.Message {
	tail := min(o.Payload.Tail, n)
	hm := api.NewMessage("user", []api.Block{{Raw: api.TextBlock(handoff.MessagesText(o.Summary, o.Payload.Ledger)), Type: api.BlockText}})
	hm.Handoff = true
	kept, _ := keptContext(msgs[:n-tail])
	out := append([]api.Message{hm}, kept...)
	return append(out, msgs[n-tail:]...)
}

// keptContext is what a compaction of msgs keeps verbatim behind the handoff, in their order:
//
//   - the role:"system" messages. They are context, not conversation — Claude Code sends one in
//     messages listing its deferred tools (MCP tools included) and its environment — so they are
//     never summarised (compact.IsContext: they are the window's instructions). Right after the
//     handoff they stay in order with what is kept, and the first message is still the user's
//     (the handoff), as the Messages API wants.
//   - the tool directives (tool_addition and tool_removal blocks) of the user and assistant
//     messages, each message's as one user message of those blocks alone. A directive changes
//     the tools the model is offered "from this point in the conversation onward"
//     (anthropic-sdk-go's BetaRequestToolAdditionBlockParam), and a later one may name a tool an
//     earlier one defined inline. Summarised away, a tool added in the compacted range would
//     vanish, one removed there would come back, and a reference to an inline definition would
//     name nothing (a request the API refuses). Anthropic's own compaction reports the net change
//     on its block (tool_changes); compactd keeps the directives themselves, in order, which
//     leaves the tools what they were at the end of the range.
//
// directives reports whether any tool directive was kept.
func keptContext(msgs []api.Message) (kept []api.Message, directives bool) {
	for _, m := range msgs {
		if m.Role == "system" {
			kept = append(kept, m)
			continue
		}
		var ds []api.Block
		for _, b := range m.Blocks {
			if isToolDirective(b.Type) {
				ds = append(ds, b)
			}
		}
		if len(ds) > 0 {
			kept, directives = append(kept, api.NewMessage("user", ds)), true
		}
	}
	return kept, directives
}

// isToolDirective reports whether a content block of type typ changes the tools in effect from
// where it stands (BetaContentBlockParamUnion's tool_addition and tool_removal).
func isToolDirective(typ string) bool { return typ == "tool_addition" || typ == "tool_removal" }

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
func splitCurrentTurn(env *turn.Env, msgs []api.Message, limit int) (head, keep []api.Message) {
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
	if kept, _ := env.Counter.Request(nil, api.CountItems(msgs[k:]), nil, 0); 2*kept > limit {
		return msgs, nil
	}
	return msgs[:k], msgs[k:]
}

// systemCount is how many of msgs are role:"system" messages (kept verbatim, so not replaced).
func systemCount(msgs []api.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == "system" {
			n++
		}
	}
	return n
}

func hasToolResult(m api.Message) bool {
	return slices.ContainsFunc(m.Blocks, func(b api.Block) bool { return b.Type == "tool_result" })
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

// compactIn is the engine's request to compact msgs, a Messages conversation (after any earlier
// handoff): its neutral items (api.MessageItems), one unit per message for speculation and the
// kept tail, no retain budget (Anthropic's compaction keeps nothing of the conversation
// verbatim: system and tools are outside messages and stay), and, as the compacted context
// (Finish), the handoff as one user message, what it kept of what it summarised (keptContext:
// role:"system" messages and tool directives), then a speculative compaction's verbatim tail. The rendering
// waits in the turn until Compacted puts it in force: a compaction that fails after Finish leaves
// the turn's conversation as it was.
func (t *Turn) compactIn(env *turn.Env, msgs []api.Message, prev *engine.Opened) engine.Request {
	req := t.req
	return engine.Request{
		Dialect: t.a.Engine(),
		Model:   req.Model, Conversation: env.Conversation("", prev),
		Items: api.MessageItems(msgs),
		Units: api.CountItems(msgs), Prefix: func(n int) []api.Item { return api.MessageItems(msgs[:n]) },
		Prev: prev,
		Finish: func(c *engine.Compaction) (int, int) {
			text := c.Handoff
			if text == "" {
				text = handoff.MessagesText("", "") // the next turn's handoff renders the same
			}
			hm := api.NewMessage("user", []api.Block{{Raw: api.TextBlock(text), Type: api.BlockText}})
			hm.Handoff = true
			kept, _ := keptContext(msgs[:len(msgs)-c.Tail])
			t.pending, t.pendingFor = append(append([]api.Message{hm}, kept...), msgs[len(msgs)-c.Tail:]...), c
			after, _ := env.Counter.Request(req.System, api.CountItems(t.pending), req.Tools, 0)
			return after, len(msgs) - c.Tail - systemCount(kept)
		},
	}
}

// keepCurrentTurn wraps a compaction's Finish so that the compacted context the upstream sees
// ends with keep (the current turn, verbatim), counted in the tokens after.
func (t *Turn) keepCurrentTurn(env *turn.Env, finish func(*engine.Compaction) (int, int), keep []api.Message) func(*engine.Compaction) (int, int) {
	return func(c *engine.Compaction) (int, int) {
		_, replaced := finish(c)
		t.pending = append(t.pending, keep...)
		after, _ := env.Counter.Request(t.req.System, api.CountItems(t.pending), t.req.Tools, 0)
		return after, replaced
	}
}
