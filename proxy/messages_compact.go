package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/api"
	"github.com/compactd/compactd/compact"
	"github.com/compactd/compactd/compact/summarizer"
	"github.com/compactd/compactd/crypto"
	"github.com/compactd/compactd/handoff"
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
	return crypto.Binding{Kind: anthropicSealKind, ItemID: id, Tenant: s.tenantOf(ctx)}
}

// openedBlock is a compaction block compactd has opened and checked.
type openedBlock struct {
	id      string
	summary string // the summary in force: the sealed one, or the client's edit when allowed
	payload *compact.Payload
}

// msgView is the conversation as the upstream will see it once compaction blocks are applied.
type msgView struct {
	msgs    []api.Message
	prev    *openedBlock // the block that was handed off, nil if none
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
	s.metrics.handoffApplied("anthropic")
	return msgView{msgs: handoffMessages(req.Messages, ref, o.summary), prev: o, changed: true}, nil
}

// openBlock verifies (when signed) and opens one compaction block and checks its content.
func (s *Server) openBlock(ctx context.Context, raw []byte, ref api.BlockRef, signed bool) (*openedBlock, *api.AnthropicError) {
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
			s.openFailed(crypto.Reason(err))
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
		s.openFailed("expired")
		return nil, compactionError(http.StatusBadRequest, "invalid_request_error", "compaction_block_expired", path+": "+expiredMessage)
	}
	o := &openedBlock{id: id, summary: p.Summary, payload: p}
	if content.Str != p.Summary {
		if !s.cfg.AllowEditedSummaries {
			return nil, compactionError(http.StatusBadRequest, "invalid_request_error", "compaction_content_mismatch",
				path+".content: the compaction block's content differs from the summary compactd issued; send the block back unchanged.")
		}
		o.summary = content.Str
	}
	return o, nil
}

func (s *Server) openFailed(reason string) {
	if reason == "" {
		reason = "malformed"
	}
	s.log.Warn("compaction block rejected", "api", "anthropic", "reason", reason)
	s.metrics.openFailure("anthropic", reason)
}

