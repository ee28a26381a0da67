package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
)

// anthropicSealKind is the crypto binding kind of Anthropic compaction blocks. A block carries no
// id of its own, so, as on the Responses side, the id travels in encrypted_content
// ("<cmp_id>.<sealed>") and is bound into the seal and the signature.
const anthropicSealKind = "anthropic.compaction"

func contextWithMsgTurn(ctx context.Context, mt *msgTurn) context.Context {
	return context.WithValue(ctx, msgTurnKey{}, mt)
}

// signer is what on-demand compaction needs beyond sealing: *crypto.Keyring provides it.
type signer interface {
	Sign(msg []byte, b crypto.Binding) string
	Verify(sig string, msg []byte, b crypto.Binding) error
}

// binding is what a Messages compaction block is sealed and signed under: its id and the
// request's tenant, so a block issued to one tenant never opens for another.
func (s *Server) binding(ctx context.Context, id string) crypto.Binding {
	return crypto.Binding{Kind: dialectAnthropic.sealKind(), ItemID: id, Tenant: s.tenantOf(ctx)}
}

// msgView is the conversation as the upstream will see it once compaction blocks are applied.
type msgView struct {
	msgs    []api.Message
	prev    *opened // the block that was handed off, nil if none
	changed bool
}

// resolveBlocks applies the compaction blocks of a request. Blocks with null content are no-ops
// and are removed. If a block carries a signature (on-demand compaction), it must be the only
// block with content and the first block of messages, and its signature must verify; otherwise
// the last block with content is the one in force. Its content must match the sealed summary
// (unless edited summaries are allowed). Every message before it, and every block before it in
// its message, is dropped, and the block becomes a user text message: the handoff.
func (s *Server) resolveBlocks(ctx context.Context, req *api.MessagesRequest) (msgView, *api.AnthropicError) {
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
			return msgView{}, compactionError(http.StatusBadRequest, "invalid_request_error", "compaction_block_ambiguous",
				fmt.Sprintf("messages holds %d compaction blocks with content; with on-demand compaction send only the block the conversation returned last, as the first block of messages.", len(withContent)))
		}
		ref = withContent[signedAt]
		if ref.Message != 0 || ref.Block != 0 {
			return msgView{}, compactionError(http.StatusBadRequest, "invalid_request_error", "compaction_block_misplaced",
				fmt.Sprintf("%s: a signed compaction block must be the first block of the first message.", ref.Path()))
		}
	}
	if req.Messages[ref.Message].Role == "system" {
		return msgView{}, compactionError(http.StatusBadRequest, "invalid_request_error", "compaction_block_misplaced",
			fmt.Sprintf("%s: a compaction block cannot be in a system message.", ref.Path()))
	}
	o, e := s.openBlock(ctx, req.Messages[ref.Message].Blocks[ref.Block].Raw, ref, signed)
	if e != nil {
		return msgView{}, e
	}
	s.metrics.handoffApplied(dialectAnthropic.String())
	return msgView{msgs: handoffMessages(req.Messages, ref, o), prev: o, changed: true}, nil
}

