package engine

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/memo"
)

var anthropicDialect = Dialect{Name: dialect.Messages, SealKind: "anthropic.compaction", Handoff: handoff.MessagesText, Memo: true}

var chatDialect = Dialect{Name: dialect.Chat, SealKind: "openai.chat.compaction", Handoff: handoff.Text, Memo: true, UserMessage: api.ChatUserMessage}

// failingSum fails every summarisation with err, reporting the call it made.
func failingSum(err error) *scriptSum {
	return &scriptSum{answer: func(context.Context, summarizer.Request) (summarizer.Result, error) {
		return summarizer.Result{Calls: 1, Usage: summarizer.Usage{InputTokens: 7}}, err
	}}
}

// fallbacks is what obs counted of failure policies.
func fallbacks(obs *recObs) []string {
	var out []string
	for _, s := range obs.all() {
		if strings.HasPrefix(s, "fallback:") {
			out = append(out, s)
		}
	}
	return out
}

// A failing summariser meets its dialect's failure policy: fail returns the error (nothing
// forwarded, nothing made); passthrough returns it too, and PassThrough tells the adapter to
// forward the turn uncompacted; extractive makes the compaction from a deterministic summary.
// A full queue and "nothing to summarise" are never papered over, whatever the policy.
func TestCompactFailurePolicies(t *testing.T) {
	down := &summarizer.Error{Status: 503, Retryable: true, Err: errors.New("503 Service Unavailable")}
	circuit := &summarizer.CircuitOpenError{RetryAfter: 20 * time.Second, Status: 503}
	items := []api.Item{
		msg("user", "Please rename the parser package to lexer. "+words(1000)),
		msg("assistant", words(3000)),
		msg("user", "USER-LAST: now fix the tests"),
	}
	policies := func(r, m FailurePolicy) *FailurePolicies {
		return &FailurePolicies{dialect.Responses: r, dialect.Messages: m}
	}
	withChat := func(p *FailurePolicies, c FailurePolicy) *FailurePolicies { (*p)[dialect.Chat] = c; return p }
	tests := []struct {
		name        string
		policies    *FailurePolicies // nil: no policy function configured
		dialect     Dialect
		err         error
		wantErr     error // nil: an extractive compaction is made
		passThrough bool
		fallback    string // what is counted, "" nothing
	}{
		{"fail", policies(PolicyFail, PolicyExtractive), responsesDialect, down, summarizer.ErrUnavailable, false, ""},
		{"no policy configured: fail", nil, responsesDialect, down, summarizer.ErrUnavailable, false, ""},
		{"an unset policy: fail", policies("", ""), anthropicDialect, down, summarizer.ErrUnavailable, false, ""},
		{"passthrough", policies(PolicyPassthrough, PolicyFail), responsesDialect, down, summarizer.ErrUnavailable, true, "fallback:responses/passthrough"},
		{"extractive", policies(PolicyExtractive, PolicyFail), responsesDialect, down, nil, false, "fallback:responses/extractive"},
		{"extractive, circuit open", policies(PolicyExtractive, PolicyFail), responsesDialect, circuit, nil, false, "fallback:responses/extractive"},
		{"messages follows the Messages policy", policies(PolicyFail, PolicyExtractive), anthropicDialect, down, nil, false, "fallback:messages/extractive"},
		{"chat follows the Responses policy", policies(PolicyExtractive, PolicyFail), chatDialect, down, nil, false, "fallback:chat/extractive"},
		{"chat follows the Responses policy: fail", policies(PolicyFail, PolicyExtractive), chatDialect, down, summarizer.ErrUnavailable, false, ""},
		{"chat= wins over the Responses policy", withChat(policies(PolicyExtractive, PolicyExtractive), PolicyPassthrough), chatDialect, down, summarizer.ErrUnavailable, true, "fallback:chat/passthrough"},
		{"extractive never covers a full queue", policies(PolicyExtractive, PolicyFail), responsesDialect, summarizer.ErrBusy, summarizer.ErrBusy, false, ""},
		{"passthrough never forwards past a full queue", policies(PolicyPassthrough, PolicyFail), responsesDialect, summarizer.ErrBusy, summarizer.ErrBusy, false, ""},
		{"extractive does not cover nothing to summarise", policies(PolicyExtractive, PolicyFail), responsesDialect, summarizer.ErrNothingToSummarize, summarizer.ErrNothingToSummarize, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sum := failingSum(tt.err)
			obs := &recObs{}
			arch := &recArchive{}
			e, _ := testEngine(t, sum, func(c *Config) {
				c.Observer, c.Archive = obs, arch
				if tt.policies != nil {
					c.FailurePolicy = tt.policies.For
				}
			})
			in := request(e, items, 64_000)
			in.Dialect, in.Tenant = tt.dialect, "t1"
			c, err := e.Compact(context.Background(), in)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || c != nil {
					t.Fatalf("Compact = %v, %v; want %v", c != nil, err, tt.wantErr)
				}
				if len(arch.segments()) != 0 {
					t.Error("a failed compaction was archived")
				}
				if got := e.PassThrough(tt.dialect.Name, err); got != tt.passThrough {
					t.Errorf("PassThrough = %v, want %v", got, tt.passThrough)
				}
			} else {
				if err != nil {
					t.Fatalf("the extractive policy did not cover the failure: %v", err)
				}
				if want := summarizer.Extractive(sum.requests()[0].Entries, extractiveBytes); c.Summary != want || !strings.Contains(c.Summary, "USER-LAST") {
					t.Errorf("summary %.120q, want the extractive one", c.Summary)
				}
				o := openOK(t, e, c, tt.dialect.SealKind, "t1")
				if o.Payload.Model != "compactd-extractive" || o.Payload.Summary != c.Summary {
					t.Errorf("sealed model %q", o.Payload.Model)
				}
				if len(arch.segments()) != 1 {
					t.Errorf("%d segments archived, want 1", len(arch.segments()))
				}
			}
			var want []string
			if tt.fallback != "" {
				want = []string{tt.fallback}
			}
			if got := fallbacks(obs); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("fallbacks counted %v, want %v", got, want)
			}
		})
	}
}

