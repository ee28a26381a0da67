package messages

import (
	"net/http"
	"slices"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/turn"
)

// Turn is one Messages request.
type Turn struct {
	a      Adapter
	env    *turn.Env
	req    *api.MessagesRequest // as the client sent it
	stream turn.Stream

	// needed: the request carries something compactd acts on (needCompactd); a turn that does
	// not is forwarded as it came unless the front compacts or recalls on it.
	needed bool
	// cm is the validated context_management (nil when absent, or when the turn is not needed:
	// then compactd applies none of it and leaves it as sent, unvalidated). refusal is its 400,
	// put off for Claude Code's compaction turn (turn.Deferred).
	cm      *api.ContextManagement
	refusal *fault.Fault
	// onDemand: the request asks for `compaction: {type: summarize}`, with instructions.
	onDemand     bool
	instructions string

	// view is the conversation once compaction blocks are applied (foreign ones dropped), prev
	// the block that was handed off or the compaction the memo applied.
	view []api.Message
	prev *engine.Opened
	// msgs is view with the context-editing edits compactd applies (edit), then the memo's
	// handoff or the compaction this turn made: what the upstream is to see.
	msgs    []api.Message
	edited  bool
	applied []api.AppliedEdit // the edits compactd applied, reported in context_management
	// changed: msgs differ from the client's messages.
	changed bool
	// remembered: the memo applied a compaction; compacted: this turn made one.
	remembered, compacted bool
	// limit is the threshold the front counted the turn against (Tokens): the transparent
	// policy keeps the current turn verbatim only when it takes less than half of it.
	limit int
	// pending is the compacted conversation a compaction's Finish rendered, for pendingFor,
	// until Compacted puts it in force.
	pending    []api.Message
	pendingFor *engine.Compaction

	// block is the compaction block to put at content[0] of the upstream's answer, nil when the
	// turn did not compact (or compacted transparently), with its parts for the stream.
	block          []byte
	summary, ecStr string
	compUsage      summarizer.Usage

	// removed (count_tokens): the tokens context management took out, added back as
	// context_management.original_input_tokens.
	removed int
}

var (
	_ turn.Releaser        = (*Turn)(nil)
	_ turn.Turn            = (*Turn)(nil)
	_ turn.Explicit        = (*Turn)(nil)
	_ turn.AgentCompaction = (*Turn)(nil)
	_ turn.AgentNothing    = (*Turn)(nil)
	_ turn.Recaller        = (*Turn)(nil)
	_ turn.Pauser          = (*Turn)(nil)
	_ turn.PassThrough     = (*Turn)(nil)
	_ turn.ArchiveRef      = (*Turn)(nil)
	_ turn.UpstreamHeaders = (*Turn)(nil)
	_ turn.Deferred        = (*Turn)(nil)
)

func (t *Turn) Stream() *turn.Stream { return &t.stream }
func (t *Turn) Model() string        { return t.req.Model }
func (t *Turn) Prev() *engine.Opened { return t.prev }

// Refusal is the context_management 400 Parse put off for what looked like Claude Code's
// compaction turn: it stands once the turn goes on as an ordinary one.
func (t *Turn) Refusal() *fault.Fault { return t.refusal }

// PassThrough: a request that carries nothing compactd acts on is forwarded byte for byte,
// unless the route's threshold policy needs it counted or it is an agent's turn after a
// compaction compactd answered, for which compactd offers the recall tool (cheap: the first
// message and one HMAC; the archive is not asked). count_tokens never compacts or recalls.
func (t *Turn) PassThrough(env *turn.Env, policy bool) bool {
	switch {
	case t.needed:
		return false
	case t.a.CountTokens:
		return true
	case policy:
		return false
	}
	_, _, recall := t.ArchiveRef(env)
	return !recall
}

// Threshold: the client's compact_20260112 edit; it speaks compaction with that edit or with
// compaction blocks of its own. count_tokens never compacts.
func (t *Turn) Threshold() (compact.Threshold, bool, bool) {
	if t.a.CountTokens {
		return compact.Threshold{}, false, false
	}
	var th compact.Threshold
	speaks := len(t.req.Blocks) > 0
	if t.cm != nil && t.cm.Compact != nil {
		th, speaks = compact.Threshold{Set: true, Tokens: t.cm.Compact.Trigger}, true
	}
	return th, speaks, true
}

// Units are the messages, one unit each: what the memo is keyed by.
func (t *Turn) Units() []api.Item {
	t.edit(t.env)
	return api.CountItems(t.msgs)
}

// Remember applies the compaction the memo recorded for the first mem.Items messages.
func (t *Turn) Remember(env *turn.Env, mem *engine.Memory) {
	t.edit(env)
	t.prev, t.remembered, t.changed = mem.Opened, true, true
	t.msgs = memoHandoffMessages(t.msgs, mem.Items, mem.Opened)
}

func (t *Turn) Tokens(env *turn.Env, limit int) int {
	t.edit(env)
	t.limit = limit
	total, _ := env.Counter.Request(t.req.System, api.CountItems(t.msgs), t.req.Tools, limit)
	return total
}

func (t *Turn) Speculation(env *turn.Env) engine.SpecRequest {
	t.edit(env)
	// The background job outlives the turn: it gets its own copy of the message list.
	kept := slices.Clone(t.msgs)
	return engine.SpecRequest{Dialect: t.a.Engine(), Model: t.req.Model, Conversation: env.Label("", t.prev),
		Units: api.CountItems(kept), Prefix: func(n int) []api.Item { return api.MessageItems(kept[:n]) }}
}

