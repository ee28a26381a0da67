package summarizer

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// step is one scripted answer of the fake inner Summarizer.
type step struct {
	res Result
	err error
}

// scripted is a fake Summarizer answering from a script (the last step repeats). When hold is
// set, every call announces itself on started and then blocks until hold yields or ctx ends,
// which lets tests keep calls in flight without timing.
type scripted struct {
	mu      sync.Mutex
	steps   []step
	calls   int
	hold    chan struct{}
	started chan struct{}

	inFlight, peak atomic.Int64
}

func (s *scripted) Summarize(ctx context.Context, _ Request) (Result, error) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	s.mu.Lock()
	i := s.calls
	s.calls++
	st := step{res: Result{Summary: "ok", Calls: 1}}
	if len(s.steps) > 0 {
		st = s.steps[min(i, len(s.steps)-1)]
	}
	s.mu.Unlock()
	if s.hold != nil {
		s.started <- struct{}{}
		select {
		case <-s.hold:
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}
	return st.res, st.err
}

func (s *scripted) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// fakeClock is an injected clock whose sleep records the wait and advances time at once.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	sleeps []time.Duration
}

// newFakeClock starts an hour ahead of the real clock, so a context deadline set on the fake
// clock is still in the real future and the context stays live for the test.
func newFakeClock() *fakeClock { return &fakeClock{t: time.Now().Add(time.Hour)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.t = c.t.Add(d)
	return nil
}

func (c *fakeClock) recorded() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// defaultConfig is the documented defaults, the concurrency cap included.
func defaultConfig() ResilienceConfig {
	return ResilienceConfig{
		MaxAttempts:     DefaultMaxAttempts,
		BaseBackoff:     DefaultBaseBackoff,
		MaxBackoff:      DefaultMaxBackoff,
		BreakerFailures: DefaultBreakerFailures,
		BreakerCooldown: DefaultBreakerCooldown,
		MaxConcurrent:   DefaultMaxConcurrent,
		MaxQueue:        DefaultMaxQueue,
	}
}

// testConfig returns a config on the fake clock with jitter pinned to its maximum, so waits
// equal the backoff ceiling.
func testConfig(c *fakeClock) ResilienceConfig {
	cfg := defaultConfig()
	cfg.now, cfg.sleep = c.now, c.sleep
	cfg.jitter = func(n int64) int64 { return n - 1 }
	return cfg
}

func failed(status int, retryable bool, retryAfter time.Duration) step {
	return step{
		res: Result{Calls: 1, Usage: Usage{InputTokens: 100, TotalTokens: 100}},
		err: &Error{Status: status, Retryable: retryable, RetryAfter: retryAfter, Err: errors.New("boom")},
	}
}

var okStep = step{res: Result{Summary: "summary", Model: "m", Calls: 1, Usage: Usage{InputTokens: 100, OutputTokens: 10, TotalTokens: 110}}}

func TestResilientRetries(t *testing.T) {
	tests := []struct {
		name      string
		steps     []step
		cfg       func(*ResilienceConfig)
		deadline  time.Duration // caller deadline on the fake clock; 0 = none
		wantCalls int
		wantErr   error // errors.Is target; nil = success
		wantSleep []time.Duration
		wantUsage int64 // summed InputTokens
	}{
		{name: "first try", steps: []step{okStep}, wantCalls: 1, wantUsage: 100},
		{
			name:  "503 then success",
			steps: []step{failed(503, true, 0), okStep}, wantCalls: 2,
			wantSleep: []time.Duration{500 * time.Millisecond}, wantUsage: 200,
		},
		{
			name:  "gives up after MaxAttempts",
			steps: []step{failed(503, true, 0)}, wantCalls: 3, wantErr: ErrUnavailable,
			wantSleep: []time.Duration{500 * time.Millisecond, time.Second}, wantUsage: 300,
		},
		{
			name:  "MaxAttempts 5 doubles up to MaxBackoff",
			steps: []step{failed(500, true, 0)}, cfg: func(c *ResilienceConfig) { c.MaxAttempts = 5; c.MaxBackoff = 3 * time.Second },
			wantCalls: 5, wantErr: ErrUnavailable, wantUsage: 500,
			wantSleep: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 3 * time.Second},
		},
		{name: "non-retryable 400 passes through", steps: []step{failed(400, false, 0), okStep}, wantCalls: 1, wantErr: ErrUnavailable, wantUsage: 100},
		{name: "nothing to summarize is not retried", steps: []step{{err: ErrNothingToSummarize}, okStep}, wantCalls: 1, wantErr: ErrNothingToSummarize},
		{name: "plain error is not retried", steps: []step{{err: errors.New("odd")}, okStep}, wantCalls: 1, wantErr: errors.New("odd")},
		{
			name:  "MaxAttempts 1 disables retries",
			steps: []step{failed(503, true, 0), okStep}, cfg: func(c *ResilienceConfig) { c.MaxAttempts = 1 },
			wantCalls: 1, wantErr: ErrUnavailable, wantUsage: 100,
		},
		{
			name:  "Retry-After honoured",
			steps: []step{failed(429, true, 3*time.Second), okStep}, wantCalls: 2,
			wantSleep: []time.Duration{3 * time.Second}, wantUsage: 200,
		},
		{
			name:  "Retry-After bounded by 4 MaxBackoff",
			steps: []step{failed(429, true, 10*time.Minute), okStep}, wantCalls: 2,
			wantSleep: []time.Duration{32 * time.Second}, wantUsage: 200,
		},
		{
			name:  "no retry the caller's deadline would not outlive",
			steps: []step{failed(429, true, 5*time.Second), okStep}, deadline: 2 * time.Second,
			wantCalls: 1, wantErr: ErrUnavailable, wantUsage: 100,
		},
		{
			name:  "retry within the caller's deadline",
			steps: []step{failed(429, true, time.Second), okStep}, deadline: 2 * time.Second,
			wantCalls: 2, wantSleep: []time.Duration{time.Second}, wantUsage: 200,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			cfg := testConfig(clk)
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			inner := &scripted{steps: tt.steps}
			r := NewResilient(inner, cfg)
			ctx := context.Background()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				// The real deadline is far off; only the fake clock's view of it matters.
				ctx, cancel = context.WithDeadline(ctx, clk.now().Add(tt.deadline))
				defer cancel()
			}
			res, err := r.Summarize(ctx, Request{})
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("err = %v, want success", err)
			case tt.wantErr != nil && err == nil:
				t.Fatalf("succeeded, want %v", tt.wantErr)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr) && err.Error() != tt.wantErr.Error():
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got := inner.count(); got != tt.wantCalls {
				t.Errorf("inner calls = %d, want %d", got, tt.wantCalls)
			}
			if res.Calls != tt.wantCalls && tt.wantUsage != 0 {
				t.Errorf("Result.Calls = %d, want %d", res.Calls, tt.wantCalls)
			}
			if res.Usage.InputTokens != tt.wantUsage {
				t.Errorf("summed InputTokens = %d, want %d", res.Usage.InputTokens, tt.wantUsage)
			}
			if err == nil && res.Summary != "summary" {
				t.Errorf("Summary = %q", res.Summary)
			}
			if got := clk.recorded(); !equalDurations(got, tt.wantSleep) {
				t.Errorf("sleeps = %v, want %v", got, tt.wantSleep)
			}
		})
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestResilientBackoffJitter(t *testing.T) {
	const attempts = 8
	base, maxB := 100*time.Millisecond, 2*time.Second
	ceiling := func(n int) time.Duration { return min(maxB, base<<(n-1)) }
	run := func(jitter func(int64) int64) []time.Duration {
		clk := newFakeClock()
		cfg := testConfig(clk)
		cfg.MaxAttempts, cfg.BaseBackoff, cfg.MaxBackoff = attempts, base, maxB
		cfg.jitter = jitter
		r := NewResilient(&scripted{steps: []step{failed(503, true, 0)}}, cfg)
		if _, err := r.Summarize(context.Background(), Request{}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("err = %v", err)
		}
		return clk.recorded()
	}
	seeded := func(seed uint64) func(int64) int64 {
		src := rand.New(rand.NewPCG(seed, seed+1))
		return src.Int64N
	}
	tests := []struct {
		name   string
		jitter func(int64) int64
		check  func(t *testing.T, n int, d time.Duration)
	}{
		{"lowest", func(int64) int64 { return 0 }, func(t *testing.T, n int, d time.Duration) {
			if d != 0 {
				t.Errorf("retry %d waited %v, want 0", n, d)
			}
		}},
		{"highest", func(n int64) int64 { return n - 1 }, func(t *testing.T, n int, d time.Duration) {
			if d != ceiling(n) {
				t.Errorf("retry %d waited %v, want ceiling %v", n, d, ceiling(n))
			}
		}},
		{"seeded", seeded(7), func(t *testing.T, n int, d time.Duration) {
			if d < 0 || d > ceiling(n) {
				t.Errorf("retry %d waited %v, outside [0, %v]", n, d, ceiling(n))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := run(tt.jitter)
			if len(got) != attempts-1 {
				t.Fatalf("%d waits, want %d", len(got), attempts-1)
			}
			for i, d := range got {
				tt.check(t, i+1, d)
			}
		})
	}
	a, b := run(seeded(42)), run(seeded(42))
	if !equalDurations(a, b) {
		t.Errorf("same seed gave different waits: %v vs %v", a, b)
	}
	distinct := map[time.Duration]bool{}
	for _, d := range a {
		distinct[d] = true
	}
	if len(distinct) < 2 {
		t.Errorf("seeded jitter produced no spread: %v", a)
	}
}

func TestResilientCancelDuringBackoff(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	sleeping := make(chan struct{})
	cfg.sleep = func(ctx context.Context, d time.Duration) error {
		close(sleeping)
		<-ctx.Done()
		return ctx.Err()
	}
	cfg.BreakerFailures = 1
	inner := &scripted{steps: []step{failed(503, true, 0), okStep}}
	r := NewResilient(inner, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-sleeping
		cancel()
	}()
	res, err := r.Summarize(ctx, Request{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if inner.count() != 1 || res.Usage.InputTokens != 100 {
		t.Errorf("calls = %d, usage = %d; want 1 and the failed attempt's 100", inner.count(), res.Usage.InputTokens)
	}
	if s := r.State(); s != StateClosed {
		t.Errorf("a cancelled call moved the breaker to %s", s)
	}
}

func TestSleepCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sleepCtx(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled sleep = %v", err)
	}
	if err := sleepCtx(context.Background(), 0); err != nil {
		t.Errorf("zero sleep = %v", err)
	}
	if err := sleepCtx(context.Background(), time.Nanosecond); err != nil {
		t.Errorf("short sleep = %v", err)
	}
}

func TestResilientBreaker(t *testing.T) {
	fail := failed(503, true, 0)
	type op struct {
		step    step          // what inner answers (ignored when the breaker rejects)
		advance time.Duration // clock advance before the call
		cancel  bool          // call with a cancelled context
		wantErr error
		state   string // State() after the call
	}
	tests := []struct {
		name string
		ops  []op
	}{
		{"opens after consecutive failures", []op{
			{step: fail, wantErr: ErrUnavailable, state: StateClosed},
			{step: fail, wantErr: ErrUnavailable, state: StateOpen},
			{step: okStep, wantErr: ErrCircuitOpen, state: StateOpen},
			{step: okStep, advance: 9 * time.Second, wantErr: ErrCircuitOpen, state: StateOpen},
		}},
		{"success resets the count", []op{
			{step: fail, wantErr: ErrUnavailable, state: StateClosed},
			{step: okStep, state: StateClosed},
			{step: fail, wantErr: ErrUnavailable, state: StateClosed},
			{step: fail, wantErr: ErrUnavailable, state: StateOpen},
		}},
		{"half-open probe success closes", []op{
			{step: fail, wantErr: ErrUnavailable},
			{step: fail, wantErr: ErrUnavailable, state: StateOpen},
			{advance: 10 * time.Second, step: okStep, state: StateClosed},
			{step: fail, wantErr: ErrUnavailable, state: StateClosed},
		}},
		{"half-open probe failure re-opens", []op{
			{step: fail, wantErr: ErrUnavailable},
			{step: fail, wantErr: ErrUnavailable, state: StateOpen},
			{advance: 10 * time.Second, step: fail, wantErr: ErrUnavailable, state: StateOpen},
			{step: okStep, wantErr: ErrCircuitOpen, state: StateOpen},
			{advance: 10 * time.Second, step: okStep, state: StateClosed},
		}},
		{"neutral outcomes do not count", []op{
			{step: fail, wantErr: ErrUnavailable},
			{step: failed(400, false, 0), wantErr: ErrUnavailable, state: StateClosed},
			{step: failed(401, false, 0), wantErr: ErrUnavailable, state: StateClosed},
			{step: step{err: ErrNothingToSummarize}, wantErr: ErrNothingToSummarize, state: StateClosed},
			{step: okStep, cancel: true, wantErr: context.Canceled, state: StateClosed},
			{step: fail, wantErr: ErrUnavailable, state: StateOpen},
		}},
		{"neutral probe stays half-open", []op{
			{step: fail, wantErr: ErrUnavailable},
			{step: fail, wantErr: ErrUnavailable, state: StateOpen},
			{advance: 10 * time.Second, step: failed(400, false, 0), wantErr: ErrUnavailable, state: StateHalfOpen},
			{step: okStep, state: StateClosed},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			cfg := testConfig(clk)
			cfg.MaxAttempts = 1
			cfg.BreakerFailures = 2
			cfg.BreakerCooldown = 10 * time.Second
			inner := &scripted{}
			r := NewResilient(inner, cfg)
			for i, o := range tt.ops {
				clk.advance(o.advance)
				inner.mu.Lock()
				inner.steps = []step{o.step}
				inner.calls = 0
				inner.mu.Unlock()
				ctx, cancel := context.WithCancel(context.Background())
				if o.cancel {
					cancel()
				}
				_, err := r.Summarize(ctx, Request{})
				cancel()
				if (o.wantErr == nil) != (err == nil) || (err != nil && !errors.Is(err, o.wantErr)) {
					t.Fatalf("op %d: err = %v, want %v", i, err, o.wantErr)
				}
				if errors.Is(err, ErrCircuitOpen) && inner.count() != 0 {
					t.Errorf("op %d: rejected call reached the summariser", i)
				}
				if o.state != "" && r.State() != o.state {
					t.Fatalf("op %d: state = %s, want %s", i, r.State(), o.state)
				}
			}
		})
	}
}

func TestResilientBreakerDisabled(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.MaxAttempts, cfg.BreakerFailures = 1, -1
	inner := &scripted{steps: []step{failed(503, true, 0)}}
	r := NewResilient(inner, cfg)
	for range 20 {
		if _, err := r.Summarize(context.Background(), Request{}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("err = %v", err)
		}
	}
	if inner.count() != 20 || r.State() != StateClosed {
		t.Errorf("calls = %d, state = %s; want 20, closed", inner.count(), r.State())
	}
}

// TestResilientHalfOpenSingleProbe holds the probe in flight and checks that nobody else gets
// through until it finishes.
func TestResilientHalfOpenSingleProbe(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.MaxAttempts, cfg.BreakerFailures, cfg.BreakerCooldown = 1, 1, time.Second
	inner := &scripted{steps: []step{failed(503, true, 0)}}
	r := NewResilient(inner, cfg)
	if _, err := r.Summarize(context.Background(), Request{}); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	if s := r.State(); s != StateHalfOpen {
		t.Fatalf("state after cooldown = %s", s)
	}
	inner.mu.Lock()
	inner.steps = []step{okStep}
	inner.hold, inner.started = make(chan struct{}), make(chan struct{}, 1)
	inner.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := r.Summarize(context.Background(), Request{})
		done <- err
	}()
	<-inner.started
	for i := range 5 {
		if _, err := r.Summarize(context.Background(), Request{}); !errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("call %d during probe: err = %v, want ErrCircuitOpen", i, err)
		}
	}
	close(inner.hold)
	if err := <-done; err != nil {
		t.Fatalf("probe: %v", err)
	}
	if s := r.State(); s != StateClosed {
		t.Errorf("state after probe success = %s", s)
	}
}

