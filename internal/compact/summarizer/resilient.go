package summarizer

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/internal/dialect"
)

// ErrBusy is returned at once when MaxConcurrent summarisations are in flight and MaxQueue
// callers are already waiting for a slot. Nothing was sent to the summariser; the proxy answers
// 429 so the client backs off instead of piling more compactions onto a saturated summariser.
var ErrBusy = errors.New("summarizer: too many compactions in flight")

// ErrCircuitOpen is returned at once while the circuit breaker is open: the summariser failed
// BreakerFailures times in a row and the cooldown has not passed. Nothing was sent; failing fast
// keeps an outage from multiplying load (every turn past the threshold would otherwise retry).
// Summarize returns it as a *CircuitOpenError, which matches it with errors.Is.
var ErrCircuitOpen = errors.New("summarizer: circuit breaker open")

// CircuitOpenError is ErrCircuitOpen with what a caller needs to tell its own client when to come
// back and why: the rest of the cooldown, and what the summariser answered on the failure that
// opened the breaker (a 429 there makes the outage a rate limit, not an error).
type CircuitOpenError struct {
	// RetryAfter is the time left before the breaker lets a probe through; while the half-open
	// probe is in flight (its outcome decides) it is minProbeWait.
	RetryAfter time.Duration
	// Status and Code are the summariser's HTTP status and error code on the failure that opened
	// the breaker (0 and "" when no response arrived, e.g. a timeout).
	Status int
	Code   string
	// Unreachable is that failure's Error.Unreachable: the summariser could not be reached.
	Unreachable bool
}

func (e *CircuitOpenError) Error() string { return ErrCircuitOpen.Error() }

// Is makes errors.Is(err, ErrCircuitOpen) true.
func (e *CircuitOpenError) Is(target error) bool { return target == ErrCircuitOpen }

// minProbeWait is the retry hint while the half-open probe is out: its outcome is near.
const minProbeWait = time.Second

// Defaults applied by NewResilient to zero ResilienceConfig fields (MaxConcurrent excepted: zero
// means unlimited there; DefaultMaxConcurrent is the cap compactd serve starts with).
const (
	DefaultMaxAttempts     = 3
	DefaultBaseBackoff     = 500 * time.Millisecond
	DefaultMaxBackoff      = 8 * time.Second
	DefaultBreakerFailures = 5
	DefaultBreakerCooldown = 30 * time.Second
	DefaultMaxConcurrent   = 8
	DefaultMaxQueue        = 32
)

// Breaker states, as State reports them.
const (
	StateClosed   = "closed"
	StateOpen     = "open"
	StateHalfOpen = "half_open"
)

// ResilienceConfig configures Resilient. Zero fields take the Default* values, except
// MaxConcurrent, where zero means unlimited: set it (e.g. to DefaultMaxConcurrent) to get a cap.
type ResilienceConfig struct {
	// MaxAttempts is the number of tries per Summarize, first one included (default 3; 1
	// disables retries).
	MaxAttempts int
	// BaseBackoff and MaxBackoff shape the wait before retry n (n = 1, 2, …): a uniformly random
	// duration in [0, min(MaxBackoff, BaseBackoff·2^(n-1))] ("full jitter", so that callers
	// failing together do not retry together). Defaults 500ms and 8s.
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	// BreakerFailures is the number of consecutive failed Summarize calls (after their retries)
	// that opens the breaker (default 5; negative disables the breaker).
	BreakerFailures int
	// BreakerCooldown is how long the breaker stays open before it lets one probe call through
	// (half-open). Default 30s.
	BreakerCooldown time.Duration
	// MaxConcurrent bounds the summarisations in flight, retries and their waits included
	// (0 = unlimited).
	MaxConcurrent int
	// MaxQueue bounds the callers waiting for a slot when MaxConcurrent are in flight; one more
	// gets ErrBusy at once (default 32; negative = no waiting at all).
	MaxQueue int

	// Test hooks; nil means the real clock, a real timer and math/rand/v2.
	now    func() time.Time
	sleep  func(ctx context.Context, d time.Duration) error
	jitter func(n int64) int64 // uniform in [0, n)
}

// Resilient wraps a Summarizer with the summariser failure policy's machinery: bounded retries
// with backoff on retryable failures, a circuit breaker, and a cap on concurrent
// summarisations with a bounded wait queue. It is safe for concurrent use.
//
// Its Summarize keeps the Summarizer contract and adds two fast failures, ErrBusy and
// ErrCircuitOpen, neither of which matches ErrUnavailable (nothing was tried).
type Resilient struct {
	inner   Summarizer
	cfg     ResilienceConfig
	slots   chan struct{} // nil when unlimited
	waiting atomic.Int64
	br      breaker
}