func (s *Server) blockOpenError(path string, err error) *api.AnthropicError {
	reason := crypto.Reason(err)
	s.openFailed(reason)
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

// handoffMessages is the conversation from the block at ref on: the summary as a user text
// block in place of the block (sharing the block's message when that is a user message), the
// rest of the block's message, then every later message, with null-content compaction blocks
// removed throughout.
func handoffMessages(msgs []api.Message, ref api.BlockRef, summary string) []api.Message {
	text := api.Block{Raw: api.TextBlock(handoff.Text(summary, "")), Type: api.BlockText}
	m := msgs[ref.Message]
	rest := withoutCompaction(m.Blocks[ref.Block+1:])
	out := make([]api.Message, 0, len(msgs)-ref.Message+1)
	if m.Role == "user" {
		hm := api.NewMessage("user", append([]api.Block{text}, rest...))
		hm.Handoff = true
		out = append(out, hm)
	} else {
		hm := api.NewMessage("user", []api.Block{text})
		hm.Handoff = true
		out = append(out, hm)
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

// msgCompaction is one finished Anthropic compaction.
type msgCompaction struct {
	id      string
	summary string
	ec      string
	sig     string
	block   []byte
	handoff api.Message // the compacted conversation: the summary as one user message
	payload *compact.Payload
	usage   summarizer.Usage
}

type msgComprReq struct {
	msgs         []api.Message
	prev         *openedBlock
	instructions string
	tokensBefore int
	sign         bool
}

// compactMessages summarises the whole conversation (Anthropic's compaction keeps nothing of it
// verbatim: system and tools are outside messages and stay) and seals the result.
func (s *Server) compactMessages(ctx context.Context, r *http.Request, req *api.MessagesRequest, cr msgComprReq) (*msgCompaction, error) {
	items := api.MessageItems(cr.msgs)
	w := compact.Partition(items, 0, s.countItem)
	if len(w.Summarise) == 0 {
		return nil, errNothingToCompact
	}
	var sg signer
	if cr.sign {
		var ok bool
		if sg, ok = s.cfg.Sealer.(signer); !ok {
			return nil, errors.New("the configured sealer cannot sign compaction blocks")
		}
	}
	// The summariser runs under the compaction deadline; archiving and sealing under ctx.
	sctx, cancel := s.compactionContext(ctx)
	res, err := s.summarise(sctx, "anthropic", summarizer.Request{
		Model:        req.Model,
		Entries:      compact.RenderEntries(items, w.Summarise),
		Instructions: cr.instructions,
		Auth:         s.summariserAuth(r),
	})
	cancel()
	if err != nil {
		return nil, err
	}
	c := &msgCompaction{id: newID("cmp_"), summary: res.Summary, usage: res.Usage}
	c.handoff = api.NewMessage("user", []api.Block{{Raw: api.TextBlock(handoff.Text(res.Summary, "")), Type: api.BlockText}})
	c.handoff.Handoff = true
	after, _ := s.cfg.Counter.Request(req.System, api.CountItems([]api.Message{c.handoff}), req.Tools, 0)
	c.payload = &compact.Payload{
		V:             compact.PayloadVersion,
		Summary:       res.Summary,
		Model:         res.Model,
		CreatedAt:     time.Now().Unix(),
		TokensBefore:  cr.tokensBefore,
		TokensAfter:   after,
		ItemsReplaced: len(cr.msgs),
	}
	// The raw messages go to the archive, like the Responses side's items, so nothing is lost.
	var prev *opened
	if cr.prev != nil {
		c.payload.Previous = cr.prev.id
		prev = &opened{id: cr.prev.id, payload: cr.prev.payload}
	}
	ref, err := s.archiveReplaced(ctx, conversationID(r, "", prev), c.id, res.Model, items, w, prev)
	if err != nil {
		return nil, err
	}
	c.payload.Archive = ref
	plain, err := c.payload.Marshal()
	if err != nil {
		return nil, err
	}
	sealed, err := s.cfg.Sealer.Seal(plain, s.binding(ctx, c.id))
	if err != nil {
		return nil, err
	}
	c.ec = encryptedContent(c.id, sealed)
	if sg != nil {
		c.sig = sg.Sign([]byte(c.ec), s.binding(ctx, c.id))
	}
	c.block = api.CompactionBlock(c.summary, c.ec, c.sig)
	return c, nil
}

// pingEvent keeps a committed Messages stream alive while the summariser runs.
var pingEvent = api.AppendSSE(nil, "ping", []byte(`{"type": "ping"}`))

// compactThreshold runs a threshold compaction for a turn, holding a streamed response open with
// pings while the summariser works. done reports that the client has been answered (with an
// error); a nil compaction without done means there was nothing to compact.
func (s *Server) compactThreshold(w http.ResponseWriter, r *http.Request, req *api.MessagesRequest, mt *msgTurn, cr msgComprReq) (*msgCompaction, bool) {
	var ka *keepAlive
	if req.Stream {
		ka = startKeepAlive(w, s.cfg.KeepAlive, func(bool) []byte { return pingEvent })
	}
	c, err := s.compactMessages(r.Context(), r, req, cr)
	mt.t.committed = ka != nil && ka.Stop()
	switch {
	case errors.Is(err, errNothingToCompact):
		return nil, false
	case err != nil:
		s.messagesCompactionFailed(r, "threshold", req.Model, err)
		if !mt.t.committed && s.passThroughOnFailure(w, "anthropic", err) {
			return nil, false
		}
		if e := compactionUnavailable(err); e != nil {
			s.writeAnthropicError(w, mt, e)
		}
		return nil, true
	}
	s.messagesCompacted(r, "threshold", c)
	return c, false
}

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
		ka = startKeepAlive(w, s.cfg.KeepAlive, func(bool) []byte { return pingEvent })
	}
	total, _ := s.cfg.Counter.Request(req.System, api.CountItems(view.msgs), req.Tools, 0)
	c, err := s.compactMessages(r.Context(), r, req, msgComprReq{msgs: view.msgs, prev: view.prev, instructions: instructions, tokensBefore: total, sign: true})
	mt.t.committed = ka != nil && ka.Stop()
	if err != nil {
		s.messagesCompactionFailed(r, "on_demand", req.Model, err)
		switch e := compactionUnavailable(err); {
		case errors.Is(err, errNothingToCompact) || errors.Is(err, summarizer.ErrNothingToSummarize):
			s.writeAnthropicError(w, mt, nothing)
		case e != nil:
			s.writeAnthropicError(w, mt, e)
		}
		return
	}
	s.messagesCompacted(r, "on_demand", c)
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

// messagesCompacted logs and counts one Anthropic compaction, never its content.
func (s *Server) messagesCompacted(r *http.Request, trigger string, c *msgCompaction) {
	attrs := []any{
		slog.String("api", "anthropic"),
		slog.String("trigger", trigger),
		slog.String("item", c.id),
		slog.Int("tokens_before", c.payload.TokensBefore),
		slog.Int("tokens_after", c.payload.TokensAfter),
		slog.Int("items_replaced", c.payload.ItemsReplaced),
		slog.Int64("summariser_input_tokens", c.usage.InputTokens),
		slog.Int64("summariser_output_tokens", c.usage.OutputTokens),
	}
	s.log.Info("compacted", append(attrs, clientTurnFrom(r.Header).LogAttrs()...)...)
	s.metrics.compaction(compactionEvent{API: "anthropic", Trigger: trigger, Outcome: "ok", Model: c.payload.Model,
		TokensBefore: c.payload.TokensBefore, TokensAfter: c.payload.TokensAfter})
}

func (s *Server) messagesCompactionFailed(r *http.Request, trigger, model string, err error) {
	attrs := append([]any{slog.String("api", "anthropic"), slog.String("trigger", trigger), slog.Any("err", err)}, clientTurnFrom(r.Header).LogAttrs()...)
	s.log.Warn("compaction failed", attrs...)
	s.metrics.compaction(compactionEvent{API: "anthropic", Trigger: trigger, Outcome: "failed", Model: model})
}
