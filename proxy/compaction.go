package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/eventlog"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn"
)

// The proxy's side of the compaction engine: the compactions the dialect handlers ask for go
// through compactCore to internal/engine, and every compaction the handlers open goes through
// openCompaction. What is here is the glue both dialects share; what is one dialect's lives in
// its own files (responses*.go, messages*.go) and behind the dialect interface (dialect.go).

// newID returns prefix + 32 random hex characters, the shape of OpenAI's ids.
func newID(prefix string) string { return engine.NewID(prefix) }

// openCompaction opens the encrypted_content of a compaction item or block sealed for d: param
// locates it in the request, givenID is the id sent beside it (Responses; "" for none), sig its
// signature (signed Messages blocks; "" for none). A failure is logged and counted by reason and
// answered with a 400 in d's envelope that says what went wrong and what to do; the request
// goes no further.
func (s *Server) openCompaction(ctx context.Context, d dialect, param, ec, givenID, sig string) (*engine.Opened, *fault.Fault) {
	o, err := s.engine.Open(ec, givenID, d.Engine().SealKind, s.tenantOf(ctx), sig)
	if err == nil {
		return o, nil
	}
	reason := engine.Reason(err)
	s.log.Warn("compaction rejected", "api", apiName(d), "reason", reason)
	s.metrics.OpenFailure(apiName(d), reason)
	return nil, openError(d, param, reason, err)
}

// openError is the 400 for a compaction that did not open, by engine.Reason; n is what d calls a
// compaction ("item" or "block").
func openError(d dialect, param, reason string, err error) *fault.Fault {
	n := d.Words().Compaction
	f := &fault.Fault{Code: fault.CodeInvalidEncryptedContent, Param: param}
	var se *engine.SignatureError
	switch {
	case reason == "expired":
		f.Code = fault.CodeCompactionExpired
		f.Message = strings.Replace(expiredMessage, "item", n, 1)
		return f
	case errors.As(err, &se):
		f.Code = fault.CodeCompactionSignatureInvalid
		f.Message = "the compaction " + n + "'s signature does not verify; send the " + n + " back byte-exact, as compactd returned it."
		return f
	}
	f.Message = map[string]string{
		"unknown_key":  "The compaction " + n + " was sealed with a key this compactd does not have. If keys were rotated, add the old key to the keyring as a retired key; otherwise start a new conversation.",
		"wrong_tenant": "The compaction " + n + " was issued to a different tenant and cannot be used here.",
		"tampered":     "The compaction " + n + " failed its integrity check: its encrypted_content or id was modified. Send the " + n + " back exactly as it was returned.",
	}[reason]
	if f.Message == "" {
		f.Message = "The compaction " + n + "'s encrypted_content is not a compaction " + n + " issued by compactd (it is truncated or not in compactd's format). Send the " + n + " back exactly as it was returned."
	}
	return f
}

// compaction is the engine's outcome with the dialect's rendering of it.
type compaction struct {
	*engine.Compaction
	took time.Duration // how long the compaction took (the summariser's wait included)
}

// passThroughOnFailure reports whether a failed threshold compaction should be forwarded
// uncompacted (the passthrough failure policy), and marks the response so the client can tell.
func (p *pipe) passThroughOnFailure(err error) bool {
	if !p.s.engine.PassThrough(p.a.Name(), err) {
		return false
	}
	p.w.Header().Add("X-Compactd-Warning", "compaction skipped: the summariser is unavailable; the request was forwarded uncompacted")
	return true
}

// summariserAuth is the credential a compaction's summariser calls carry (used only when no
// summariser key is configured); the summariser reads the field of its own wire API. Without
// tenants both fields are the caller's own headers: the summariser shares the caller's upstream.
// With tenants they are the authenticated tenant's keys, whichever route the turn came in on:
// its OpenAI key for an OpenAI-API summariser (Header), its Anthropic key for a Messages-API one
// (AnthropicHeader), so a key only ever goes to its own provider's host.
func (s *Server) summariserAuth(r *http.Request) summarizer.Auth {
	h := callerCredentials(r.Header)
	if s.cfg.Tenants == nil {
		return summarizer.Auth{Header: h, AnthropicHeader: anthropicCredentials(r.Header)}
	}
	name, ok := r.Context().Value(tenantKey{}).(string)
	if !ok {
		return summarizer.Auth{Header: h, AnthropicHeader: anthropicCredentials(r.Header)}
	}
	for _, k := range []string{"Authorization", "Api-Key", "X-Api-Key"} {
		h.Del(k)
	}
	if key := s.cfg.Tenants.openAIKey(name); key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	ant := http.Header{}
	if key := s.cfg.Tenants.anthropicKey(name); key != "" {
		ant.Set("X-Api-Key", key)
	}
	return summarizer.Auth{Header: h, AnthropicHeader: ant}
}

