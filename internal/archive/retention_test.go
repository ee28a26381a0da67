package archive

import (
	"context"
	"errors"
	"testing"
)

// pruneStore records Prune calls; the embedded nil Store panics on anything else.
type pruneStore struct {
	Store
	calls chan Retention
	err   error
	block bool // Prune waits for its context
}

func (p *pruneStore) Prune(ctx context.Context, r Retention) (int, error) {
	p.calls <- r
	if p.block {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return 3, p.err
}

func TestRunRetention(t *testing.T) {
	r := Retention{MaxBytes: 1 << 20}
	t.Run("prunes at once and returns when cancelled", func(t *testing.T) {
		s := &pruneStore{calls: make(chan Retention, 1), err: errors.New("disk full")}
		ctx, cancel := context.WithCancel(context.Background())
		type result struct {
			n   int
			err error
		}
		reports := make(chan result, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			RunRetention(ctx, s, r, 0, func(n int, err error) { reports <- result{n, err} })
		}()
		if got := <-s.calls; got != r {
			t.Errorf("Prune got %+v, want %+v", got, r)
		}
		if got := <-reports; got.n != 3 || got.err != s.err {
			t.Errorf("report = %+v, want 3 and the Prune error", got)
		}
		cancel()
		<-done // waits on the interval (10m default) only if cancellation were ignored
	})
	t.Run("cancellation cuts a pass short and is not reported", func(t *testing.T) {
		s := &pruneStore{calls: make(chan Retention, 1), block: true}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			RunRetention(ctx, s, r, 0, func(n int, err error) { t.Errorf("reported %d, %v after cancellation", n, err) })
		}()
		<-s.calls
		cancel()
		<-done
	})
	t.Run("no limit touches nothing", func(t *testing.T) {
		s := &pruneStore{calls: make(chan Retention, 1)}
		RunRetention(context.Background(), s, Retention{}, 0, nil) // returns: a background ctx never ends
		if len(s.calls) != 0 {
			t.Error("pruned with no limit")
		}
	})
}
