package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/dialect"
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

// FailurePolicies holds the policy of each dialect. A dialect it does not name fails (PolicyFail),
// except Chat, which follows Responses: the same OpenAI-compatible upstream and summariser.
type FailurePolicies map[dialect.Name]FailurePolicy

// ParseFailurePolicies reads --failure-policy: "POLICY" (every dialect) or a comma-separated
// "responses=POLICY,messages=POLICY,chat=POLICY" (a dialect left out fails; chat left out
// follows responses).
func ParseFailurePolicies(s string) (FailurePolicies, error) {
	valid := func(v string) (FailurePolicy, error) {
		switch f := FailurePolicy(strings.TrimSpace(v)); f {
		case PolicyFail, PolicyPassthrough, PolicyExtractive:
			return f, nil
		}
		return "", fmt.Errorf("failure policy %q: want fail, passthrough or extractive", strings.TrimSpace(v))
	}
	if s = strings.TrimSpace(s); s == "" {
		return FailurePolicies{dialect.Responses: PolicyFail, dialect.Messages: PolicyFail}, nil
	}
	if !strings.Contains(s, "=") {
		f, err := valid(s)
		if err != nil {
			return nil, err
		}
		p := FailurePolicies{}
		for _, d := range dialect.All {
			p[d] = f
		}
		return p, nil
	}
	p := FailurePolicies{dialect.Responses: PolicyFail, dialect.Messages: PolicyFail}
	seen := map[dialect.Name]bool{}
	for _, part := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(part, "=")
		d, err := dialect.Parse(k)
		if err != nil {
			return nil, fmt.Errorf("failure policy route %q: want responses, messages or chat", strings.TrimSpace(k))
		}
		if seen[d] {
			return nil, fmt.Errorf("failure policy route %q given twice", d)
		}
		seen[d] = true
		f, err := valid(v)
		if err != nil {
			return nil, err
		}
		p[d] = f
	}
	return p, nil
}

// For is the policy of dialect d.
func (p FailurePolicies) For(d dialect.Name) FailurePolicy {
	f, ok := p[d]
	if !ok && d == dialect.Chat {
		f = p[dialect.Responses]
	}
	if f == "" {
		return PolicyFail
	}
	return f
}

func (e *Engine) failurePolicy(d dialect.Name) FailurePolicy {
	if e.cfg.FailurePolicy == nil {
		return PolicyFail
	}
	return e.cfg.FailurePolicy(d)
}

// extractiveBytes bounds an extractive fallback summary.
const extractiveBytes = 16 << 10

// summarise calls the summariser and applies the extractive policy to a failure, the compaction
// deadline running out included. Cancellation and a full queue are never papered over.
func (e *Engine) summarise(ctx context.Context, d dialect.Name, req summarizer.Request) (summarizer.Result, error) {
	res, err := e.summarizer(d).Summarize(ctx, req)
	if err != nil {
		if te := compactionTimedOut(ctx); te != nil {
			err = te // the compaction's deadline, not the client, ended the call
		}
	}
	if err == nil {
		e.capSummary(d, &res)
		return res, nil
	}
	clientGone := ctx.Err() != nil && compactionTimedOut(ctx) == nil
	if clientGone || errors.Is(err, summarizer.ErrBusy) || errors.Is(err, summarizer.ErrNothingToSummarize) {
		return res, err
	}
	if e.failurePolicy(d) != PolicyExtractive {
		return res, err
	}
	e.log.Warn("summariser unavailable: using an extractive summary", "api", string(d), "err", err)
	e.obs.Fallback(d, string(PolicyExtractive))
	entries := req.Entries
	if req.Previous != "" {
		entries = append([]string{"[previous summary] " + req.Previous}, entries...)
	}
	return summarizer.Result{Summary: summarizer.Extractive(entries, extractiveBytes), Model: "compactd-extractive", Usage: res.Usage, Calls: res.Calls}, nil
}

// PassThrough reports whether a failed threshold compaction of dialect d should be forwarded
// uncompacted (the passthrough policy; never for a full queue or a client gone), and counts it.
func (e *Engine) PassThrough(d dialect.Name, err error) bool {
	if e.failurePolicy(d) != PolicyPassthrough || errors.Is(err, summarizer.ErrBusy) || errors.Is(err, context.Canceled) {
		return false
	}
	e.obs.Fallback(d, string(PolicyPassthrough))
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

// TimeoutError is a compaction that ran out of its deadline (Config.CompactionTimeout).
type TimeoutError struct{ Limit time.Duration }

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("compaction did not finish within its deadline of %s", e.Limit)
}

// compactionContext is the context a compaction summarises under: ctx bounded by the compaction
// deadline, whose expiry is told apart from the client going away by compactionTimedOut.
func (e *Engine) compactionContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := e.cfg.CompactionTimeout
	if d == 0 {
		d = DefaultCompactionTimeout
	}
	if d < 0 {
		return context.WithCancel(ctx) // no deadline of compactd's own
	}
	return context.WithTimeoutCause(ctx, d, &TimeoutError{Limit: d})
}

// compactionTimedOut returns the deadline error when ctx ended because the compaction ran out of
// time, nil otherwise.
func compactionTimedOut(ctx context.Context) *TimeoutError {
	var te *TimeoutError
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &te) {
		return te
	}
	return nil
}

// Message is what a client reads when the compaction ran out of time.
func (te *TimeoutError) Message() string {
	return fmt.Sprintf("compactd could not compact the conversation within its compaction timeout of %s (--compaction-timeout): "+
		"the summariser LLM is too slow or not answering. Nothing was changed; retry the request.", te.Limit)
}

// pushback is what a failed summarisation says about coming back: whether the summariser was
// rate limited (429) or overloaded (529, or an overloaded error code) or could not be reached at
// all, and when to retry — its Retry-After, or, while the circuit breaker is open, the rest of the
// cooldown.
type Pushback struct {
	RateLimited, Overloaded, Unreachable bool
	After                                time.Duration
}

// PushbackOf reads what a summariser failure says about coming back.
func PushbackOf(err error) Pushback {
	var (
		co          *summarizer.CircuitOpenError
		e           *summarizer.Error
		status      int
		code        string
		after       time.Duration
		unreachable bool
	)
	switch {
	case errors.As(err, &co):
		status, code, after, unreachable = co.Status, co.Code, co.RetryAfter, co.Unreachable
	case errors.As(err, &e):
		status, code, after, unreachable = e.Status, e.Code, e.RetryAfter, e.Unreachable
	default:
		return Pushback{}
	}
	overloaded := status == 529 || strings.Contains(code, "overloaded")
	return Pushback{RateLimited: status == http.StatusTooManyRequests && !overloaded, Overloaded: overloaded, Unreachable: unreachable, After: after}
}

// RetryWhen renders the hint for a message (streams cannot carry a Retry-After header).
func (p Pushback) RetryWhen() string {
	if p.After <= 0 {
		return "retry the request shortly"
	}
	return fmt.Sprintf("retry the request after %ds", int((p.After+time.Second-1)/time.Second))
}

// Why says what the summariser answered, for a message.
func (p Pushback) Why() string {
	switch {
	case p.RateLimited:
		return "the summariser LLM is rate limiting compactd (it answered 429)"
	case p.Overloaded:
		return "the summariser LLM is overloaded"
	case p.Unreachable:
		return "the summariser LLM could not be reached: its host name does not resolve or nothing answers at its address; check the summariser URL compactd logged at start"
	}
	return "the summariser LLM failed or timed out"
}