// NewResilient wraps inner. Invalid (negative) durations and attempt counts are replaced by
// their defaults rather than rejected, so a zero or partial config is always usable.
func NewResilient(inner Summarizer, cfg ResilienceConfig) *Resilient {
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.BaseBackoff <= 0 {
		cfg.BaseBackoff = DefaultBaseBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.BaseBackoff)
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = DefaultBreakerFailures
	}
	if cfg.BreakerCooldown <= 0 {
		cfg.BreakerCooldown = DefaultBreakerCooldown
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	if cfg.MaxQueue < 0 {
		cfg.MaxQueue = 0
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.sleep == nil {
		cfg.sleep = sleepCtx
	}
	if cfg.jitter == nil {
		cfg.jitter = rand.Int64N
	}
	r := &Resilient{inner: inner, cfg: cfg}
	if cfg.MaxConcurrent > 0 {
		r.slots = make(chan struct{}, cfg.MaxConcurrent)
	}
	r.br = breaker{threshold: cfg.BreakerFailures, cooldown: cfg.BreakerCooldown, now: cfg.now}
	return r
}

func (r *Resilient) api() dialect.Name { return APIOf(r.inner) }

// State reports the breaker state: StateClosed, StateOpen or StateHalfOpen. An open breaker
// whose cooldown has passed reports half-open, since the next call will be let through.
func (r *Resilient) State() string { return r.br.state() }

// InFlight reports the summarisations holding a slot and the callers waiting for one, for
// metrics. With no cap, inFlight is always 0.
func (r *Resilient) InFlight() (inFlight, waiting int) {
	return len(r.slots), int(r.waiting.Load())
}

// Summarize implements Summarizer. It fails fast with ErrCircuitOpen while the breaker is open
// and with ErrBusy when the queue is full; otherwise it takes a slot (waiting as long as ctx
// allows), then calls inner up to MaxAttempts times while the failure is a retryable *Error (an
// unreachable summariser is tried once).
// The returned Result sums Calls and Usage over every attempt, failed ones included, so the
// cost of a retried summarisation stays visible.
func (r *Resilient) Summarize(ctx context.Context, req Request) (Result, error) {
	// Checked before queueing so an outage never fills the queue.
	if err := r.br.rejects(); err != nil {
		return Result{}, err
	}
	if err := r.acquire(ctx); err != nil {
		return Result{}, err
	}
	defer r.release()
	ticket, err := r.br.admit()
	if err != nil {
		return Result{}, err
	}
	res, err := r.attempts(ctx, req, ticket)
	r.br.done(ticket, outcomeOf(ctx, err), err)
	return res, err
}

// attempts runs the retry loop for an admitted call.
func (r *Resilient) attempts(ctx context.Context, req Request, ticket ticket) (Result, error) {
	var total Result
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		res, err := r.inner.Summarize(ctx, req)
		total.Calls += res.Calls
		total.Usage.add(res.Usage)
		if res.Model != "" {
			total.Model = res.Model
		}
		if err == nil {
			total.Summary = res.Summary
			return total, nil
		}
		var e *Error
		if attempt >= r.cfg.MaxAttempts || ctx.Err() != nil || !errors.As(err, &e) || !e.Retryable {
			return total, err
		}
		// Another call opened the breaker meanwhile: the summariser is down, stop adding load.
		if r.br.stale(ticket) {
			return total, err
		}
		wait := r.backoff(attempt, e.RetryAfter)
		if dl, ok := ctx.Deadline(); ok && r.cfg.now().Add(wait).After(dl) {
			// The caller would be gone before the retry starts; answer now with the real cause.
			return total, err
		}
		if serr := r.cfg.sleep(ctx, wait); serr != nil {
			return total, serr
		}
	}
}

// backoff returns the wait before retry n (n ≥ 1). A Retry-After from the summariser replaces
// the jittered wait — the server knows when it will have capacity — but is bounded by
// 4·MaxBackoff so a hostile or confused header cannot park a turn for minutes.
func (r *Resilient) backoff(n int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, 4*r.cfg.MaxBackoff)
	}
	ceil := r.cfg.MaxBackoff
	if n-1 < 62 {
		if d := r.cfg.BaseBackoff << (n - 1); d > 0 && d < ceil {
			ceil = d
		}
	}
	return time.Duration(r.cfg.jitter(int64(ceil) + 1))
}

