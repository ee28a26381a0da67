package responses

import (
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/turn"
)

// Turn is one Responses request.
type Turn struct {
	a      Adapter
	env    *turn.Env
	req    *api.ResponsesRequest
	items  []api.Item // the conversation as the upstream is to see it
	prev   *engine.Opened
	th     compact.Threshold // the client's context_management
	stream turn.Stream

	// changed: items differ from the client's input (a handoff, a compaction).
	changed bool
	// item is the compaction item to put at output[0] of the upstream's answer (nil: none), with
	// its id.
	item   []byte
	itemID string
	// pending is the compacted conversation a compaction's Finish rendered for pendingFor: it
	// takes effect in Compacted only, so a compaction that fails after Finish (not smaller, the
	// archive or the seal) leaves the turn's conversation as the client sent it.
	pending    []api.Item
	pendingFor *engine.Compaction
	// The compaction_trigger turn's response id, creation time (explicit.go).
	respID  string
	created int64
}

var (
	_ turn.Releaser        = (*Turn)(nil)
	_ turn.Turn            = (*Turn)(nil)
	_ turn.Explicit        = (*Turn)(nil)
	_ turn.AgentCompaction = (*Turn)(nil)
	_ turn.Recaller        = (*Turn)(nil)
)

func (t *Turn) Stream() *turn.Stream    { return &t.stream }
func (t *Turn) Model() string           { return t.req.Model }
func (t *Turn) Prev() *engine.Opened    { return t.prev }
func (t *Turn) Units() []api.Item       { return t.items }
func (t *Turn) Rewriter() turn.Rewriter { return t }

// Threshold: the client speaks compaction with context_management or a carried item; a
// previous_response_id chain keeps its history upstream, where compactd cannot compact it.
func (t *Turn) Threshold() (compact.Threshold, bool, bool) {
	return t.th, t.req.ContextManagement != nil || t.req.Compaction >= 0, t.req.PreviousResponseID == ""
}

func (t *Turn) Remember(env *turn.Env, mem *engine.Memory) {
	t.prev, t.changed = mem.Opened, true
	t.items = handoffAt(env, t.items[:mem.Items], t.items[mem.Items:], mem.Opened)
}

func (t *Turn) Tokens(env *turn.Env, limit int) int {
	total, _ := env.Counter.Request(t.req.Instructions, t.items, t.req.Tools, limit)
	return total
}

func (t *Turn) Speculation(env *turn.Env) engine.SpecRequest {
	return engine.SpecRequest{Model: t.req.Model, Conversation: env.Label(t.req.PromptCacheKey, t.prev), Units: t.items, Retain: env.Retain}
}

// Compaction compacts the conversation into the kept window, the handoff message and a
// speculative compaction's verbatim tail.
func (t *Turn) Compaction(env *turn.Env, total int, _ bool) engine.Request {
	return t.request(env, engine.Request{Model: t.req.Model, Items: t.items, TokensBefore: total, Prev: t.prev,
		Conversation: env.Conversation(t.req.PromptCacheKey, t.prev), Retain: env.Retain, Speculate: true, Covers: len(t.req.Items)})
}

// request completes r with the rendering of the compacted context into the turn.
func (t *Turn) request(env *turn.Env, r engine.Request) engine.Request {
	items := r.Items
	r.Finish = func(c *engine.Compaction) (int, int) {
		out := append(make([]api.Item, 0, len(c.Kept)+1+c.Tail), c.Kept...)
		if c.Handoff != "" {
			out = append(out, handoffItem(c.Handoff))
		}
		t.pending, t.pendingFor = append(out, items[len(c.Compacted):]...), c
		return env.Engine.CountItems(t.pending), len(c.Compacted) - len(c.Window.Instructions) - len(c.Window.Retained)
	}
	return r
}

func (t *Turn) Compacted(c *engine.Compaction, transparent bool) {
	if t.pendingFor == c {
		t.items = t.pending
	}
	t.pending, t.pendingFor = nil, nil
	t.changed = true
	if !transparent {
		t.item, t.itemID = api.CompactionItem(c.ID, c.EncryptedContent), c.ID
	}
}

// Changed: the input differs from the client's, or context_management (which only compactd
// implements) or Codex-only fields are to be taken out.
func (t *Turn) Changed(env *turn.Env) bool {
	return t.changed || t.req.ContextManagement != nil || env.Options.StripCodexFields
}

// Splice is Body in pieces (turn.Spliced): input's new items between the client's bytes, which
// stay pieces of its body. nil where Body writes more than input (a string input, Codex's
// fields stripped).
func (t *Turn) Splice(env *turn.Env) api.Splice {
	if !t.Changed(env) || env.Options.StripCodexFields || (!t.changed && t.req.InputString) {
		return nil
	}
	return t.req.RebuildSplice(rawItems(t.items, false), true, nil)
}

func (t *Turn) Body(env *turn.Env) []byte {
	if !t.Changed(env) {
		return t.req.Body
	}
	var out []byte
	if !t.changed && t.req.InputString {
		// Only context_management to drop: keep the string input as sent.
		out, _ = sjson.DeleteBytes(t.req.Body, "context_management")
	} else {
		out = t.req.WithInput(rawItems(t.items, env.Options.StripCodexFields), true)
	}
	if env.Options.StripCodexFields {
		out, _ = sjson.DeleteBytes(out, "client_metadata")
	}
	return out
}

// Release hands the skim's tables back for the next request (turn.Releaser).
func (t *Turn) Release() { t.req.Release() }
