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

	"github.com/compactd/compactd/api"
	"github.com/compactd/compactd/compact"
	"github.com/compactd/compactd/compact/summarizer"
	"github.com/compactd/compactd/crypto"
	"github.com/compactd/compactd/handoff"
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

// opened is a compaction item compactd has opened.
type opened struct {
	id      string
	payload *compact.Payload
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
		s.metrics.openFailure("openai", "expired")
		return nil, api.InvalidRequest(param, "compaction_item_expired", expiredMessage)
	}
	return &opened{id: id, payload: p}, nil
}

func (s *Server) openError(param string, err error) *api.OpenAIError {
	reason := crypto.Reason(err)
	if reason == "" {
		reason = "malformed"
	}
	s.log.Warn("compaction item rejected", "reason", reason)
	s.metrics.openFailure("openai", reason)
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
	s.metrics.handoffApplied("openai")
	// A speculative compaction kept the last Tail items before the item verbatim after the summary.
	tail := min(o.payload.Tail, k)
	before := items[:k-tail]
	w := compact.Partition(before, s.cfg.RetainTokens, s.countItem)
	out := make([]api.Item, 0, len(w.Instructions)+len(w.Retained)+1+tail+len(items)-k-1)
	out = s.keepWindow(out, before, w)
	if o.payload.Summary != "" || o.payload.Ledger != "" {
		out = append(out, api.Item{Raw: handoff.ResponsesMessage(o.payload.Summary, o.payload.Ledger), Type: "message", Role: "user", Handoff: true})
	}
	out = append(out, items[k-tail:k]...)
	return append(out, items[k+1:]...)
}

// keepWindow appends, in their original order, the items a window keeps verbatim: instructions
// and retained user messages (the one that had to be shortened, shortened).
func (s *Server) keepWindow(out, items []api.Item, w compact.Window) []api.Item {
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
			text := compact.TruncateMiddle(messageText(it.Raw), s.cfg.RetainTokens, s.cfg.Counter)
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

// compaction is the outcome of one summarisation.
type compaction struct {
	id      string
	item    []byte     // the compaction item as returned to the client
	items   []api.Item // the compacted context: kept window + handoff message
	payload *compact.Payload
	usage   summarizer.Usage
	window  compact.Window
}

// errNothingToCompact means the input holds nothing but instructions.
var errNothingToCompact = errors.New("nothing to compact")

// compactRequest says what to compact and how.
type compactRequest struct {
	id           string // the new item's id; generated when ""
	model        string
	items        []api.Item // the context after any earlier handoff
	tokensBefore int
	prev         *opened // the compaction item this one supersedes, if any
	instructions string  // replaces the default summarisation prompt when set
	conversation string  // archive conversation id
	// speculate lets the turn use a summary speculative compaction prepared for a prefix of its
	// items (threshold turns only: their clients keep the whole history, tail included).
	speculate bool
	// allowEmpty issues an item with an empty summary when there is nothing to summarise (the
	// explicit compaction routes must answer with exactly one item); otherwise that is
	// errNothingToCompact.
	allowEmpty bool
}

// compactItems summarises the conversation (everything but instructions; retained user messages
// are also kept verbatim) and seals the result.
//
// Summarising (the wait for a speculative summary, the summariser's attempts, the gap check) runs
// under the compaction deadline; archiving and sealing, local and quick, under ctx, so a summary
// that made it in time is not lost to the clock.
func (s *Server) compactItems(ctx context.Context, r *http.Request, cr compactRequest) (*compaction, error) {
	sctx, cancel := s.compactionContext(ctx)
	defer cancel()
	items, tail := cr.items, []api.Item(nil)
	var res summarizer.Result
	ledger, haveLedger := "", false
	if cr.speculate {
		// A ready summary (and ledger) of a prefix: summarise nothing now, keep what followed it
		// verbatim.
		if n, spec := s.useSpeculation(sctx, cr.model, items); n > 0 {
			items, tail, res, ledger, haveLedger = items[:n], items[n:], spec.res, spec.ledger, true
		}
	}
	w := compact.Partition(items, s.cfg.RetainTokens, s.countItem)
	if len(w.Summarise) == 0 && !cr.allowEmpty {
		return nil, errNothingToCompact
	}
	if len(w.Summarise) > 0 && tail == nil {
		var err error
		res, err = s.summarise(sctx, "openai", summarizer.Request{
			Model:        cr.model,
			Entries:      compact.RenderEntries(items, w.Summarise),
			Instructions: cr.instructions,
			Auth:         s.summariserAuth(r),
		})
		if err != nil {
			return nil, err
		}
	}
	if cr.id == "" {
		cr.id = newID("cmp_")
	}
	c := &compaction{id: cr.id, usage: res.Usage, window: w}
	if !haveLedger {
		ledger = s.ledger(sctx, s.summariserAuth(r), cr.model, items, w, res, &c.usage)
	}
	c.items = s.keepWindow(make([]api.Item, 0, len(w.Instructions)+len(w.Retained)+1), items, w)
	if res.Summary != "" || ledger != "" {
		c.items = append(c.items, api.Item{Raw: handoff.ResponsesMessage(res.Summary, ledger), Type: "message", Role: "user", Handoff: true})
	}
	c.items = append(c.items, tail...)
	tokensBefore, prev := cr.tokensBefore, cr.prev
	ref, err := s.archiveReplaced(ctx, cr.conversation, cr.id, res.Model, items, w, prev)
	if err != nil {
		return nil, err
	}
	c.payload = &compact.Payload{
		V:             1,
		Summary:       res.Summary,
		Model:         res.Model,
		CreatedAt:     time.Now().Unix(),
		TokensBefore:  tokensBefore,
		TokensAfter:   s.countItems(c.items),
		ItemsReplaced: len(items) - len(w.Instructions) - len(w.Retained),
	}
	if prev != nil {
		c.payload.Previous = prev.id
	}
	c.payload.Archive = ref
	c.payload.Ledger = ledger
	c.payload.Tail = len(tail)
	plain, err := c.payload.Marshal()
	if err != nil {
		return nil, err
	}
	sealed, err := s.cfg.Sealer.Seal(plain, crypto.Binding{Kind: sealKind, ItemID: c.id, Tenant: s.tenantOf(ctx)})
	if err != nil {
		return nil, err
	}
	c.item = api.CompactionItem(c.id, encryptedContent(c.id, sealed))
	return c, nil
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