// TestResilientBreakerStaleOutcome checks that a call admitted before the breaker opened cannot
// move it by finishing late: its failure, landing after the breaker has re-closed, is ignored.
func TestResilientBreakerStaleOutcome(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.MaxAttempts, cfg.BreakerFailures, cfg.BreakerCooldown = 1, 1, time.Second
	slow := &scripted{steps: []step{failed(503, true, 0)}, hold: make(chan struct{}), started: make(chan struct{}, 1)}
	fast := &scripted{steps: []step{failed(503, true, 0), okStep}}
	var which atomic.Pointer[scripted]
	which.Store(slow)
	r := NewResilient(summarizerFunc(func(ctx context.Context, req Request) (Result, error) {
		return which.Load().Summarize(ctx, req)
	}), cfg)
	done := make(chan error, 1)
	go func() {
		_, err := r.Summarize(context.Background(), Request{})
		done <- err
	}()
	<-slow.started
	which.Store(fast)
	if _, err := r.Summarize(context.Background(), Request{}); !errors.Is(err, ErrUnavailable) || r.State() != StateOpen {
		t.Fatalf("err = %v, state = %s; want a failure that opens the breaker", err, r.State())
	}
	clk.advance(time.Second)
	if _, err := r.Summarize(context.Background(), Request{}); err != nil || r.State() != StateClosed {
		t.Fatalf("probe: err = %v, state = %s; want success, closed", err, r.State())
	}
	close(slow.hold)
	if err := <-done; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("slow call: %v", err)
	}
	if s := r.State(); s != StateClosed {
		t.Errorf("a stale failure moved the breaker to %s", s)
	}
}

