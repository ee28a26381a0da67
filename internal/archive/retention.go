package archive

import (
	"context"
	"time"
)

// DefaultRetentionInterval is how often RunRetention prunes when not told otherwise.
const DefaultRetentionInterval = 10 * time.Minute

// retentionPassTimeout bounds one Prune, so a stuck database cannot hold the loop forever.
const retentionPassTimeout = 5 * time.Minute

// RunRetention applies r to s at once and then every interval (DefaultRetentionInterval when
// interval <= 0) until ctx is done, and returns then: the caller owns the loop's lifetime
// through ctx, and a cancelled ctx also cuts short a Prune in progress. report, if not nil,
// receives every pass's result (segments deleted, error). A Retention without a limit (see
// Retention.Enabled) prunes nothing, so RunRetention returns at once without touching s.
func RunRetention(ctx context.Context, s Store, r Retention, interval time.Duration, report func(deleted int, err error)) {
	if !r.Enabled() {
		return
	}
	runPeriodically(ctx, interval, func(ctx context.Context) (int, error) { return s.Prune(ctx, r) }, report)
}

// runPeriodically runs pass at once and then every interval (DefaultRetentionInterval when
// interval <= 0) until ctx is done, each pass bounded by retentionPassTimeout, and reports every
// finished pass: the loop the archive's and the memo's retention share.
func runPeriodically(ctx context.Context, interval time.Duration, pass func(context.Context) (int, error), report func(deleted int, err error)) {
	if interval <= 0 {
		interval = DefaultRetentionInterval
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, retentionPassTimeout)
		n, err := pass(pctx)
		cancel()
		if ctx.Err() != nil {
			return // stopped mid-pass: the error is the cancellation, not worth a report
		}
		if report != nil {
			report(n, err)
		}
		t.Reset(interval)
	}
}