// openBlock verifies (when signed) and opens one compaction block and checks its content.
func (s *Server) openBlock(ctx context.Context, raw []byte, ref api.BlockRef, signed bool) (*opened, *api.AnthropicError) {
	path := ref.Path()
	b := gjson.ParseBytes(raw)
	content := b.Get("content")
	if content.Type != gjson.String {
		return nil, &api.AnthropicError{Status: http.StatusBadRequest, Type: "invalid_request_error",
			Message: path + ".content: Input should be a valid string"}
	}
	ec := b.Get("encrypted_content")
	if ec.Type != gjson.String || ec.Str == "" {
		return nil, &api.AnthropicError{Status: http.StatusBadRequest, Type: "invalid_request_error",
			Message: path + ".encrypted_content: the compaction block has no encrypted_content; send the block back exactly as compactd returned it."}
	}
	id, sealed, ok := splitEncryptedContent(ec.Str)
	if signed {
		sg, isSigner := s.cfg.Sealer.(signer)
		err := crypto.ErrMalformed
		if ok && isSigner {
			err = sg.Verify(b.Get("signature").Str, []byte(ec.Str), s.binding(ctx, id))
		}
		if err != nil {
			s.openFailed(dialectAnthropic, crypto.Reason(err))
			return nil, compactionError(http.StatusBadRequest, "invalid_request_error", "compaction_signature_invalid",
				path+": the compaction block's signature does not verify; send the block back byte-exact, as compactd returned it.")
		}
	}
	if !ok {
		return nil, s.blockOpenError(path, crypto.ErrMalformed)
	}
	plain, err := s.cfg.Sealer.Open(sealed, s.binding(ctx, id))
	if err != nil {
		return nil, s.blockOpenError(path, err)
	}
	p, err := compact.UnmarshalPayload(plain)
	if err != nil {
		return nil, s.blockOpenError(path, crypto.ErrMalformed)
	}
	if s.expired(p) {
		s.openFailed(dialectAnthropic, "expired")
		return nil, compactionError(http.StatusBadRequest, "invalid_request_error", "compaction_block_expired", path+": "+expiredMessage)
	}
	o := &opened{id: id, summary: p.Summary, payload: p}
	if content.Str != p.Summary {
		if !s.cfg.AllowEditedSummaries {
			return nil, compactionError(http.StatusBadRequest, "invalid_request_error", "compaction_content_mismatch",
				path+".content: the compaction block's content differs from the summary compactd issued; send the block back unchanged.")
		}
		o.summary = content.Str
	}
	return o, nil
}

func (s *Server) blockOpenError(path string, err error) *api.AnthropicError {
	reason := s.openFailed(dialectAnthropic, crypto.Reason(err))
	msg := map[string]string{
		"unknown_key":  "the compaction block was sealed with a key this compactd does not have. If keys were rotated, add the old key to the keyring as a retired key; otherwise start a new conversation.",
		"wrong_tenant": "the compaction block was issued to a different tenant and cannot be used here.",
		"tampered":     "the compaction block failed its integrity check: its encrypted_content was modified. Send the block back exactly as it was returned.",
	}[reason]
	if msg == "" {
		msg = "the compaction block's encrypted_content was not issued by compactd (it is truncated or not in compactd's format). Send the block back exactly as it was returned."
	}
	return &api.AnthropicError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: path + ".encrypted_content: " + msg}
}

