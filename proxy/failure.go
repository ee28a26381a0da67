package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact/summarizer"
)

// What a turn does when the summariser fails (after the resilient client's retries, or at once
// when its circuit breaker is open):
//
//	fail        the turn gets a clear error in its API's dialect and nothing was changed, so the
//	            client can retry (default);
//	passthrough the turn is forwarded uncompacted, with an X-Compactd-Warning header;
//	extractive  a deterministic summary from the user messages (and the last answer) replaces the
//	            model-written one, and the compaction goes ahead.
//
// The explicit routes (/v1/responses/compact, compaction_trigger, on-demand) must return a
// compaction, so passthrough fails there. A full compaction queue is always a 429.

// FailurePolicy is one of "fail", "passthrough", "extractive".
type FailurePolicy string

const (
	PolicyFail        FailurePolicy = "fail"
	PolicyPassthrough FailurePolicy = "passthrough"
	PolicyExtractive  FailurePolicy = "extractive"
)

// FailurePolicies holds the policy of each API.
type FailurePolicies struct{ Responses, Messages FailurePolicy }

// ParseFailurePolicies reads "POLICY" (both APIs) or "responses=POLICY,messages=POLICY".
func ParseFailurePolicies(s string) (FailurePolicies, error) {
	p := FailurePolicies{Responses: PolicyFail, Messages: PolicyFail}
	valid := func(v string) (FailurePolicy, error) {
		switch f := FailurePolicy(strings.TrimSpace(v)); f {
		case PolicyFail, PolicyPassthrough, PolicyExtractive:
			return f, nil
		}
		return "", fmt.Errorf("failure policy %q: want fail, passthrough or extractive", v)
	}
	if s = strings.TrimSpace(s); s == "" {
		return p, nil
	}
	if !strings.Contains(s, "=") {
		f, err := valid(s)
		return FailurePolicies{Responses: f, Messages: f}, err
	}
	for _, part := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(part, "=")
		f, err := valid(v)
		if err != nil {
			return p, err
		}
		switch strings.TrimSpace(k) {
		case "responses":
			p.Responses = f
		case "messages":
			p.Messages = f
		default:
			return p, fmt.Errorf("failure policy route %q: want responses or messages", k)
		}
	}
	return p, nil
}

func (s *Server) failurePolicy(d dialect) FailurePolicy {
	p := s.cfg.FailurePolicies.Responses
	if d == dialectAnthropic {
		p = s.cfg.FailurePolicies.Messages
	}
	if p == "" {
		return PolicyFail
	}
	return p
}

// extractiveBytes bounds an extractive fallback summary.
const extractiveBytes = 16 << 10

// summarise calls the summariser and applies the extractive policy to a failure, the compaction
// deadline running out included. Cancellation and a full queue are never papered over.
func (s *Server) summarise(ctx context.Context, d dialect, req summarizer.Request) (summarizer.Result, error) {
	res, err := s.cfg.Summarizer.Summarize(ctx, req)
	if err != nil {
		if te := compactionTimedOut(ctx); te != nil {
			err = te // the compaction's deadline, not the client, ended the call
		}
	}
	clientGone := ctx.Err() != nil && compactionTimedOut(ctx) == nil
	if err == nil || clientGone || errors.Is(err, summarizer.ErrBusy) || errors.Is(err, summarizer.ErrNothingToSummarize) {
		return res, err
	}
	if s.failurePolicy(d) != PolicyExtractive {
		return res, err
	}
	s.log.Warn("summariser unavailable: using an extractive summary", "api", d.String(), "err", err)
	s.metrics.fallback(d.String(), string(PolicyExtractive))
	entries := req.Entries
	if req.Previous != "" {
		entries = append([]string{"[previous summary] " + req.Previous}, entries...)
	}
	return summarizer.Result{Summary: summarizer.Extractive(entries, extractiveBytes), Model: "compactd-extractive", Usage: res.Usage, Calls: res.Calls}, nil
}

// passThroughOnFailure reports whether a failed threshold compaction should be forwarded
// uncompacted, and marks the response so the client can tell.
func (s *Server) passThroughOnFailure(w http.ResponseWriter, d dialect, err error) bool {
	if s.failurePolicy(d) != PolicyPassthrough || errors.Is(err, summarizer.ErrBusy) || errors.Is(err, context.Canceled) {
		return false
	}
	w.Header().Set("X-Compactd-Warning", "compaction skipped: the summariser is unavailable; the request was forwarded uncompacted")
	s.metrics.fallback(d.String(), string(PolicyPassthrough))
	return true
}

