// Package messages is the Anthropic Messages API's adapter (POST /v1/messages and
// /v1/messages/count_tokens) behind compactd's one turn pipeline (internal/turn).
//
// A request that carries nothing compactd acts on (no compaction block, no compact_20260112 edit,
// no on-demand `compaction`, and no context-editing edit compactd is configured to apply) is
// forwarded byte for byte, and so is its response: Claude Code's traffic, pings and upstream
// error bodies included (PassThrough). Everything else goes through the same engine as the
// Responses side: handoff of the latest compaction block, threshold or on-demand summarisation,
// sealing, and a rewrite of the response that puts the compaction block first (rewrite.go).
// On-demand compaction (`compaction: {type: summarize}`) and pause_after_compaction are answered
// by compactd itself (explicit.go); so is Claude Code's own compaction turn (claudecode.go).
package messages

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/turn"
)

// SealKind binds a Messages compaction block: it never opens as another API's.
const SealKind = "anthropic.compaction"

// Adapter is the Messages API. The zero value serves POST /v1/messages; with CountTokens it
// serves POST /v1/messages/count_tokens: compaction blocks are applied (the count is of what the
// upstream would see), context-editing edits too when compactd applies them, compaction is never
// triggered, and when context management changed anything the answer carries
// context_management.original_input_tokens.
type Adapter struct {
	CountTokens bool
}

var _ turn.Adapter = Adapter{}

func (Adapter) Name() dialect.Name { return dialect.Messages }

func (Adapter) Engine() engine.Dialect {
	return engine.Dialect{Name: dialect.Messages, SealKind: SealKind, Handoff: handoff.MessagesText, Memo: true,
		UserMessage: userMessage}
}

// userMessage is a Messages user message of one text block.
func userMessage(text string) []byte {
	return api.AnthropicMessage("user", [][]byte{api.TextBlock(text)})
}

func (Adapter) Words() turn.Words {
	return turn.Words{Compaction: "block", Held: "messages and compaction blocks", UpstreamFlag: "--anthropic-upstream"}
}

func (Adapter) Fault(f *fault.Fault) turn.Envelope { return anthropicFault(f) }

// FaultEvent is Anthropic's stream `error` event; Messages streams number nothing.
func (Adapter) FaultEvent(f *fault.Fault, _ *turn.Stream) []byte { return anthropicFault(f).SSE() }

// anthropicFault is f in Anthropic's envelope, with a request id of compactd's own.
func anthropicFault(f *fault.Fault) *api.AnthropicError {
	return api.AnthropicFault(f, engine.NewID("req_compactd_"))
}

// pingEvent keeps a committed Messages stream alive while the summariser runs: an event every
// Anthropic SDK expects and skips.
var pingEvent = api.AppendSSE(nil, "ping", []byte(`{"type": "ping"}`))

func (Adapter) KeepAlive(bool) []byte { return pingEvent }

func (Adapter) Terminal(data []byte) bool {
	switch relay.EventType(data) {
	case "message_stop", "error":
		return true
	}
	return false
}

// Parse skims a Messages body. A request that needs nothing of compactd is left as it came,
// context_management unvalidated (PassThrough forwards it, or the front reads it on only to be
// counted against the policy or offered the recall tool). Otherwise context_management and an
// on-demand `compaction` are validated, foreign compaction blocks are dropped or refused, and the
// compaction block in force is opened and handed off.
//
// A body compactd cannot skim (not JSON, too deep, the wrong shape, duplicate members, a
// compaction block where compactd does not open one) is refused and never forwarded: forwarding
// it unchecked would carry whatever compaction blocks it holds past compactd.
func (a Adapter) Parse(env *turn.Env, body []byte) (turn.Turn, *fault.Fault) {
	req, err := api.ParseMessagesFrom(body, env.ResumeFrom(body))
	if err != nil {
		return nil, api.BodyFault(err)
	}
	env.Skimmed(body, req)
	t := &Turn{a: a, env: env, req: req, view: req.Messages}
	// count_tokens answers JSON, whatever the body says: an event stream to it is not passed on.
	t.stream.Streamed = req.Stream && !a.CountTokens
	if t.needed = needCompactd(env, req); !t.needed {
		return t, nil
	}
	cm, f := api.ParseMessagesContextManagement(req.ContextManagement)
	if f != nil {
		if !a.CountTokens && t.claudeCode(env) != nil {
			// Claude Code's compaction turn is answered without its context_management: the
			// refusal stands only if the turn goes on as an ordinary one (turn.Deferred).
			t.refusal = f
			return t, nil
		}
		return nil, f
	}
	t.cm = cm
	if !a.CountTokens && req.Compaction != nil && string(bytes.TrimSpace(req.Compaction)) != "null" {
		if t.instructions, f = api.ParseCompactionConfig(req.Compaction); f != nil {
			return nil, f
		}
		t.onDemand = true
	}
	// Foreign compaction blocks (Anthropic's own, say) are dropped or refused first, so only
	// compactd's own blocks are opened.
	fr, dropped, f := foreign(env, req)
	if f != nil {
		return nil, f
	}
	msgs, prev, changed, f := resolveBlocks(env, fr)
	if f != nil {
		return nil, f
	}
	t.view, t.prev, t.changed = msgs, prev, changed || dropped
	return t, nil
}