// acquire takes a concurrency slot, waiting while ctx lives if the queue has room.
func (r *Resilient) acquire(ctx context.Context) error {
	if r.slots == nil {
		return nil
	}
	select {
	case r.slots <- struct{}{}:
		return nil
	default:
	}
	if r.waiting.Add(1) > int64(r.cfg.MaxQueue) {
		r.waiting.Add(-1)
		return ErrBusy
	}
	defer r.waiting.Add(-1)
	select {
	case r.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Resilient) release() {
	if r.slots != nil {
		<-r.slots
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// outcome is what one admitted Summarize tells the breaker.
type outcome int

const (
	// neutral says nothing about the summariser's health: the caller went away, there was
	// nothing to summarise, or the summariser rejected this one request (a 400, or a 401 for a
	// client's forwarded key). Counting those would let one client open the breaker for all.
	neutral outcome = iota
	success
	failure
)

// outcomeOf classifies a finished Summarize for the breaker: only a retryable *Error (transport
// failure, timeout, 429, 5xx, empty output), still failing after the retries, and an unreachable
// summariser count as a failure.
func outcomeOf(ctx context.Context, err error) outcome {
	if err == nil {
		return success
	}
	if ctx.Err() != nil {
		return neutral
	}
	var e *Error
	if errors.As(err, &e) && (e.Retryable || e.Unreachable) {
		return failure
	}
	return neutral
}

// breaker is a consecutive-failure circuit breaker with an injected clock. Each state change
// starts a new generation; outcomes of calls admitted in an earlier generation are ignored, so
// a slow call that started before an outage cannot close a breaker that has since opened.
type breaker struct {
	threshold int // < 0: disabled
	cooldown  time.Duration
	now       func() time.Time

	mu       sync.Mutex
	st       string // "" means closed
	gen      uint64
	failures int
	openedAt time.Time
	probing  bool // half-open: the one probe is in flight
	// openStatus and openCode are the summariser's answer on the failure that opened the
	// breaker, for CircuitOpenError.
	openStatus      int
	openCode        string
	openUnreachable bool
}

// openErrorLocked is the CircuitOpenError for a call rejected now.
func (b *breaker) openErrorLocked() *CircuitOpenError {
	wait := b.openedAt.Add(b.cooldown).Sub(b.now())
	if b.st != StateOpen || wait < minProbeWait {
		wait = minProbeWait
	}
	return &CircuitOpenError{RetryAfter: wait, Status: b.openStatus, Code: b.openCode, Unreachable: b.openUnreachable}
}

// ticket records the generation a call was admitted in and whether it is the half-open probe.
type ticket struct {
	gen   uint64
	probe bool
}

func (b *breaker) state() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.st == StateOpen && !b.now().Before(b.openedAt.Add(b.cooldown)):
		return StateHalfOpen
	case b.st == "":
		return StateClosed
	}
	return b.st
}

// rejects is the cheap pre-queue check: a *CircuitOpenError while open and cooling down, or
// half-open with the probe already out; nil otherwise.
func (b *breaker) rejects() error {
	if b.threshold < 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.st == StateOpen && b.now().Before(b.openedAt.Add(b.cooldown)),
		b.st == StateHalfOpen && b.probing:
		return b.openErrorLocked()
	}
	return nil
}

// admit lets a call through or returns ErrCircuitOpen. After the cooldown the first caller
// becomes the single half-open probe.
func (b *breaker) admit() (ticket, error) {
	if b.threshold < 0 {
		return ticket{}, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.st == StateOpen {
		if b.now().Before(b.openedAt.Add(b.cooldown)) {
			return ticket{}, b.openErrorLocked()
		}
		b.setLocked(StateHalfOpen)
	}
	if b.st == StateHalfOpen {
		if b.probing {
			return ticket{}, b.openErrorLocked()
		}
		b.probing = true
		return ticket{gen: b.gen, probe: true}, nil
	}
	return ticket{gen: b.gen}, nil
}

// stale reports whether the breaker has left the generation the ticket was admitted in.
func (b *breaker) stale(t ticket) bool {
	if b.threshold < 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gen != t.gen
}

// done records an admitted call's outcome; err is the call's error, kept when it opens the
// breaker.
func (b *breaker) done(t ticket, o outcome, err error) {
	if b.threshold < 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.gen != b.gen {
		return
	}
	if t.probe {
		b.probing = false
		switch o {
		case success:
			b.setLocked("")
		case failure:
			b.openLocked(err)
		}
		// neutral: stay half-open; the next caller probes.
		return
	}
	switch o {
	case success:
		b.failures = 0
	case failure:
		b.failures++
		if b.failures >= b.threshold {
			b.openLocked(err)
		}
	}
}

// openLocked opens the breaker, remembering what the summariser answered on err.
func (b *breaker) openLocked(err error) {
	b.setLocked(StateOpen)
	b.openStatus, b.openCode, b.openUnreachable = 0, "", false
	var e *Error
	if errors.As(err, &e) {
		b.openStatus, b.openCode, b.openUnreachable = e.Status, e.Code, e.Unreachable
	}
}

func (b *breaker) setLocked(st string) {
	b.st = st
	b.gen++
	b.failures = 0
	b.probing = false
	if st == StateOpen {
		b.openedAt = b.now()
	}
}
