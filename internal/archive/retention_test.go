package archive

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
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

// retentionFixture puts one segment per conversation, so that Conversations reports each
// segment's stored size, and remembers them in the order written (oldest first).
type retentionFixture struct {
	t    *testing.T
	st   Store
	t0   time.Time
	n    int
	segs []fixtureSeg
}

type fixtureSeg struct {
	tenant, id, conv string
	bytes            int64
}

func newRetentionFixture(t *testing.T, st Store) *retentionFixture {
	return &retentionFixture{t: t, st: st, t0: time.Now().Add(-time.Hour)}
}

// put writes count segments for tenant, each a minute after the fixture's previous one.
func (f *retentionFixture) put(tenant string, count int) {
	f.t.Helper()
	ctx := context.Background()
	for range count {
		conv := fmt.Sprintf("%s-c%d", tenant, f.n)
		r, err := f.st.Put(ctx, Segment{Tenant: tenant, Conversation: conv, CreatedAt: f.t0.Add(time.Duration(f.n) * time.Minute),
			Items: fillerItems(4, "retention")})
		if err != nil {
			f.t.Fatal(err)
		}
		f.n++
		convs, err := f.st.Conversations(ctx, tenant)
		if err != nil {
			f.t.Fatal(err)
		}
		var size int64
		for _, c := range convs {
			if c.ID == conv {
				size = c.Bytes
			}
		}
		f.segs = append(f.segs, fixtureSeg{tenant, r.ID, conv, size})
	}
}

// bytes is what the fixture wrote for tenant ("" every tenant).
func (f *retentionFixture) bytes(tenant string) int64 {
	var n int64
	for _, s := range f.segs {
		if tenant == "" || s.tenant == tenant {
			n += s.bytes
		}
	}
	return n
}

// kept reports, per tenant, which of its segments (in the order written) survive.
func (f *retentionFixture) kept() map[string][]bool {
	f.t.Helper()
	out := map[string][]bool{}
	for _, s := range f.segs {
		_, err := f.st.Get(context.Background(), s.tenant, s.id)
		if err != nil && !errors.Is(err, ErrNotFound) {
			f.t.Fatal(err)
		}
		out[s.tenant] = append(out[s.tenant], err == nil)
	}
	return out
}

// keptBytes sums what survives of tenant.
func (f *retentionFixture) keptBytes(tenant string) int64 {
	var n int64
	kept := f.kept()[tenant]
	i := 0
	for _, s := range f.segs {
		if s.tenant == tenant {
			if kept[i] {
				n += s.bytes
			}
			i++
		}
	}
	return n
}

// oldestGone is the shape of a prune that removed the first n of count segments.
func oldestGone(n, count int) []bool {
	out := make([]bool, count)
	for i := n; i < count; i++ {
		out[i] = true
	}
	return out
}