// The compaction deadline against the client going away: a summariser that outlasts the
// deadline is a *TimeoutError (covered by extractive, forwarded by passthrough); a client that
// cancels is its context's error, which no policy papers over. The summariser here answers as
// the real one does when its context ends: with the context's error.
func TestCompactDeadlineAgainstClientCancel(t *testing.T) {
	const deadline = 20 * time.Millisecond
	items := []api.Item{msg("user", words(1000)), msg("assistant", words(3000)), msg("user", "USER-LAST: go on")}
	tests := []struct {
		name        string
		timeout     time.Duration
		cancel      bool // the client goes away once the summariser has started
		policy      FailurePolicy
		wantTimeout bool
		wantErr     error // with !wantTimeout; nil: a compaction is made
		passThrough bool
	}{
		{"past the deadline, fail", deadline, false, PolicyFail, true, nil, false},
		{"past the deadline, passthrough", deadline, false, PolicyPassthrough, true, nil, true},
		{"past the deadline, extractive", deadline, false, PolicyExtractive, false, nil, false},
		{"the client gone, no deadline", -1, true, PolicyExtractive, false, context.Canceled, false},
		{"the client gone before the deadline, extractive", time.Hour, true, PolicyExtractive, false, context.Canceled, false},
		{"the client gone before the deadline, passthrough", time.Hour, true, PolicyPassthrough, false, context.Canceled, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sum := &scriptSum{answer: func(sctx context.Context, _ summarizer.Request) (summarizer.Result, error) {
				if tt.cancel {
					cancel()
				}
				<-sctx.Done()
				return summarizer.Result{}, sctx.Err()
			}}
			arch := &recArchive{}
			obs := &recObs{}
			e, _ := testEngine(t, sum, func(c *Config) {
				c.CompactionTimeout, c.Archive, c.Observer = tt.timeout, arch, obs
				c.FailurePolicy = FailurePolicies{dialect.Responses: tt.policy}.For
			})
			in := request(e, items, 64_000)
			in.Tenant = "t1"
			c, err := e.Compact(ctx, in)
			var te *TimeoutError
			if got := errors.As(err, &te); got != tt.wantTimeout {
				t.Fatalf("err = %v; a deadline error: %v, want %v", err, got, tt.wantTimeout)
			}
			switch {
			case tt.wantTimeout:
				if te.Limit != tt.timeout || !strings.Contains(te.Message(), "--compaction-timeout") || !strings.Contains(te.Error(), tt.timeout.String()) {
					t.Errorf("deadline error %q, message %q", te.Error(), te.Message())
				}
				if errors.Is(err, context.Canceled) {
					t.Error("the deadline is reported as the client's cancellation")
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
			default:
				if err != nil {
					t.Fatalf("Compact: %v", err)
				}
				if !strings.Contains(c.Summary, "USER-LAST") || len(arch.segments()) != 1 {
					t.Errorf("extractive summary %.80q, %d segments", c.Summary, len(arch.segments()))
				}
				openOK(t, e, c, responsesDialect.SealKind, "t1")
			}
			// Only a deadline is covered by the extractive summary; a client gone is not (its
			// compaction is never made, so never archived either).
			wantExtractive := tt.policy == PolicyExtractive && !tt.wantTimeout && tt.wantErr == nil
			if got := obs.has("fallback:responses/extractive"); got != wantExtractive {
				t.Errorf("extractive fallback counted: %v, want %v", got, wantExtractive)
			}
			if err != nil {
				if strings.HasPrefix(err.Error(), "archive:") {
					t.Errorf("the compaction went on to archive: %v", err)
				}
				if got := e.PassThrough(dialect.Responses, err); got != tt.passThrough {
					t.Errorf("PassThrough = %v, want %v", got, tt.passThrough)
				}
				if len(arch.segments()) != 0 {
					t.Error("a failed compaction was archived")
				}
			}
		})
	}
}

