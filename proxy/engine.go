package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/handoff"
)

// sealKind is the crypto binding kind of Responses compaction items.
const sealKind = "openai.compaction"

// newID returns prefix + 32 random hex characters, the shape of OpenAI's ids.
func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// encryptedContent is the opaque string a client holds: the item id, then the sealed payload.
// The id travels inside the string because clients may drop the item's id field on the way back
// (it is optional on input); the id is bound into the seal's associated data, so a blob cannot be
// re-labelled or moved to another item.
func encryptedContent(itemID, sealed string) string { return itemID + "." + sealed }

func splitEncryptedContent(s string) (itemID, sealed string, ok bool) {
	itemID, sealed, ok = strings.Cut(s, ".")
	return itemID, sealed, ok && strings.HasPrefix(itemID, "cmp_")
}

// opened is a compaction item or block compactd has opened (and checked), in either dialect.
type opened struct {
	id      string
	payload *compact.Payload
	// summary is the summary in force: the sealed one, or a Messages client's edit when
	// edited summaries are allowed.
	summary string
}

// openItem opens the compaction item at input[k]. Failures are 400s that say what went wrong and
// what to do; the request goes no further.
func (s *Server) openItem(ctx context.Context, items []api.Item, k int) (*opened, *api.OpenAIError) {
	param := fmt.Sprintf("input[%d].encrypted_content", k)
	raw := items[k].Raw
	ec := gjson.GetBytes(raw, "encrypted_content")
	if ec.Type != gjson.String || ec.Str == "" {
		return nil, api.InvalidRequest(param, "invalid_encrypted_content", "The compaction item has no encrypted_content; send the item back exactly as compactd returned it.")
	}
	id, sealed, ok := splitEncryptedContent(ec.Str)
	if !ok {
		return nil, s.openError(param, crypto.ErrMalformed)
	}
	if given := gjson.GetBytes(raw, "id"); given.Exists() && given.Str != id {
		return nil, s.openError(param, crypto.ErrTampered)
	}
	plain, err := s.cfg.Sealer.Open(sealed, crypto.Binding{Kind: sealKind, ItemID: id, Tenant: s.tenantOf(ctx)})
	if err != nil {
		return nil, s.openError(param, err)
	}
	p, err := compact.UnmarshalPayload(plain)
	if err != nil {
		return nil, s.openError(param, crypto.ErrMalformed)
	}
	if s.expired(p) {
		s.openFailed(dialectOpenAI, "expired")
		return nil, api.InvalidRequest(param, "compaction_item_expired", expiredMessage)
	}
	return &opened{id: id, payload: p, summary: p.Summary}, nil
}

// openFailed logs and counts a compaction item or block that could not be opened, by
// crypto.Reason ("" is malformed), and returns the reason.
func (s *Server) openFailed(d dialect, reason string) string {
	if reason == "" {
		reason = "malformed"
	}
	s.log.Warn("compaction rejected", "api", d.String(), "reason", reason)
	s.metrics.openFailure(d.String(), reason)
	return reason
}

func (s *Server) openError(param string, err error) *api.OpenAIError {
	reason := s.openFailed(dialectOpenAI, crypto.Reason(err))
	msg := map[string]string{
		"malformed":    "The compaction item's encrypted_content is not a compaction item issued by compactd (it is truncated or not in compactd's format). Send the item back exactly as it was returned.",
		"unknown_key":  "The compaction item was sealed with a key this compactd does not have. If keys were rotated, add the old key to the keyring as a retired key; otherwise start a new conversation.",
		"wrong_tenant": "The compaction item was issued to a different tenant and cannot be used here.",
		"tampered":     "The compaction item failed its integrity check: its encrypted_content or id was modified. Send the item back exactly as it was returned.",
	}[reason]
	return api.InvalidRequest(param, "invalid_encrypted_content", msg)
}