// anthropicCredentials are the headers a Messages-API summariser may reuse: the caller's
// x-api-key or bearer token, and anthropic-beta (the summariser keeps only its oauth flags).
func anthropicCredentials(h http.Header) http.Header {
	out := http.Header{}
	for _, k := range []string{"X-Api-Key", "Authorization", "Anthropic-Beta"} {
		if v := h.Values(k); len(v) > 0 {
			out[http.CanonicalHeaderKey(k)] = v
		}
	}
	return out
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

// compactionFailure is the turn's answer when a compaction fails: nothing was changed, so the
// client can retry the same request. A full compaction queue and a rate-limited summariser are
// 429s and a known wait is passed on as Retry-After; a compaction out of time is a 504; any
// other summariser failure is a 502 on OpenAI routes and Anthropic's transient 529
// overloaded_error on Messages. nil when the client went away: there is nobody to answer.
func compactionFailure(err error) *fault.Fault {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	if errors.Is(err, engine.ErrNotSmaller) {
		// An explicit compaction (the others go on uncompacted): the client asked, and there is
		// no compaction worth issuing.
		return &fault.Fault{Code: fault.CodeCompactionNotSmaller,
			Message: "compactd did not compact the conversation: the summariser's answer came back larger than the conversation it was to summarise, " +
				"so the compaction would only make later requests larger. Nothing was changed; retry, or check that the summariser model (--summarizer-model) follows its output budget."}
	}
	if errors.Is(err, summarizer.ErrBusy) {
		return compactionBusy()
	}
	var te *engine.TimeoutError
	if errors.As(err, &te) {
		return &fault.Fault{Kind: fault.Timeout, Code: fault.CodeCompactionTimeout, Message: te.Message()}
	}
	p := engine.PushbackOf(err)
	f := &fault.Fault{Kind: fault.Unavailable, Code: fault.CodeCompactionUnavailable, RetryAfter: p.After,
		Message: "compactd could not summarise the conversation (" + p.Why() + "); nothing was changed, " + p.RetryWhen() + "."}
	if p.RateLimited {
		f.Kind = fault.RateLimited
	}
	return f
}

// compactionBusy answers a full compaction queue.
func compactionBusy() *fault.Fault {
	return &fault.Fault{Kind: fault.RateLimited, Code: fault.CodeCompactionBusy, RetryAfter: 2 * time.Second,
		Message: "compactd is running as many compactions as it allows and its queue is full; retry shortly."}
}

// The transparent policy. A client that speaks no compaction protocol (no context_management,
// no compaction item or block of compactd's, no compaction request) and a route with a
// --compact-threshold policy: compactd compacts what the upstream sees and leaves the client's
// response as the upstream wrote it (the usage in it is what the upstream processed). Such a
// client resends its whole history every turn, so the memo remembers each compaction against
// the prefix it covered and the next turns get the same handoff back, without a summary. What
// happened is said in the X-Compactd-Compaction response header.

// compactionHeader says what compactd did to a transparent turn's context: "compacted" (this
// turn was summarised; tokens before and after) or "applied" (an earlier compaction the memo
// remembered was applied; how many of the client's items it covers).
const compactionHeader = "X-Compactd-Compaction"

func markCompacted(w http.ResponseWriter, c *compaction) {
	w.Header().Set(compactionHeader, compactedReport(c))
}

func compactedReport(c *compaction) string {
	return fmt.Sprintf("compacted; id=%s; tokens_before=%d; tokens_after=%d", c.ID, c.Payload.TokensBefore, c.Payload.TokensAfter)
}

// markCompactedTurn is markCompacted for a turn whose stream compactd may have committed while it
// compacted (keep-alives): the headers are gone then, so the same report goes out as an SSE
// comment, which every stream parser skips, before the upstream's first event.
func markCompactedTurn(w http.ResponseWriter, st *turn.Stream, c *compaction) {
	if st.Committed {
		_, _ = w.Write(sse.AppendComment(nil, compactionHeader+": "+compactedReport(c)))
		return
	}
	markCompacted(w, c)
}

// markApplied says so to the client, and records it in the event log, when the memo applied a
// remembered compaction to the turn.
func (p *pipe) markApplied(m *engine.Memory) {
	s, w, r, d := p.s, p.w, p.r, p.a
	w.Header().Set(compactionHeader, fmt.Sprintf("applied; id=%s; items=%d", m.Opened.ID, m.Items))
	if s.events != nil && s.events.MemoApplied(s.eventSource(r.Context(), eventlog.ClientKind(r.Header), apiName(d)), m) {
		s.live.memoApplied.Add(1)
	}
}