// handoffMessages is the conversation from the block at ref on: the handoff text (summary and
// facts ledger) as a user text block in place of the block (sharing the block's message when
// that is a user message), the messages a speculative compaction kept verbatim behind the
// summary (payload.Tail of those before the block's message, as many as the client still
// sends), the rest of the block's message, then every later message, with null-content
// compaction blocks removed throughout. It is what the compacting turn sent upstream followed
// by what came after, byte for byte, so the upstream's prompt cache keeps hitting.
func handoffMessages(msgs []api.Message, ref api.BlockRef, o *opened) []api.Message {
	text := api.Block{Raw: api.TextBlock(dialectAnthropic.handoffText(o.summary, o.payload.Ledger)), Type: api.BlockText}
	tail := min(o.payload.Tail, ref.Message)
	m := msgs[ref.Message]
	rest := withoutCompaction(m.Blocks[ref.Block+1:])
	out := make([]api.Message, 0, len(msgs)-ref.Message+1+tail)
	if m.Role == "user" && tail == 0 {
		hm := api.NewMessage("user", append([]api.Block{text}, rest...))
		hm.Handoff = true
		out = append(out, hm)
	} else {
		hm := api.NewMessage("user", []api.Block{text})
		hm.Handoff = true
		out = append(out, hm)
		out = append(out, stripCompaction(msgs[ref.Message-tail:ref.Message], 0)...)
		if len(rest) > 0 {
			out = append(out, m.WithBlocks(rest))
		}
	}
	return append(out, stripCompaction(msgs, ref.Message+1)...)
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
// handoff as one user message followed by a speculative compaction's verbatim tail.
func (s *Server) messagesCompactIn(r *http.Request, req *api.MessagesRequest, msgs []api.Message, prev *opened) compactIn {
	return compactIn{
		dialect: dialectAnthropic, model: req.Model, conversation: conversationID(r, "", prev),
		auth: s.summariserAuth(r), items: api.MessageItems(msgs),
		units: api.CountItems(msgs), prefix: func(n int) []api.Item { return api.MessageItems(msgs[:n]) },
		prev: prev,
		finish: func(c *compaction) (int, int) {
			text := c.handoff
			if text == "" {
				text = dialectAnthropic.handoffText("", "") // the next turn's handoff renders the same
			}
			hm := api.NewMessage("user", []api.Block{{Raw: api.TextBlock(text), Type: api.BlockText}})
			hm.Handoff = true
			c.msgs = append([]api.Message{hm}, msgs[len(msgs)-c.tail:]...)
			after, _ := s.cfg.Counter.Request(req.System, api.CountItems(c.msgs), req.Tools, 0)
			return after, len(msgs) - c.tail
		},
	}
}

// pingEvent keeps a committed Messages stream alive while the summariser runs.
var pingEvent = api.AppendSSE(nil, "ping", []byte(`{"type": "ping"}`))

func pingKeepAlive(bool) []byte { return pingEvent }

// compactOnDemand answers a request with `compaction: {type: summarize}`: the conversation is
// summarised into a signed block and nothing is sampled.
func (s *Server) compactOnDemand(w http.ResponseWriter, r *http.Request, req *api.MessagesRequest, view msgView, instructions string) {
	mt := &msgTurn{t: &turn{stream: req.Stream}}
	nothing := compactionError(http.StatusBadRequest, "invalid_request_error", "compaction_nothing_to_summarize",
		"messages holds no user or assistant content to summarize.")
	if len(api.MessageItems(view.msgs)) == 0 {
		s.writeAnthropicError(w, nil, nothing)
		return
	}
	var ka *keepAlive
	if req.Stream {
		ka = startKeepAlive(w, s.cfg.KeepAlive, pingKeepAlive)
	}
	total, _ := s.cfg.Counter.Request(req.System, api.CountItems(view.msgs), req.Tools, 0)
	in := s.messagesCompactIn(r, req, view.msgs, view.prev)
	in.instructions, in.tokensBefore, in.sign = instructions, total, true
	c, err := s.compactCore(r.Context(), in)
	mt.t.committed = ka != nil && ka.Stop()
	if err != nil {
		s.compactionFailed(r, dialectAnthropic, "on_demand", req.Model, err)
		switch e := compactionUnavailable(err); {
		case errors.Is(err, errNothingToCompact) || errors.Is(err, summarizer.ErrNothingToSummarize):
			s.writeAnthropicError(w, mt, nothing)
		case e != nil:
			s.writeAnthropicError(w, mt, e)
		}
		return
	}
	s.compacted(r, dialectAnthropic, "on_demand", c)
	s.writeCompactionMessage(w, req, mt, c, true)
}

// compactionUnavailable is the answer to a summariser failure: 529 overloaded_error, transient,
// nothing changed; 429 rate_limit_error when the summariser rate limited compactd; 504
// timeout_error when the compaction ran out of time. A known wait goes out as retry-after. nil
// when the client went away.
func compactionUnavailable(err error) *api.AnthropicError {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	if errors.Is(err, summarizer.ErrBusy) {
		return busyAnthropic()
	}
	var te *compactionTimeoutError
	if errors.As(err, &te) {
		return compactionError(http.StatusGatewayTimeout, "timeout_error", "compaction_timeout", timeoutMessage(te))
	}
	p := pushbackOf(err)
	msg := "compactd could not summarise the conversation (" + p.why() + "); nothing was changed, " + p.retryWhen() + "."
	e := compactionError(529, "overloaded_error", "compaction_unavailable", msg)
	if p.rateLimited {
		e = compactionError(http.StatusTooManyRequests, "rate_limit_error", "compaction_unavailable", msg)
	}
	e.RetryAfter = p.after
	return e
}