// summarizerFunc adapts a function to Summarizer (test helper).
type summarizerFunc func(context.Context, Request) (Result, error)

func (f summarizerFunc) Summarize(ctx context.Context, req Request) (Result, error) {
	return f(ctx, req)
}

// waitFor spins (yielding, no sleeps) until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 10_000_000 {
			t.Fatalf("never reached: %s", what)
		}
		runtime.Gosched()
	}
}

func TestResilientConcurrencyCap(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.MaxConcurrent, cfg.MaxQueue = 2, 1
	inner := &scripted{steps: []step{okStep}, hold: make(chan struct{}), started: make(chan struct{}, 8)}
	r := NewResilient(inner, cfg)

	results := make(chan error, 8)
	call := func(ctx context.Context) {
		_, err := r.Summarize(ctx, Request{})
		results <- err
	}
	go call(context.Background())
	go call(context.Background())
	<-inner.started
	<-inner.started
	// The third caller queues.
	qctx, qcancel := context.WithCancel(context.Background())
	go call(qctx)
	waitFor(t, "one waiter", func() bool { _, w := r.InFlight(); return w == 1 })
	// The fourth finds the queue full. Should it queue instead, cancelling it makes that show
	// as context.Canceled rather than hanging the test.
	bctx, bcancel := context.WithCancel(context.Background())
	busy := make(chan error, 1)
	go func() {
		_, err := r.Summarize(bctx, Request{})
		busy <- err
	}()
	waitFor(t, "fourth caller answered or queued", func() bool { _, w := r.InFlight(); return len(busy) == 1 || w == 2 })
	bcancel()
	if err := <-busy; !errors.Is(err, ErrBusy) {
		t.Fatalf("over the queue: err = %v, want ErrBusy", err)
	}
	// The waiter gives up: its slot in the queue frees.
	qcancel()
	if err := <-results; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: err = %v", err)
	}
	waitFor(t, "queue empty", func() bool { _, w := r.InFlight(); return w == 0 })
	// A new waiter is admitted and runs once a slot frees.
	go call(context.Background())
	waitFor(t, "new waiter", func() bool { _, w := r.InFlight(); return w == 1 })
	if n, _ := r.InFlight(); n != 2 {
		t.Errorf("in flight = %d, want 2", n)
	}
	close(inner.hold)
	for range 3 {
		if err := <-results; err != nil {
			t.Errorf("held call: %v", err)
		}
	}
	if p := inner.peak.Load(); p > 2 {
		t.Errorf("peak concurrency %d over the cap of 2", p)
	}
	if r.State() != StateClosed {
		t.Errorf("ErrBusy or cancellation moved the breaker to %s", r.State())
	}
}