// A summary made in time is not lost to the clock: the deadline runs out in the gap check, which
// is then left out, and the compaction is still archived, sealed and recorded under the caller's
// context.
func TestCompactSummaryInTimeOutlivesTheDeadline(t *testing.T) {
	gapCtx := make(chan context.Context, 1)
	sum := &scriptSum{answer: func(ctx context.Context, req summarizer.Request) (summarizer.Result, error) {
		if !isGapCheck(req) {
			return summarizer.Result{Summary: "the listener moved to port 7431", Model: "sum-model"}, nil
		}
		gapCtx <- ctx
		<-ctx.Done()
		return summarizer.Result{}, ctx.Err()
	}}
	arch := &recArchive{}
	obs := &recObs{}
	e, _ := testEngine(t, sum, func(c *Config) {
		c.CompactionTimeout, c.LedgerBytes, c.GapCheck = 20*time.Millisecond, 4096, true
		c.Archive, c.Memo, c.Observer = arch, memo.NewLocal(0, time.Hour), obs
	})
	items := []api.Item{msg("user", "Let's use port 7431. "+words(1000)), msg("assistant", words(3000)), msg("user", "go on")}
	in := request(e, items, 64_000)
	in.Tenant, in.Conversation = "t1", "conv"
	in.Memory, in.Covers = e.Remembered(context.Background(), responsesDialect, Scope{Tenant: "t1", Conversation: "conv"}, rawItems(items)), len(items)
	c, err := e.Compact(context.Background(), in)
	if err != nil {
		t.Fatalf("a summary made in time was lost: %v", err)
	}
	var te *TimeoutError
	if ctx := <-gapCtx; !errors.As(context.Cause(ctx), &te) {
		t.Fatalf("the gap check did not end at the deadline: %v", context.Cause(ctx))
	}
	if c.Summary != "the listener moved to port 7431" || c.Ledger == "" || strings.Contains(c.Ledger, "Gap check") {
		t.Errorf("summary %q, ledger %q", c.Summary, c.Ledger)
	}
	if len(arch.segments()) != 1 || c.Payload.Archive == nil {
		t.Errorf("%d segments archived, payload reference %v", len(arch.segments()), c.Payload.Archive)
	}
	openOK(t, e, c, responsesDialect.SealKind, "t1")
	if !obs.has("memo:recorded") {
		t.Error("the compaction was not recorded in the memo")
	}
}