// expand applies the handoff for the latest compaction item at input[k]: system and developer
// messages before it stay, the newest user messages before it stay (the same window compaction
// kept), everything else before it is superseded and dropped, and the item itself becomes the
// handoff message. Items after it are untouched. The result is what the upstream sees.
func (s *Server) expand(items []api.Item, k int, o *opened) []api.Item {
	s.metrics.handoffApplied(dialectOpenAI.String())
	// A speculative compaction kept the last Tail items before the item verbatim after the summary.
	tail := min(o.payload.Tail, k)
	before := items[:k-tail]
	w := compact.Partition(before, s.cfg.RetainTokens, s.countItem)
	out := make([]api.Item, 0, len(w.Instructions)+len(w.Retained)+1+tail+len(items)-k-1)
	out = s.keepWindow(out, before, w, s.cfg.RetainTokens)
	if o.payload.Summary != "" || o.payload.Ledger != "" {
		out = append(out, api.Item{Raw: api.UserMessage(dialectOpenAI.handoffText(o.payload.Summary, o.payload.Ledger)), Type: "message", Role: "user", Handoff: true})
	}
	out = append(out, items[k-tail:k]...)
	return append(out, items[k+1:]...)
}

// keepWindow appends, in their original order, the items a window keeps verbatim: instructions
// and retained user messages (the one that had to be shortened, shortened).
func (s *Server) keepWindow(out, items []api.Item, w compact.Window, retain int) []api.Item {
	keep := make(map[int]bool, len(w.Instructions)+len(w.Retained))
	for _, i := range w.Instructions {
		keep[i] = true
	}
	for _, i := range w.Retained {
		keep[i] = true
	}
	for i, it := range items {
		if !keep[i] {
			continue
		}
		if i == w.Truncated {
			text := compact.TruncateMiddle(messageText(it.Raw), retain, s.cfg.Counter)
			it = api.Item{Raw: api.UserMessage(text), Type: "message", Role: "user"}
		}
		out = append(out, it)
	}
	return out
}

// messageText is the concatenated text of a message item's content.
func messageText(raw []byte) string {
	c := gjson.GetBytes(raw, "content")
	if c.Type == gjson.String {
		return c.Str
	}
	var b strings.Builder
	c.ForEach(func(_, part gjson.Result) bool {
		if t := part.Get("text"); t.Exists() {
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(t.Str)
		}
		return true
	})
	return b.String()
}

func (s *Server) countItem(it api.Item) int { return s.cfg.Counter.Item(it.Raw) }

// The compaction core. Both dialects compact through compactCore: the Responses handlers with
// their input items, the Messages handlers with api.MessageItems of their messages. What differs
// by dialect is passed in as values (the seal kind, the retain budget, how speculation counts a
// kept tail, how the compacted context is rendered and counted), never an *http.Request, so the
// summary, the facts ledger, the gap check, speculation, archiving and sealing are the same code
// for both APIs and cannot drift apart again.

// String is the dialect's name in logs, metrics and the failure policy ("openai", "anthropic").
func (d dialect) String() string {
	if d == dialectAnthropic {
		return "anthropic"
	}
	return "openai"
}

// policyRoute is the --compact-threshold route of the dialect.
func (d dialect) policyRoute() string {
	if d == dialectAnthropic {
		return compact.RouteMessages
	}
	return compact.RouteResponses
}

// sealKind is the crypto binding kind of the dialect's compaction items or blocks.
func (d dialect) sealKind() string {
	if d == dialectAnthropic {
		return anthropicSealKind
	}
	return sealKind
}

// handoffText is the dialect's handoff text: true to what the dialect's compaction keeps
// verbatim, and a pure function of the payload, so it is byte-stable turn after turn.
func (d dialect) handoffText(summary, ledger string) string {
	if d == dialectAnthropic {
		return handoff.MessagesText(summary, ledger)
	}
	return handoff.Text(summary, ledger)
}

// specKey keys speculation by dialect and model: the two APIs' prefixes are different bytes,
// and a summary written for one is never used by the other.
func specKey(d dialect, model string) string { return d.String() + "\x00" + model }