func TestResilientBusyUnderLoad(t *testing.T) {
	tests := []struct {
		name              string
		maxConc, maxQueue int
		callers           int
	}{
		{"cap 4 queue 8", 4, 8, 50},
		{"cap 1 no queue", 1, -1, 20},
		{"cap 3 queue 30 fits all", 3, 30, 33},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(newFakeClock())
			cfg.MaxConcurrent, cfg.MaxQueue = tt.maxConc, tt.maxQueue
			inner := &scripted{steps: []step{okStep}, hold: make(chan struct{}), started: make(chan struct{}, tt.callers)}
			r := NewResilient(inner, cfg)
			queue := max(tt.maxQueue, 0)
			wantBusy := max(tt.callers-tt.maxConc-queue, 0)

			results := make(chan error, tt.callers)
			var returned atomic.Int64
			var wg sync.WaitGroup
			for range tt.callers {
				wg.Go(func() {
					_, err := r.Summarize(context.Background(), Request{})
					results <- err
					returned.Add(1)
				})
			}
			// Everyone over the cap and the queue is turned away before anything finishes.
			waitFor(t, "cap and queue full, the rest turned away", func() bool {
				n, w := r.InFlight()
				return n == tt.maxConc && w == queue && returned.Load() == int64(wantBusy)
			})
			for i := range wantBusy {
				if err := <-results; !errors.Is(err, ErrBusy) {
					t.Fatalf("result %d = %v, want ErrBusy", i, err)
				}
			}
			close(inner.hold)
			wg.Wait()
			close(results)
			for err := range results {
				if err != nil {
					t.Errorf("admitted call: %v", err)
				}
			}
			if got := inner.count(); got != tt.callers-wantBusy {
				t.Errorf("summarisations = %d, want %d", got, tt.callers-wantBusy)
			}
			if p := inner.peak.Load(); p > int64(tt.maxConc) {
				t.Errorf("peak concurrency %d over the cap %d", p, tt.maxConc)
			}
		})
	}
}