// The wait for a speculative summary is bounded by the compaction deadline too: the crossing turn
// gives up on a job that outlasts it, cancels it, and reports the deadline.
func TestCompactDeadlineBoundsTheSpeculativeWait(t *testing.T) {
	jobCtx := make(chan context.Context, 1)
	sum := &scriptSum{answer: func(ctx context.Context, req summarizer.Request) (summarizer.Result, error) {
		if len(req.Entries) == 4 { // the speculative prefix
			jobCtx <- ctx
		}
		<-ctx.Done()
		return summarizer.Result{}, ctx.Err()
	}}
	obs := &recObs{}
	e, _ := testEngine(t, sum, func(c *Config) {
		c.CompactionTimeout, c.Observer = 20*time.Millisecond, obs
		c.Speculative = SpeculativeConfig{Fraction: 0.5}
	})
	below, crossing := specTurns()
	e.Speculate(SpecRequest{Dialect: responsesDialect, Tenant: "t1", Model: "m", Units: below, Retain: 64_000, Total: 9000, Limit: 10_000})
	if !obs.has("spec:started") {
		t.Fatal("no speculation started")
	}
	job := <-jobCtx // the job is running
	in := request(e, crossing, 64_000)
	in.Tenant, in.Speculate = "t1", true
	_, err := e.Compact(context.Background(), in)
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v, want the deadline", err)
	}
	if obs.hasPrefix("spec:hit") {
		t.Error("a speculative summary that never came was used")
	}
	if job.Err() == nil {
		t.Error("the job given up on was not cancelled")
	}
	e.spec.mu.Lock()
	left := len(e.spec.entries)
	e.spec.mu.Unlock()
	if left != 0 {
		t.Errorf("%d speculative entries left: the job given up on was not taken out", left)
	}
}