// compactIn is one compaction, dialect-neutral.
type compactIn struct {
	dialect      dialect
	id           string // the new item's or block's id; generated when ""
	model        string
	instructions string // replaces the default summarisation prompt when set
	conversation string // archive conversation id
	auth         summarizer.Auth
	// items is the neutral view of the context to compact (after any earlier handoff).
	items []api.Item
	// units are what speculation keys on and what a kept tail is counted in: nil means items
	// themselves (Responses); on Messages one per message, prefix(n) giving the neutral items of
	// units[:n].
	units        []api.Item
	prefix       func(n int) []api.Item
	tokensBefore int
	prev         *opened // the compaction this one supersedes, if any
	retain       int     // the budget of newest user messages kept verbatim (Messages: 0)
	// speculate lets the turn use a summary speculative compaction prepared for a prefix of its
	// units (threshold turns only: their clients keep the whole history, tail included).
	speculate bool
	// allowEmpty issues a compaction with an empty summary when there is nothing to summarise
	// (routes that must answer with exactly one item); otherwise that is errNothingToCompact.
	allowEmpty bool
	// sign signs the sealed content too (Messages on-demand blocks).
	sign bool
	// finish renders the dialect's compacted context from c (before sealing) and returns its
	// size in tokens and how many units it replaced, which the payload records.
	finish func(c *compaction) (tokensAfter, replaced int)
}

// compaction is the outcome of one compaction, dialect-neutral but for the rendered context.
type compaction struct {
	id      string
	ec      string // encrypted_content: the id, then the sealed payload
	sig     string // the signature over ec, when signed
	summary string
	ledger  string
	handoff string         // the handoff text ("" when there is neither summary nor ledger)
	kept    []api.Item     // of compacted: the instructions and retained messages kept verbatim
	window  compact.Window // over compacted
	// compacted are the neutral items summarised: items, or on a speculative hit the prefix the
	// ready summary covers; tail units after it are kept verbatim behind the handoff.
	compacted []api.Item
	tail      int
	payload   *compact.Payload
	usage     summarizer.Usage

	// The dialect's rendering, set by finish and the wrappers.
	item  []byte        // the Responses compaction item, or the Messages compaction block
	items []api.Item    // Responses: the compacted input the upstream sees
	msgs  []api.Message // Messages: the compacted messages the upstream sees
}

// errNothingToCompact means the input holds nothing but instructions.
var errNothingToCompact = errors.New("nothing to compact")

// compactCore summarises the conversation (everything but instructions; retained user messages
// are also kept verbatim), writes the facts ledger (and gap check), and archives and seals the
// result.
//
// Summarising (the wait for a speculative summary, the summariser's attempts, the gap check) runs
// under the compaction deadline; archiving and sealing, local and quick, under ctx, so a summary
// that made it in time is not lost to the clock.
func (s *Server) compactCore(ctx context.Context, in compactIn) (*compaction, error) {
	var sg signer
	if in.sign {
		var ok bool
		if sg, ok = s.cfg.Sealer.(signer); !ok {
			return nil, errors.New("the configured sealer cannot sign compaction blocks")
		}
	}
	sctx, cancel := s.compactionContext(ctx)
	defer cancel()
	units, prefix := in.units, in.prefix
	if units == nil {
		units, prefix = in.items, func(n int) []api.Item { return in.items[:n] }
	}
	items, tail := in.items, 0
	var res summarizer.Result
	ledger, hit := "", false
	if in.speculate {
		// A ready summary (and ledger) of a prefix: summarise nothing now, keep what followed it
		// verbatim.
		if n, spec := s.useSpeculation(sctx, specKey(in.dialect, in.model), units); n > 0 {
			items, tail, res, ledger, hit = prefix(n), len(units)-n, spec.res, spec.ledger, true
		}
	}
	w := compact.Partition(items, in.retain, s.countItem)
	if len(w.Summarise) == 0 && !in.allowEmpty {
		return nil, errNothingToCompact
	}
	if len(w.Summarise) > 0 && !hit {
		var err error
		res, err = s.summarise(sctx, in.dialect, summarizer.Request{
			Model:        in.model,
			Entries:      compact.RenderEntries(items, w.Summarise),
			Instructions: in.instructions,
			Auth:         in.auth,
		})
		if err != nil {
			return nil, err
		}
	}
	if in.id == "" {
		in.id = newID("cmp_")
	}
	c := &compaction{id: in.id, summary: res.Summary, usage: res.Usage, window: w, compacted: items, tail: tail}
	if !hit {
		ledger = s.ledger(sctx, in.auth, in.model, items, w, res, &c.usage)
	}
	c.ledger = ledger
	if res.Summary != "" || ledger != "" {
		c.handoff = in.dialect.handoffText(res.Summary, ledger)
	}
	c.kept = s.keepWindow(make([]api.Item, 0, len(w.Instructions)+len(w.Retained)), items, w, in.retain)
	after, replaced := in.finish(c)
	ref, err := s.archiveReplaced(ctx, in.conversation, in.id, res.Model, items, w, in.prev)
	if err != nil {
		return nil, err
	}
	c.payload = &compact.Payload{
		V:             compact.PayloadVersion,
		Summary:       res.Summary,
		Model:         res.Model,
		CreatedAt:     time.Now().Unix(),
		TokensBefore:  in.tokensBefore,
		TokensAfter:   after,
		ItemsReplaced: replaced,
		Archive:       ref,
		Ledger:        ledger,
		Tail:          tail,
	}
	if in.prev != nil {
		c.payload.Previous = in.prev.id
	}
	plain, err := c.payload.Marshal()
	if err != nil {
		return nil, err
	}
	b := crypto.Binding{Kind: in.dialect.sealKind(), ItemID: c.id, Tenant: s.tenantOf(ctx)}
	sealed, err := s.cfg.Sealer.Seal(plain, b)
	if err != nil {
		return nil, err
	}
	c.ec = encryptedContent(c.id, sealed)
	if sg != nil {
		c.sig = sg.Sign([]byte(c.ec), b)
	}
	if in.dialect == dialectAnthropic {
		c.item = api.CompactionBlock(c.summary, c.ec, c.sig)
	} else {
		c.item = api.CompactionItem(c.id, c.ec)
	}
	return c, nil
}

