package proxy_test

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"go.uber.org/goleak"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// TestMain fails the package if any test leaves a goroutine behind: speculative jobs, the
// retention loop, the Counter's worker and upstream connections all end with Server.Close.
// No ignores in the ordinary run: nothing the package uses leaks by design. The end-to-end tests
// that .ci/prometheus-e2e.sh runs (metrics_e2e_test.go) drive an external compactd through the
// SDK's shared HTTP transport, whose keep-alive connections belong to that process, not to a
// Server of this package; only for them are the connection loops ignored.
func TestMain(m *testing.M) {
	var opts []goleak.Option
	if os.Getenv("COMPACTD_E2E_PROXY") != "" || os.Getenv("COMPACTD_E2E_PROMETHEUS") != "" {
		opts = append(opts,
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"))
	}
	goleak.VerifyTestMain(m, opts...)
}

// closeServer closes s with a deadline that only keeps a broken Close from hanging the test.
func closeServer(t testing.TB, s *proxy.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// validConfig is the smallest Config New accepts.
func validConfig(t *testing.T) proxy.Config {
	return proxy.Config{Sealer: testRing(t, "k1"), Summarizer: failingSummarizer{}, Logger: slog.New(slog.DiscardHandler)}
}

func TestNewRejectsNonsense(t *testing.T) {
	rel, _ := url.Parse("api.openai.com/v1")
	for _, tc := range []struct {
		name   string
		mutate func(*proxy.Config)
		want   string // "" = accepted
	}{
		{"valid", func(*proxy.Config) {}, ""},
		{"negative means off where documented", func(c *proxy.Config) {
			c.LedgerBytes, c.CompactionTimeout, c.BodyReadTimeout, c.Speculative.Fraction = -1, -1, -1, -1
		}, ""},
		{"nil Sealer", func(c *proxy.Config) { c.Sealer = nil }, "Config.Sealer"},
		{"nil Summarizer", func(c *proxy.Config) { c.Summarizer = nil }, "Config.Summarizer"},
		{"relative Upstream", func(c *proxy.Config) { c.Upstream = rel }, "Config.Upstream"},
		{"relative AnthropicUpstream", func(c *proxy.Config) { c.AnthropicUpstream = rel }, "Config.AnthropicUpstream"},
		{"negative RetainTokens", func(c *proxy.Config) { c.RetainTokens = -1 }, "Config.RetainTokens"},
		{"negative MaxBodyBytes", func(c *proxy.Config) { c.MaxBodyBytes = -5 }, "Config.MaxBodyBytes"},
		{"negative MaxHeaderBytes", func(c *proxy.Config) { c.MaxHeaderBytes = -1 }, "Config.MaxHeaderBytes"},
		{"negative ItemMaxAge", func(c *proxy.Config) { c.ItemMaxAge = -time.Second }, "Config.ItemMaxAge"},
		{"negative KeepAlive", func(c *proxy.Config) { c.KeepAlive = -time.Second }, "Config.KeepAlive"},
		{"negative Policy.Threshold", func(c *proxy.Config) { c.Policy.Threshold = -1 }, "Config.Policy.Threshold"},
		{"negative Speculative.MaxConcurrent", func(c *proxy.Config) { c.Speculative.MaxConcurrent = -2 }, "Config.Speculative.MaxConcurrent"},
		{"negative Speculative.TTL", func(c *proxy.Config) { c.Speculative.TTL = -time.Minute }, "Config.Speculative.TTL"},
		{"Speculative.Fraction 1", func(c *proxy.Config) { c.Speculative.Fraction = 1 }, "Config.Speculative.Fraction"},
		{"negative Recall.TopK", func(c *proxy.Config) { c.Recall.TopK = -1 }, "Config.Recall.TopK"},
		{"retention without archive", func(c *proxy.Config) { c.ArchiveRetention.MaxAge = time.Hour }, "Config.ArchiveRetention"},
		{"retention interval without a limit", func(c *proxy.Config) { c.ArchiveRetentionInterval = time.Minute }, "Config.ArchiveRetentionInterval"},
		{"negative ArchiveRetention.MaxTotalBytes", func(c *proxy.Config) { c.ArchiveRetention.MaxTotalBytes = -1 }, "Config.ArchiveRetention.MaxTotalBytes"},
		{"total retention ceiling confined to a tenant", func(c *proxy.Config) {
			c.Archive = &countingStore{pruned: make(chan struct{})}
			c.ArchiveRetention = archive.Retention{MaxTotalBytes: 1, Tenant: "acme"}
		}, "Config.ArchiveRetention"},
		{"user without password", func(c *proxy.Config) { c.MetricsUser = "ops" }, "Config.MetricsUser"},
		{"two mistakes, both named", func(c *proxy.Config) { c.Sealer = nil; c.RetainTokens = -1 }, "Config.RetainTokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig(t)
			tc.mutate(&cfg)
			s, err := proxy.New(cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				closeServer(t, s)
				return
			}
			if err == nil {
				closeServer(t, s)
				t.Fatalf("New accepted it, want an error naming %s", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %s", err, tc.want)
			}
		})
	}
}

// countingStore is an archive that counts Prune and Close calls.
type countingStore struct {
	archive.Store
	prunes, closes atomic.Int32
	pruned         chan struct{}
}

func (c *countingStore) Prune(ctx context.Context, r archive.Retention) (int, error) {
	if c.prunes.Add(1) == 1 {
		close(c.pruned)
	}
	return 0, nil
}

func (c *countingStore) Close() error {
	c.closes.Add(1)
	return nil
}

func TestCloseStopsAndClosesWhatTheServerOwns(t *testing.T) {
	store := &countingStore{pruned: make(chan struct{})}
	counter := compact.NewCounter(compact.CounterOptions{Background: true})
	cfg := validConfig(t)
	cfg.Archive, cfg.Counter = store, counter
	cfg.ArchiveRetention = archive.Retention{MaxBytes: 1 << 30}
	s, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	<-store.pruned // the retention loop runs a first pass at once
	closeServer(t, s)
	closeServer(t, s) // idempotent
	if n := store.closes.Load(); n != 1 {
		t.Errorf("archive closed %d times, want 1", n)
	}
	// The retention loop and the Counter's worker are gone: TestMain's goleak check fails the
	// package otherwise. A closed Counter still counts.
	if n := counter.Text("still counting"); n == 0 {
		t.Error("closed Counter stopped counting")
	}
}

// blockingSummarizer blocks every call until its context is done, recording that it was.
type blockingSummarizer struct {
	started   chan struct{}
	cancelled atomic.Bool
}

func (b *blockingSummarizer) Summarize(ctx context.Context, _ summarizer.Request) (summarizer.Result, error) {
	b.started <- struct{}{}
	<-ctx.Done()
	b.cancelled.Store(true)
	return summarizer.Result{}, ctx.Err()
}

func TestCloseCancelsAndWaitsForSpeculativeJobs(t *testing.T) {
	sum := &blockingSummarizer{started: make(chan struct{}, 1)}
	h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) { c.RetainTokens = 1000; c.Summarizer = sum })
	sendPastFraction(t, h)
	<-sum.started // a speculative job is running and will not end by itself
	closeServer(t, h.srv)
	// Close returned only after the job's goroutine did, so the job saw its cancellation.
	if !sum.cancelled.Load() {
		t.Error("Close returned before the speculative job was cancelled and finished")
	}
}

// sendPastFraction sends a turn past the default speculation fraction of its threshold and
// below it, which starts a speculative job.
func sendPastFraction(t *testing.T, h *harness) {
	t.Helper()
	if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", toAny(history(5, 400))), threshold(6000)); err != nil {
		t.Fatal(err)
	}
}