// DefaultCompactionTimeout bounds one compaction — every summariser attempt and backoff, every
// chunk, the wait for a speculative summary and the ledger's gap check — when
// Config.CompactionTimeout is zero. Five minutes is one full summariser call at the default
// per-call timeout (2m) plus a retry of it with backoff, or a chunked summary of a very long
// session, while a non-streaming turn still ends well inside the OpenAI and Anthropic SDKs'
// default 10-minute request timeout, so the client reads compactd's error and not its own
// timeout. Without it a hanging summariser held a turn for 3 attempts × 2 min + backoff.
const DefaultCompactionTimeout = 5 * time.Minute

// compactionTimeoutError is a compaction that ran out of its deadline (Config.CompactionTimeout).
type compactionTimeoutError struct{ limit time.Duration }

func (e *compactionTimeoutError) Error() string {
	return fmt.Sprintf("compaction did not finish within its deadline of %s", e.limit)
}

// compactionContext is the context a compaction summarises under: ctx bounded by the compaction
// deadline, whose expiry is told apart from the client going away by compactionTimedOut.
func (s *Server) compactionContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := s.cfg.CompactionTimeout
	if d == 0 {
		d = DefaultCompactionTimeout
	}
	if d < 0 {
		return context.WithCancel(ctx) // no deadline of compactd's own
	}
	return context.WithTimeoutCause(ctx, d, &compactionTimeoutError{limit: d})
}

// compactionTimedOut returns the deadline error when ctx ended because the compaction ran out of
// time, nil otherwise.
func compactionTimedOut(ctx context.Context) *compactionTimeoutError {
	var te *compactionTimeoutError
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &te) {
		return te
	}
	return nil
}

// timeoutMessage is what a client reads when the compaction ran out of time.
func timeoutMessage(te *compactionTimeoutError) string {
	return fmt.Sprintf("compactd could not compact the conversation within its compaction timeout of %s (--compaction-timeout): "+
		"the summariser LLM is too slow or not answering. Nothing was changed; retry the request.", te.limit)
}

// pushback is what a failed summarisation says about coming back: whether the summariser was
// rate limited (429) or overloaded (529, or an overloaded error code), and when to retry — its
// Retry-After, or, while the circuit breaker is open, the rest of the cooldown.
type pushback struct {
	rateLimited, overloaded bool
	after                   time.Duration
}

func pushbackOf(err error) pushback {
	var (
		co     *summarizer.CircuitOpenError
		e      *summarizer.Error
		status int
		code   string
		after  time.Duration
	)
	switch {
	case errors.As(err, &co):
		status, code, after = co.Status, co.Code, co.RetryAfter
	case errors.As(err, &e):
		status, code, after = e.Status, e.Code, e.RetryAfter
	default:
		return pushback{}
	}
	overloaded := status == 529 || strings.Contains(code, "overloaded")
	return pushback{rateLimited: status == http.StatusTooManyRequests && !overloaded, overloaded: overloaded, after: after}
}

// retryWhen renders the hint for a message (streams cannot carry a Retry-After header).
func (p pushback) retryWhen() string {
	if p.after <= 0 {
		return "retry the request shortly"
	}
	return fmt.Sprintf("retry the request after %ds", int((p.after+time.Second-1)/time.Second))
}

// why says what the summariser answered, for a message.
func (p pushback) why() string {
	switch {
	case p.rateLimited:
		return "the summariser LLM is rate limiting compactd (it answered 429)"
	case p.overloaded:
		return "the summariser LLM is overloaded"
	}
	return "the summariser LLM failed or timed out"
}

// busyOpenAI and busyAnthropic answer a full compaction queue.
func busyOpenAI() *api.OpenAIError {
	return &api.OpenAIError{Status: http.StatusTooManyRequests, Type: "requests", Code: "rate_limit_exceeded", RetryAfter: 2 * time.Second,
		Message: "compactd is running as many compactions as it allows and its queue is full; retry shortly."}
}

func busyAnthropic() *api.AnthropicError {
	return &api.AnthropicError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", RetryAfter: 2 * time.Second,
		Message: "compactd is running as many compactions as it allows and its queue is full; retry shortly."}
}