// compactRequest is a Responses compaction: what to compact and how.
type compactRequest struct {
	id           string // the new item's id; generated when ""
	model        string
	items        []api.Item // the context after any earlier handoff
	tokensBefore int
	prev         *opened
	instructions string
	conversation string
	speculate    bool
	allowEmpty   bool
}

// compactItems compacts a Responses input through the core.
func (s *Server) compactItems(ctx context.Context, r *http.Request, cr compactRequest) (*compaction, error) {
	return s.compactCore(ctx, s.responsesCompactIn(r, cr))
}

// responsesCompactIn is the core's view of a Responses compaction. The compacted input is the
// kept window, the handoff message, and a speculative compaction's verbatim tail.
func (s *Server) responsesCompactIn(r *http.Request, cr compactRequest) compactIn {
	return compactIn{
		dialect: dialectOpenAI, id: cr.id, model: cr.model, instructions: cr.instructions,
		conversation: cr.conversation, auth: s.summariserAuth(r), items: cr.items,
		tokensBefore: cr.tokensBefore, prev: cr.prev, retain: s.cfg.RetainTokens,
		speculate: cr.speculate, allowEmpty: cr.allowEmpty,
		finish: func(c *compaction) (int, int) {
			c.items = append(make([]api.Item, 0, len(c.kept)+1+c.tail), c.kept...)
			if c.handoff != "" {
				c.items = append(c.items, api.Item{Raw: api.UserMessage(c.handoff), Type: "message", Role: "user", Handoff: true})
			}
			c.items = append(c.items, cr.items[len(c.compacted):]...)
			return s.countItems(c.items), len(c.compacted) - len(c.window.Instructions) - len(c.window.Retained)
		},
	}
}

// thresholdCompaction runs a turn's threshold (or policy) compaction in either dialect: a
// streamed turn is held open with the dialect's keep-alive (pulse renders it) while the
// compaction runs, the outcome is recorded, and a failure is answered with answer (or, under
// the passthrough failure policy, the turn goes on uncompacted). answered reports that the client
// has been answered; a nil compaction without answered means the turn goes on uncompacted.
func (s *Server) thresholdCompaction(w http.ResponseWriter, r *http.Request, t *turn, trigger string, pulse func(first bool) []byte, in compactIn, answer func(err error)) (c *compaction, answered bool) {
	var ka *keepAlive
	if t.stream {
		ka = startKeepAlive(w, s.cfg.KeepAlive, pulse)
	}
	c, err := s.compactCore(r.Context(), in)
	t.committed = ka != nil && ka.Stop()
	switch {
	case errors.Is(err, errNothingToCompact):
		return nil, false
	case err != nil:
		s.compactionFailed(r, in.dialect, trigger, in.model, err)
		if !t.committed && s.passThroughOnFailure(w, in.dialect, err) {
			return nil, false // forward the turn as it came
		}
		answer(err)
		return nil, true
	}
	s.compacted(r, in.dialect, trigger, c)
	return c, false
}

