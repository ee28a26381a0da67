package chat

import (
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/turn"
)

// Turn is one Chat Completions request.
type Turn struct {
	req *api.ChatRequest
	// msgs is the conversation as the upstream is to see it: the client's messages, with the
	// compaction the memo remembers for a prefix of them applied (Remember), or the compacted
	// context (Compacted).
	msgs   []api.ChatMessage
	units  []api.Item     // api.ChatUnits(msgs), once asked for
	prev   *engine.Opened // the compaction msgs already apply, which a new one chains to
	stream turn.Stream

	// changed: msgs differ from the client's messages (the memo's compaction, or this turn's).
	changed bool
	// over: the turn went past the threshold (Compaction was asked for): its answer is guarded
	// as a turn compactd compacted, whatever the compaction's outcome.
	over bool
	// finished is the compacted context Finish rendered, put in force by Compacted.
	finished []api.ChatMessage
}

var (
	_ turn.Releaser    = (*Turn)(nil)
	_ turn.Turn        = (*Turn)(nil)
	_ turn.PassThrough = (*Turn)(nil)
	_ turn.Recaller    = (*Turn)(nil)
)

func (t *Turn) Stream() *turn.Stream { return &t.stream }
func (t *Turn) Model() string        { return t.req.Model }
func (t *Turn) Prev() *engine.Opened { return t.prev }

// Units: one unit per message, its raw bytes: what a Chat request is counted in, the memo keyed
// by, speculation keyed on and a kept tail counted in.
func (t *Turn) Units() []api.Item {
	if t.units == nil {
		t.units = api.ChatUnits(t.msgs)
	}
	return t.units
}

// Threshold: Chat speaks no compaction protocol (no threshold of the client's, nothing carried),
// so a turn is only ever compacted transparently, under the operator's policy, with the memo.
func (t *Turn) Threshold() (compact.Threshold, bool, bool) { return compact.Threshold{}, false, true }

// PassThrough: without a policy on the route there is nothing compactd does to a Chat turn: it
// is forwarded as it came, byte for byte, and so is its answer.
func (t *Turn) PassThrough(_ *turn.Env, policy bool) bool { return !policy }

// Remember applies the compaction the memo recorded for the longest prefix of the turn's
// messages: the kept window of that prefix, the handoff, the verbatim tail a speculative
// compaction kept, then the messages after the prefix — the bytes the compacting turn sent
// upstream followed by what came after, so the prompt cache keeps hitting.
func (t *Turn) Remember(env *turn.Env, mem *engine.Memory) {
	o, n := mem.Opened, mem.Items
	tail := min(o.Payload.Tail, n)
	head := t.msgs[:n-tail]
	items, _ := api.ChatItems(head)
	win := env.Engine.Partition(items, env.Retain)
	kept := env.Engine.KeepWindow(Adapter{}.Engine(), nil, items, win, env.Retain)
	var text string
	if o.Payload.Summary != "" || o.Payload.Ledger != "" {
		text = handoff.Text(o.Payload.Summary, o.Payload.Ledger)
	}
	raw := compactedContext(kept, text, t.msgs[n-tail:n])
	msgs := messages(raw, text != "", len(kept), len(t.msgs)-n)
	t.msgs, t.units, t.prev, t.changed = append(msgs, t.msgs[n:]...), nil, o, true
}

// messages are the compacted context's messages; the one at handoffAt (when hasHandoff) is the
// handoff, with room for more after them.
func messages(raw [][]byte, hasHandoff bool, handoffAt, more int) []api.ChatMessage {
	msgs := make([]api.ChatMessage, 0, len(raw)+more)
	for i, m := range raw {
		// The handoff is compactd's, not the user's: a later compaction summarises it again and
		// never keeps it as one of the newest user messages (which the next turn, counting the
		// client's messages, would not keep either).
		msgs = append(msgs, api.ChatMessage{Raw: m, Role: gjson.GetBytes(m, "role").Str, Handoff: hasHandoff && i == handoffAt})
	}
	return msgs
}

func (t *Turn) Tokens(env *turn.Env, limit int) int {
	total, _ := env.Counter.Request(nil, t.Units(), tools(t.req), limit)
	return total
}