// needCompactd reports whether compactd has anything to do with the request.
func needCompactd(env *turn.Env, req *api.MessagesRequest) bool {
	if len(req.Blocks) > 0 || req.Compaction != nil {
		return true
	}
	cm := gjson.ParseBytes(req.ContextManagement)
	if len(req.ContextManagement) == 0 || cm.Type == gjson.Null {
		return false
	}
	if env.Options.ApplyEdits {
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

// foreign applies the foreign-items policy to the compaction blocks of a Messages request
// (Env.Foreign decides): under drop it returns a shallow copy of req whose messages lack them (a
// message left empty is removed, as with compactd's own consumed blocks) and true; with none it
// returns req and false. Under reject it returns the 400.
func foreign(env *turn.Env, req *api.MessagesRequest) (*api.MessagesRequest, bool, *fault.Fault) {
	var refs []api.BlockRef
	for _, ref := range req.Blocks {
		b := gjson.ParseBytes(req.Messages[ref.Message].Blocks[ref.Block].Raw)
		if c := b.Get("content"); !c.Exists() || c.Type == gjson.Null {
			continue // a no-op block, removed like compactd's own
		}
		if api.IsForeign(b.Get("encrypted_content")) {
			refs = append(refs, ref)
		}
	}
	if len(refs) == 0 {
		return req, false, nil
	}
	where := make([]string, len(refs))
	for i, ref := range refs {
		where[i] = ref.Path()
	}
	if env.Foreign(len(refs), strings.Join(where, ",")) {
		return nil, false, &fault.Fault{Code: "foreign_compaction_block", Message: fmt.Sprintf(
			"%s: a compaction block compactd did not issue (its encrypted_content is not in compactd's cmp_… format; it was most likely issued by Anthropic's server-side compaction before this conversation was routed through compactd), so compactd cannot open it. Remove it from messages, or run compactd with --foreign-items drop (COMPACTD_FOREIGN_ITEMS=drop) to drop such blocks and continue without the history they replaced.",
			strings.Join(where, ", "))}
	}
	drop := make(map[api.BlockRef]bool, len(refs))
	for _, ref := range refs {
		drop[ref] = true
	}
	out := *req
	out.Messages = make([]api.Message, 0, len(req.Messages))
	out.Blocks = nil
	for i, m := range req.Messages {
		kept := make([]api.Block, 0, len(m.Blocks))
		for j, b := range m.Blocks {
			if !drop[api.BlockRef{Message: i, Block: j}] {
				kept = append(kept, b)
			}
		}
		switch {
		case len(kept) == len(m.Blocks):
		case len(kept) == 0:
			continue
		default:
			m = m.WithBlocks(kept)
		}
		for j, b := range m.Blocks {
			if b.Type == api.BlockCompaction {
				out.Blocks = append(out.Blocks, api.BlockRef{Message: len(out.Messages), Block: j})
			}
		}
		out.Messages = append(out.Messages, m)
	}
	return &out, true, nil
}

// resolveBlocks applies the compaction blocks of a request. Blocks with null content are no-ops
// and are removed. If a block carries a signature (on-demand compaction), it must be the only
// block with content and the first block of messages, and its signature must verify; otherwise
// the last block with content is the one in force. Its content must match the sealed summary
// (unless edited summaries are allowed). Every message before it, and every block before it in
// its message, is dropped, and the block becomes a user text message: the handoff. It returns
// the conversation as the upstream will see it, the block that was handed off (nil if none), and
// whether the messages changed.
func resolveBlocks(env *turn.Env, req *api.MessagesRequest) ([]api.Message, *engine.Opened, bool, *fault.Fault) {
	if len(req.Blocks) == 0 {
		return req.Messages, nil, false, nil
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
		return stripCompaction(req.Messages, 0), nil, true, nil
	}
	ref := withContent[len(withContent)-1]
	signed := signedAt >= 0
	if signed {
		if len(withContent) > 1 {
			return nil, nil, false, fault.InvalidParam("", "compaction_block_ambiguous",
				fmt.Sprintf("messages holds %d compaction blocks with content; with on-demand compaction send only the block the conversation returned last, as the first block of messages.", len(withContent)))
		}
		ref = withContent[signedAt]
		if ref.Message != 0 || ref.Block != 0 {
			return nil, nil, false, fault.InvalidParam("", "compaction_block_misplaced",
				fmt.Sprintf("%s: a signed compaction block must be the first block of the first message.", ref.Path()))
		}
	}
	if req.Messages[ref.Message].Role == "system" {
		return nil, nil, false, fault.InvalidParam("", "compaction_block_misplaced",
			fmt.Sprintf("%s: a compaction block cannot be in a system message.", ref.Path()))
	}
	o, f := openBlock(env, req.Messages[ref.Message].Blocks[ref.Block].Raw, ref, signed)
	if f != nil {
		return nil, nil, false, f
	}
	env.HandedOff()
	return handoffMessages(req.Messages, ref, o), o, true, nil
}

// openBlock verifies (when signed) and opens one compaction block and checks its content.
func openBlock(env *turn.Env, raw []byte, ref api.BlockRef, signed bool) (*engine.Opened, *fault.Fault) {
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
	o, f := env.Open(path+".encrypted_content", ec.Str, "", sig)
	if f != nil {
		return nil, f
	}
	if content.Str != o.Payload.Summary {
		if !env.Options.AllowEditedSummaries {
			return nil, fault.InvalidParam(path+".content", fault.CodeCompactionContentMismatch,
				"the compaction block's content differs from the summary compactd issued; send the block back unchanged.")
		}
		o.Summary = content.Str
	}
	return o, nil
}