// testRetention runs on every backend (from testStore).
func testRetention(t *testing.T, open func(t *testing.T) Store) {
	ctx := context.Background()

	// Issue 22, defect 3: the byte bound was one global oldest-first budget, so a busy
	// tenant's new traffic deleted a quiet tenant's (older) archive whole.
	t.Run("MaxBytesIsPerTenant", func(t *testing.T) {
		f := newRetentionFixture(t, open(t))
		f.put("quiet", 3) // the oldest segments of the archive
		f.put("busy", 8)
		bound := f.bytes("quiet") + 1 // the quiet tenant fits; the busy one is far over
		n, err := f.st.Prune(ctx, Retention{MaxBytes: bound})
		if err != nil {
			t.Fatal(err)
		}
		kept := f.kept()
		if want := oldestGone(0, 3); !slices.Equal(kept["quiet"], want) {
			t.Errorf("quiet tenant kept %v, want %v: another tenant's traffic evicted it", kept["quiet"], want)
		}
		busy := kept["busy"]
		gone := slices.Index(busy, true)
		if gone <= 0 || !slices.Equal(busy, oldestGone(gone, 8)) || n != gone {
			t.Errorf("busy tenant kept %v (pruned %d): want its oldest gone, newest kept", busy, n)
		}
		if b := f.keptBytes("busy"); b > bound {
			t.Errorf("busy tenant holds %d bytes after the prune, bound %d", b, bound)
		}
		// Within bounds now: a second pass deletes nothing.
		if n, err := f.st.Prune(ctx, Retention{MaxBytes: bound}); err != nil || n != 0 {
			t.Errorf("second prune = %d, %v", n, err)
		}
	})

	// Issue 22, defect 4: a prune confined to one tenant touches no other.
	t.Run("TenantOnly", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			r    Retention
		}{
			{"max age", Retention{MaxAge: time.Minute, Tenant: "x"}},
			{"max bytes", Retention{MaxBytes: 1, Tenant: "x"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := newRetentionFixture(t, open(t))
				f.put("y", 2)
				f.put("x", 2)
				f.put("y", 2)
				n, err := f.st.Prune(ctx, tc.r)
				if err != nil || n != 2 {
					t.Fatalf("pruned %d, %v; want x's 2", n, err)
				}
				kept := f.kept()
				if !slices.Equal(kept["x"], []bool{false, false}) || !slices.Equal(kept["y"], oldestGone(0, 4)) {
					t.Errorf("kept %v", kept)
				}
			})
		}
		if _, err := open(t).Prune(ctx, Retention{MaxTotalBytes: 1, Tenant: "x"}); err == nil {
			t.Error("a total ceiling confined to one tenant was accepted")
		}
	})

	// The global ceiling trims the largest tenant first; small ones keep everything until
	// they are among the largest. Segments are all about one size (per), so the ceilings sit
	// half a segment away from the totals that decide.
	t.Run("MaxTotalBytesTrimsTheLargest", func(t *testing.T) {
		for _, tc := range []struct {
			name     string
			ceiling  func(per, total int64) int64
			wantGone map[string]int // oldest segments deleted, per tenant
		}{
			{"only the largest trimmed", func(per, total int64) int64 { return total - 2*per + per/2 },
				map[string]int{"big": 2}},
			{"the largest down to the next, then both", func(per, total int64) int64 { return 5*per + per/2 },
				map[string]int{"big": 6, "mid": 1}},
			{"under the ceiling", func(per, total int64) int64 { return total },
				map[string]int{}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := newRetentionFixture(t, open(t))
				f.put("small", 1) // the very oldest segment of all: global oldest-first would take it first
				f.put("mid", 3)
				f.put("big", 8)
				ceiling := tc.ceiling(f.segs[0].bytes, f.bytes(""))
				n, err := f.st.Prune(ctx, Retention{MaxTotalBytes: ceiling})
				if err != nil {
					t.Fatal(err)
				}
				kept := f.kept()
				want := map[string][]bool{}
				sum := 0
				for name, count := range map[string]int{"small": 1, "mid": 3, "big": 8} {
					want[name] = oldestGone(tc.wantGone[name], count)
					sum += tc.wantGone[name]
				}
				if !maps.EqualFunc(kept, want, slices.Equal) || n != sum {
					t.Errorf("pruned %d, kept %v; want %d, %v", n, kept, sum, want)
				}
				if total := f.keptBytes("small") + f.keptBytes("mid") + f.keptBytes("big"); total > ceiling {
					t.Errorf("total %d after the prune, ceiling %d", total, ceiling)
				}
			})
		}
	})

	// Per-tenant bounds first, then the ceiling over what they left.
	t.Run("BothBounds", func(t *testing.T) {
		f := newRetentionFixture(t, open(t))
		f.put("a", 4)
		f.put("b", 2)
		per := f.segs[0].bytes
		// a to 3 segments by its bound (b is within it); then 5 segments over the 4.5 ceiling:
		// one more from the largest, a.
		n, err := f.st.Prune(ctx, Retention{MaxBytes: 3*per + per/2, MaxTotalBytes: 4*per + per/2})
		if err != nil || n != 2 {
			t.Fatalf("pruned %d, %v; want 2", n, err)
		}
		if kept := f.kept(); !slices.Equal(kept["a"], oldestGone(2, 4)) || !slices.Equal(kept["b"], oldestGone(0, 2)) {
			t.Errorf("kept %v", kept)
		}
	})
}