func (t *Turn) Speculation(env *turn.Env) engine.SpecRequest {
	msgs := t.msgs
	return engine.SpecRequest{Model: t.req.Model, Conversation: env.Label("", t.prev), Units: t.Units(),
		Prefix: func(n int) []api.Item { items, _ := api.ChatItems(msgs[:n]); return items }, Retain: env.Retain}
}

// Compaction is the engine's view of compacting a Chat conversation: its neutral items
// (api.ChatItems), one unit per message for speculation and the kept tail, the retain budget of
// newest user messages, and, as the compacted context (Finish): the kept window (the client's
// own message bytes; a user message the budget had to shorten, shortened), the handoff as one
// user message, and the messages a speculative compaction kept verbatim behind it. The memo
// records it against the client's messages (Covers), so the next turn applies it in Remember.
func (t *Turn) Compaction(env *turn.Env, total int, _ bool) engine.Request {
	t.over = true
	msgs := t.msgs
	items, _ := api.ChatItems(msgs)
	return engine.Request{
		Model: t.req.Model, Conversation: env.Conversation("", t.prev),
		Items: items, Units: t.Units(),
		Prefix:       func(n int) []api.Item { p, _ := api.ChatItems(msgs[:n]); return p },
		TokensBefore: total, Prev: t.prev, Retain: env.Retain, Speculate: true,
		Covers: len(t.req.Messages),
		Finish: func(c *engine.Compaction) (int, int) {
			o := compactedContext(c.Kept, c.Handoff, msgs[len(msgs)-c.Tail:])
			t.finished = messages(o, c.Handoff != "", len(c.Kept), 0)
			counted := make([]api.Item, len(o))
			for i, raw := range o {
				counted[i] = api.Item{Raw: raw}
			}
			after, _ := env.Counter.Request(nil, counted, tools(t.req), 0)
			return after, len(msgs) - c.Tail - len(c.Kept)
		},
	}
}

// Compacted puts the compacted context Finish rendered in force (the engine may still refuse a
// compaction after rendering it: not smaller, or its archive or seal failed; the turn then goes
// on with the conversation it had). Nothing goes back to the client: Chat has no
// compaction on the wire, so every Chat compaction is transparent.
func (t *Turn) Compacted(*engine.Compaction, bool) {
	if t.finished == nil {
		return // not rendered (the engine renders every compaction it returns)
	}
	t.msgs, t.units, t.finished, t.changed = t.finished, nil, nil, true
}

// compactedContext is the compacted Chat context: the window's kept messages (the client's own
// bytes, and the user message the retain budget shortened, which KeepWindow writes as a Chat
// message), the handoff as one user message (when there is one), then the messages kept verbatim
// behind it.
func compactedContext(kept []api.Item, handoffText string, tail []api.ChatMessage) [][]byte {
	o := make([][]byte, 0, len(kept)+1+len(tail))
	for _, it := range kept {
		o = append(o, it.Raw)
	}
	if handoffText != "" {
		o = append(o, api.ChatUserMessage(handoffText))
	}
	for _, m := range tail {
		o = append(o, m.Raw)
	}
	return o
}

// tools is what the upstream reads as the request's tools: tools, or the deprecated functions.
func tools(req *api.ChatRequest) []byte {
	if req.Tools != nil {
		return req.Tools
	}
	return req.Functions
}

// Changed: the messages differ from the client's (the memo's compaction applied, or this turn's
// made). Nothing else of a Chat body is compactd's to change.
func (t *Turn) Changed(*turn.Env) bool { return t.changed }

// Body is the client's bytes when nothing changed, else the body with its messages replaced and
// every other byte as received.
func (t *Turn) Body(*turn.Env) []byte {
	if !t.changed {
		return t.req.Body
	}
	return t.req.WithMessages(api.Raws[[]byte](t.msgs))
}

// Rewriter: only a turn that went past the threshold has one, compacted or not (a compaction
// skipped, or failed under the passthrough policy): its stream is guarded to its [DONE], and a
// stream compactd committed while it compacted gets the upstream's failures as error chunks.
// Below the threshold the answer passes as the upstream sent it, held to the event cap only,
// even when the memo's compaction was applied (Changed).
func (t *Turn) Rewriter() turn.Rewriter {
	if !t.over {
		return nil
	}
	return rewriter{t}
}

// Release hands the skim's tables back for the next request (turn.Releaser).
func (t *Turn) Release() { t.req.Release() }