func TestParseFailurePolicies(t *testing.T) {
	tests := []struct {
		in      string
		want    FailurePolicies
		wantErr bool
	}{
		{"", FailurePolicies{dialect.Responses: PolicyFail, dialect.Messages: PolicyFail}, false},
		{"extractive", FailurePolicies{dialect.Responses: PolicyExtractive, dialect.Messages: PolicyExtractive, dialect.Chat: PolicyExtractive}, false},
		{" passthrough ", FailurePolicies{dialect.Responses: PolicyPassthrough, dialect.Messages: PolicyPassthrough, dialect.Chat: PolicyPassthrough}, false},
		{"responses=extractive", FailurePolicies{dialect.Responses: PolicyExtractive, dialect.Messages: PolicyFail}, false},
		{"messages=passthrough, responses=extractive", FailurePolicies{dialect.Responses: PolicyExtractive, dialect.Messages: PolicyPassthrough}, false},
		{"chat=passthrough", FailurePolicies{dialect.Responses: PolicyFail, dialect.Messages: PolicyFail, dialect.Chat: PolicyPassthrough}, false},
		{"responses=extractive,chat=fail", FailurePolicies{dialect.Responses: PolicyExtractive, dialect.Messages: PolicyFail, dialect.Chat: PolicyFail}, false},
		{"retry", nil, true},
		{"responses=retry", nil, true},
		{"openai=fail", nil, true},    // a provider, not a dialect
		{"anthropic=fail", nil, true}, // a provider, not a dialect
		{"responses=fail,responses=extractive", nil, true},
		{"responses=fail,", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseFailurePolicies(tt.in)
		if (err != nil) != tt.wantErr || (!tt.wantErr && !maps.Equal(got, tt.want)) {
			t.Errorf("ParseFailurePolicies(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// For: a dialect the policies leave out fails, except chat, which follows responses.
func TestFailurePoliciesFor(t *testing.T) {
	for _, tt := range []struct {
		p    FailurePolicies
		d    dialect.Name
		want FailurePolicy
	}{
		{nil, dialect.Responses, PolicyFail},
		{nil, dialect.Chat, PolicyFail},
		{FailurePolicies{dialect.Responses: PolicyExtractive}, dialect.Chat, PolicyExtractive},
		{FailurePolicies{dialect.Responses: PolicyExtractive}, dialect.Messages, PolicyFail},
		{FailurePolicies{dialect.Responses: PolicyExtractive, dialect.Chat: PolicyPassthrough}, dialect.Chat, PolicyPassthrough},
		{FailurePolicies{dialect.Messages: PolicyPassthrough}, dialect.Messages, PolicyPassthrough},
		{FailurePolicies{dialect.Messages: PolicyPassthrough}, dialect.Responses, PolicyFail},
		{FailurePolicies{dialect.Responses: ""}, dialect.Responses, PolicyFail},
		{FailurePolicies{dialect.Responses: PolicyExtractive}, "openai", PolicyFail}, // not a dialect
	} {
		if got := tt.p.For(tt.d); got != tt.want {
			t.Errorf("%v.For(%q) = %q, want %q", tt.p, tt.d, got, tt.want)
		}
	}
}

// What a failure tells the client about coming back.
func TestPushbackOf(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		want      Pushback
		why, when string
	}{
		{"not a summariser error", errors.New("x"), Pushback{}, "failed or timed out", "shortly"},
		{"rate limited", &summarizer.Error{Status: 429, RetryAfter: 1500 * time.Millisecond}, Pushback{RateLimited: true, After: 1500 * time.Millisecond}, "rate limiting", "after 2s"},
		{"overloaded by status", &summarizer.Error{Status: 529}, Pushback{Overloaded: true}, "overloaded", "shortly"},
		{"a 429 that says overloaded", &summarizer.Error{Status: 429, Code: "overloaded_error"}, Pushback{Overloaded: true}, "overloaded", "shortly"},
		{"unreachable", &summarizer.Error{Unreachable: true}, Pushback{Unreachable: true}, "could not be reached", "shortly"},
		{"circuit open", &summarizer.CircuitOpenError{RetryAfter: 30 * time.Second, Status: 429}, Pushback{RateLimited: true, After: 30 * time.Second}, "rate limiting", "after 30s"},
	}
	for _, tt := range tests {
		got := PushbackOf(tt.err)
		if got != tt.want || !strings.Contains(got.Why(), tt.why) || !strings.Contains(got.RetryWhen(), tt.when) {
			t.Errorf("%s: %+v (%q, %q), want %+v (%q, %q)", tt.name, got, got.Why(), got.RetryWhen(), tt.want, tt.why, tt.when)
		}
	}
}

// Config.Summarizers gives a dialect its own summariser for every call of its compactions; the
// others use Config.Summarizer.
func TestCompactUsesTheDialectsSummarizer(t *testing.T) {
	general, messages := entriesSum(), entriesSum()
	e, _ := testEngine(t, general, func(c *Config) {
		c.Summarizers = map[dialect.Name]summarizer.Summarizer{dialect.Messages: messages, dialect.Responses: nil}
	})
	items := []api.Item{msg("user", words(1000)), msg("assistant", words(3000)), msg("user", "go on")}
	for _, d := range []Dialect{anthropicDialect, responsesDialect} {
		in := request(e, items, 64_000)
		in.Dialect = d
		if _, err := e.Compact(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	}
	if general.n() != 1 || messages.n() != 1 {
		t.Errorf("calls: general %d, anthropic's %d; want one each", general.n(), messages.n())
	}
}