func TestResilientUnlimited(t *testing.T) {
	cfg := testConfig(newFakeClock())
	cfg.MaxConcurrent = 0
	const n = 40
	inner := &scripted{steps: []step{okStep}, hold: make(chan struct{}), started: make(chan struct{}, n)}
	r := NewResilient(inner, cfg)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, err := r.Summarize(context.Background(), Request{}); err != nil {
				t.Error(err)
			}
		})
	}
	for range n {
		<-inner.started
	}
	close(inner.hold)
	wg.Wait()
	if p := inner.peak.Load(); p != n {
		t.Errorf("peak = %d, want all %d in flight at once", p, n)
	}
}

func TestNewResilientDefaults(t *testing.T) {
	r := NewResilient(&scripted{}, ResilienceConfig{BaseBackoff: -1, MaxAttempts: -3})
	c := r.cfg
	if c.MaxAttempts != DefaultMaxAttempts || c.BaseBackoff != DefaultBaseBackoff || c.MaxBackoff != DefaultMaxBackoff ||
		c.BreakerFailures != DefaultBreakerFailures || c.BreakerCooldown != DefaultBreakerCooldown ||
		c.MaxQueue != DefaultMaxQueue || r.slots != nil {
		t.Errorf("defaults not applied: %+v", c)
	}
	d := NewResilient(&scripted{}, defaultConfig())
	if cap(d.slots) != DefaultMaxConcurrent {
		t.Errorf("default cap = %d", cap(d.slots))
	}
	if s := d.State(); s != StateClosed {
		t.Errorf("initial state %s", s)
	}
}

func BenchmarkResilientOverhead(b *testing.B) {
	r := NewResilient(&scripted{steps: []step{okStep}}, defaultConfig())
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := r.Summarize(ctx, Request{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
