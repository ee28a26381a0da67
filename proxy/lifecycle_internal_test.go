package proxy

import (
	"context"
	"errors"
	"testing"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/crypto"
)

// internalRing is a one-key keyring for the package's internal tests.
func internalRing(tb testing.TB) *crypto.Keyring {
	tb.Helper()
	k, err := crypto.GenerateKey()
	if err != nil {
		tb.Fatal(err)
	}
	r, err := crypto.NewKeyring(k)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func TestSpeculatorStop(t *testing.T) {
	t.Run("cancels jobs already taken by a turn and refuses new ones", func(t *testing.T) {
		sp := newSpeculator(SpeculativeConfig{})
		b := newBlockingRun()
		items := specItems("u1", "a1", "u2")
		if !sp.start("m", items, b.run) {
			t.Fatal("not started")
		}
		jobCtx := <-b.ctxs
		// A crossing turn takes the job out of the cache: close() alone would not reach it.
		if n, e := sp.lookup("m", items); n == 0 || e == nil {
			t.Fatal("running job not found")
		}
		if err := sp.stop(context.Background()); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if jobCtx.Err() == nil {
			t.Error("stop returned with a job's context still live")
		}
		if sp.start("m", specItems("v1", "b1", "v2"), b.run) {
			t.Error("a job started after stop")
		}
	})
	t.Run("bounded by its context", func(t *testing.T) {
		sp := newSpeculator(SpeculativeConfig{})
		release, started := make(chan struct{}), make(chan struct{})
		sp.start("m", specItems("u1", "a1", "u2"), func(context.Context, []api.Item) (specResult, error) {
			close(started)
			<-release // ignores cancellation
			return specResult{}, errors.New("released")
		})
		<-started
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := sp.stop(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("stop with a stuck job and a done context = %v, want context.Canceled", err)
		}
		close(release)
		if err := sp.stop(context.Background()); err != nil { // and now it does end
			t.Errorf("second stop: %v", err)
		}
	})
}
