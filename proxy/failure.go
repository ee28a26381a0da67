package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/compactd/compactd/api"
	"github.com/compactd/compactd/compact/summarizer"
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

func (s *Server) failurePolicy(apiName string) FailurePolicy {
	p := s.cfg.FailurePolicies.Responses
	if apiName == "anthropic" {
		p = s.cfg.FailurePolicies.Messages
	}
	if p == "" {
		return PolicyFail
	}
	return p
}

// extractiveBytes bounds an extractive fallback summary.
const extractiveBytes = 16 << 10

// summarise calls the summariser and applies the extractive policy to a failure. Cancellation and
// a full queue are never papered over.
func (s *Server) summarise(ctx context.Context, apiName string, req summarizer.Request) (summarizer.Result, error) {
	res, err := s.cfg.Summarizer.Summarize(ctx, req)
	if err == nil || ctx.Err() != nil || errors.Is(err, summarizer.ErrBusy) || errors.Is(err, summarizer.ErrNothingToSummarize) {
		return res, err
	}
	if s.failurePolicy(apiName) != PolicyExtractive {
		return res, err
	}
	s.log.Warn("summariser unavailable: using an extractive summary", "api", apiName, "err", err)
	s.metrics.fallback(apiName, string(PolicyExtractive))
	entries := req.Entries
	if req.Previous != "" {
		entries = append([]string{"[previous summary] " + req.Previous}, entries...)
	}
	return summarizer.Result{Summary: summarizer.Extractive(entries, extractiveBytes), Model: "compactd-extractive", Usage: res.Usage, Calls: res.Calls}, nil
}

// passThroughOnFailure reports whether a failed threshold compaction should be forwarded
// uncompacted, and marks the response so the client can tell.
func (s *Server) passThroughOnFailure(w http.ResponseWriter, apiName string, err error) bool {
	if s.failurePolicy(apiName) != PolicyPassthrough || errors.Is(err, summarizer.ErrBusy) || errors.Is(err, context.Canceled) {
		return false
	}
	w.Header().Set("X-Compactd-Warning", "compaction skipped: the summariser is unavailable; the request was forwarded uncompacted")
	s.metrics.fallback(apiName, string(PolicyPassthrough))
	return true
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