// Compaction compacts the conversation into the handoff, the system messages and a speculative
// compaction's verbatim tail. A transparent turn (a client that asked for nothing) keeps its
// current turn verbatim behind them (splitCurrentTurn).
func (t *Turn) Compaction(env *turn.Env, total int, transparent bool) engine.Request {
	t.edit(env)
	head, keep := t.msgs, []api.Message(nil)
	if transparent {
		head, keep = splitCurrentTurn(env, t.msgs, t.limit)
	}
	r := t.compactIn(env, head, t.prev)
	if len(keep) > 0 {
		r.Finish = t.keepCurrentTurn(env, r.Finish, keep)
	}
	if t.cm != nil && t.cm.Compact != nil {
		r.Instructions = t.cm.Compact.Instructions
	}
	r.TokensBefore, r.Speculate, r.Covers = total, true, len(t.req.Messages)-len(keep)
	return r
}

// Compacted puts the compaction's rendering in force; unless transparent, its block goes to
// content[0] of the answer.
func (t *Turn) Compacted(c *engine.Compaction, transparent bool) {
	if t.pendingFor == c {
		t.msgs = t.pending
	}
	t.pending, t.pendingFor = nil, nil
	t.changed, t.compacted = true, true
	if !transparent {
		t.block = api.CompactionBlock(c.Summary, c.EncryptedContent, c.Signature)
		t.summary, t.ecStr, t.compUsage = c.Summary, c.EncryptedContent, c.Usage
	}
}

// Pauses: pause_after_compaction. The answer is then the compaction alone (explicit.go).
func (t *Turn) Pauses() bool {
	return t.cm != nil && t.cm.Compact != nil && t.cm.Compact.Pause
}

// edit applies, once, the context-editing edits compactd is configured to apply (count_tokens:
// and counts what they and the handoff took out). Only an ordinary turn's conversation is
// edited: on-demand and agent compactions summarise the conversation as the blocks left it.
func (t *Turn) edit(env *turn.Env) {
	if t.edited {
		return
	}
	t.edited, t.msgs = true, t.view
	if env.Options.ApplyEdits && t.cm != nil {
		var edited bool
		t.msgs, t.applied, edited = applyEdits(env, t.req, t.cm, t.msgs)
		t.changed = t.changed || edited
	}
	if t.a.CountTokens {
		t.applied = nil // count_tokens reports no edits, only the tokens they took out
		if t.changed {
			before, _ := env.Counter.Request(t.req.System, api.CountItems(t.req.Messages), t.req.Tools, 0)
			after, _ := env.Counter.Request(t.req.System, api.CountItems(t.msgs), t.req.Tools, 0)
			t.removed = max(0, before-after)
		}
	}
}

// applyEdits applies the context-editing edits compactd is configured to apply.
func applyEdits(env *turn.Env, req *api.MessagesRequest, cm *api.ContextManagement, msgs []api.Message) ([]api.Message, []api.AppliedEdit, bool) {
	count := func(raw []byte) int { return env.Counter.Item(raw) }
	var applied []api.AppliedEdit
	if cm.ClearToolUses != nil {
		total, _ := env.Counter.Request(req.System, api.CountItems(msgs), req.Tools, cm.ClearToolUses.TriggerInputTokens)
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

// Changed: the messages differ from the client's, or context_management (whose compaction and,
// when compactd applies them, context-editing edits only compactd implements) is to be taken
// out; on count_tokens an on-demand `compaction` too.
func (t *Turn) Changed(env *turn.Env) bool {
	t.edit(env)
	if t.a.CountTokens {
		return t.req.Compaction != nil || t.changed || t.req.ContextManagement != nil
	}
	return t.changed || t.needed && t.req.ContextManagement != nil
}

// Body is the client's bytes when nothing changed (the same slice), else the body with the
// members that changed replaced and every other member copied byte for byte.
func (t *Turn) Body(env *turn.Env) []byte {
	if !t.Changed(env) {
		return t.req.Body
	}
	var changes []api.Member
	if t.a.CountTokens {
		changes = append(changes, api.Member{Key: "compaction", Value: nil})
	}
	if t.changed {
		changes = append(changes, api.Member{Key: "messages", Value: api.JSONArray(api.Raws[[]byte](t.msgs))})
	}
	if t.req.ContextManagement != nil && (t.needed || t.a.CountTokens) {
		var keep []byte // nil removes context_management
		if !env.Options.ApplyEdits {
			keep = t.cm.OthersJSON()
		}
		changes = append(changes, api.Member{Key: "context_management", Value: keep})
	}
	return t.req.Rewrite(changes...)
}

// Rewriter: nil for a turn read on only to be counted or offered recall, which neither compacted
// nor had the memo apply a compaction: it is forwarded as it came, as a pass-through.
func (t *Turn) Rewriter() turn.Rewriter {
	if !t.a.CountTokens && !t.needed && !t.compacted && !t.remembered {
		return nil
	}
	return t
}

// UpstreamHeaders drops the compaction betas, which only compactd implements, from
// anthropic-beta, and the context-management beta too when compactd applies the edits.
func (t *Turn) UpstreamHeaders(h http.Header) {
	drop := []string{api.BetaCompact, api.BetaCompactOnDemand}
	if t.env.Options.ApplyEdits {
		drop = append(drop, api.BetaContextManagement)
	}
	api.DropBetas(h, drop...)
}

// Release hands the skim's tables back for the next request (turn.Releaser).
func (t *Turn) Release() { t.req.Release() }