// ledger is the facts ledger sealed with a summary: the hard facts of the replaced items the
// summary lacks, and, with GapCheck, what a second summariser pass found still missing. A failed
// gap check costs the turn nothing: the ledger goes out without it.
func (s *Server) ledger(ctx context.Context, auth summarizer.Auth, model string, items []api.Item, w compact.Window, res summarizer.Result, usage *summarizer.Usage) string {
	if s.cfg.LedgerBytes < 0 || len(w.Summarise) == 0 {
		return ""
	}
	ledger := compact.Ledger(items, w.Summarise, res.Summary, s.cfg.LedgerBytes)
	if !s.cfg.GapCheck {
		return ledger
	}
	entries := append([]string{"[summary and ledger so far]\n" + res.Summary + "\n\n" + ledger}, compact.RenderEntries(items, w.Summarise)...)
	gap, err := s.cfg.Summarizer.Summarize(ctx, summarizer.Request{
		Model: model, Entries: entries, Instructions: compact.GapCheckPrompt(),
		Auth: auth,
	})
	if err != nil {
		s.log.Warn("gap check failed; sealing the ledger without it", "err", err)
		return ledger
	}
	usage.InputTokens += gap.Usage.InputTokens
	usage.OutputTokens += gap.Usage.OutputTokens
	usage.TotalTokens += gap.Usage.TotalTokens
	return compact.WithGapFindings(ledger, gap.Summary)
}

func (s *Server) countItems(items []api.Item) int {
	n := 0
	for _, it := range items {
		n += s.countItem(it)
	}
	return n
}

// summariserAuth is the credential a compaction's summariser calls carry (used only when no
// summariser key is configured): what the Responses upstream gets. Without tenants that is the
// caller's own headers. With tenants it is the authenticated tenant's OpenAI key on every route:
// the summariser speaks the OpenAI wire API, and a Messages turn's headers carry the tenant's
// Anthropic key instead, which it cannot use (and which must not go to an OpenAI host).
func (s *Server) summariserAuth(r *http.Request) summarizer.Auth {
	h := callerCredentials(r.Header)
	if s.cfg.Tenants == nil {
		return summarizer.Auth{Header: h}
	}
	name, ok := r.Context().Value(tenantKey{}).(string)
	if !ok {
		return summarizer.Auth{Header: h}
	}
	for _, k := range []string{"Authorization", "Api-Key", "X-Api-Key"} {
		h.Del(k)
	}
	if key := s.cfg.Tenants.openAIKey(name); key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	return summarizer.Auth{Header: h}
}

// callerCredentials are the headers the summariser may reuse when it shares the caller's upstream.
func callerCredentials(h http.Header) http.Header {
	out := http.Header{}
	for _, k := range []string{"Authorization", "Api-Key", "X-Api-Key", "OpenAI-Organization", "OpenAI-Project"} {
		if v := h.Values(k); len(v) > 0 {
			out[http.CanonicalHeaderKey(k)] = v
		}
	}
	return out
}

// summariserError is the turn's answer when the summariser fails: nothing was changed, so the
// client can retry the same request. A rate-limited summariser is a 429 and a known wait is
// passed on as Retry-After; a compaction out of time is a 504.
func summariserError(err error) *api.OpenAIError {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	if errors.Is(err, summarizer.ErrBusy) {
		return busyOpenAI()
	}
	var te *compactionTimeoutError
	if errors.As(err, &te) {
		return &api.OpenAIError{Status: http.StatusGatewayTimeout, Type: "server_error", Code: "compaction_timeout", Message: timeoutMessage(te)}
	}
	p := pushbackOf(err)
	msg := "compactd could not summarise the conversation (" + p.why() + "); nothing was changed, " + p.retryWhen()
	if p.rateLimited {
		return &api.OpenAIError{Status: http.StatusTooManyRequests, Type: "requests", Code: "rate_limit_exceeded", RetryAfter: p.after, Message: msg}
	}
	return &api.OpenAIError{Status: http.StatusBadGateway, Type: "server_error", Code: "compaction_failed", RetryAfter: p.after, Message: msg}
}
