package summarizer

import (
	"context"
	"errors"
	"testing"
	"time"
)

// While the breaker is open, the rejection says how long is left of the cooldown and what the
// summariser answered on the failure that opened it, so the proxy can pass a rate limit on as a
// 429 with Retry-After rather than a bare error.
func TestCircuitOpenErrorCarriesHint(t *testing.T) {
	tests := []struct {
		name       string
		opening    step
		advance    time.Duration // after opening, before the rejected call
		probing    bool          // the half-open probe is in flight
		wantWait   time.Duration
		wantStatus int
		wantCode   string
	}{
		{name: "rate limited", opening: step{err: &Error{Status: 429, Retryable: true, Code: "rate_limit_exceeded", RetryAfter: 7 * time.Second}},
			wantWait: 10 * time.Second, wantStatus: 429, wantCode: "rate_limit_exceeded"},
		{name: "later in the cooldown", opening: failed(529, true, 0), advance: 4 * time.Second, wantWait: 6 * time.Second, wantStatus: 529},
		{name: "no response", opening: step{err: &Error{Retryable: true, Err: context.DeadlineExceeded}}, advance: 9500 * time.Millisecond, wantWait: minProbeWait},
		{name: "probe in flight", opening: failed(503, true, 0), advance: 10 * time.Second, probing: true, wantWait: minProbeWait, wantStatus: 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			cfg := testConfig(clk)
			cfg.MaxAttempts, cfg.BreakerFailures, cfg.BreakerCooldown = 1, 1, 10*time.Second
			inner := &scripted{steps: []step{tt.opening, okStep}}
			r := NewResilient(inner, cfg)
			if _, err := r.Summarize(context.Background(), Request{}); err == nil || r.State() != StateOpen {
				t.Fatalf("opening call: err %v, state %s", err, r.State())
			}
			clk.advance(tt.advance)
			if tt.probing {
				inner.hold, inner.started = make(chan struct{}), make(chan struct{})
				go func() { _, _ = r.Summarize(context.Background(), Request{}) }()
				<-inner.started
				defer close(inner.hold)
			}
			_, err := r.Summarize(context.Background(), Request{})
			var co *CircuitOpenError
			if !errors.As(err, &co) || !errors.Is(err, ErrCircuitOpen) {
				t.Fatalf("err = %v, want a *CircuitOpenError matching ErrCircuitOpen", err)
			}
			if co.RetryAfter != tt.wantWait || co.Status != tt.wantStatus || co.Code != tt.wantCode {
				t.Errorf("got wait %v status %d code %q, want %v %d %q", co.RetryAfter, co.Status, co.Code, tt.wantWait, tt.wantStatus, tt.wantCode)
			}
		})
	}
}
