package memo

import (
	"context"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/dialect"
)

func TestLocal(t *testing.T) {
	ctx := context.Background()
	h := func(b byte) Hash { var x Hash; x[0] = b; return x }
	prefixes := []Hash{h(1), h(2), h(3), h(4)}
	a := Key{Tenant: "a", Dialect: dialect.Messages}

	t.Run("longest prefix wins, exact length only", func(t *testing.T) {
		l := NewLocal(0, 0)
		_ = l.Record(ctx, a, h(2), 2, []byte("two"))
		_ = l.Record(ctx, a, h(3), 3, []byte("three"))
		_ = l.Record(ctx, a, h(4), 9, []byte("wrong length")) // names 9 items, this input has 4
		e, ok, err := l.Longest(ctx, a, prefixes)
		if err != nil || !ok || e.Items != 3 || string(e.Compaction) != "three" {
			t.Fatalf("got %+v %v %v", e, ok, err)
		}
	})
	t.Run("tenant and dialect bound", func(t *testing.T) {
		l := NewLocal(0, 0)
		_ = l.Record(ctx, a, h(2), 2, []byte("two"))
		for _, k := range []Key{{Tenant: "b", Dialect: dialect.Messages}, {Tenant: "a", Dialect: dialect.Responses}} {
			if _, ok, _ := l.Longest(ctx, k, prefixes); ok {
				t.Errorf("%+v sees tenant a's Messages record", k)
			}
		}
	})
	t.Run("bounded, least recently used first", func(t *testing.T) {
		l := NewLocal(2, 0)
		_ = l.Record(ctx, a, h(1), 1, []byte("1"))
		_ = l.Record(ctx, a, h(2), 2, []byte("2"))
		if _, ok, _ := l.Longest(ctx, a, prefixes[:1]); !ok { // uses h(1)
			t.Fatal("h(1) missing")
		}
		_ = l.Record(ctx, a, h(3), 3, []byte("3")) // evicts h(2), the least recently used
		if e, ok, _ := l.Longest(ctx, a, prefixes[:2]); !ok || e.Items != 1 {
			t.Errorf("after eviction: %+v %v, want h(1) only", e, ok)
		}
	})
	t.Run("expires after its ttl, a use extends it", func(t *testing.T) {
		l := NewLocal(0, time.Minute)
		now := time.Unix(1000, 0)
		l.now = func() time.Time { return now }
		_ = l.Record(ctx, a, h(1), 1, []byte("1"))
		now = now.Add(50 * time.Second)
		if _, ok, _ := l.Longest(ctx, a, prefixes[:1]); !ok {
			t.Fatal("expired early")
		}
		now = now.Add(50 * time.Second) // 100 s after the record, 50 s after its use
		if _, ok, _ := l.Longest(ctx, a, prefixes[:1]); !ok {
			t.Fatal("a use did not extend the expiry")
		}
		now = now.Add(2 * time.Minute)
		if _, ok, _ := l.Longest(ctx, a, prefixes[:1]); ok {
			t.Error("alive past its ttl")
		}
	})
	t.Run("speculative summaries keyed by model", func(t *testing.T) {
		l := NewLocal(0, 0)
		_ = l.PutSpeculative(ctx, a, "m1", h(2), 2, []byte("s"))
		if b, ok, _ := l.Speculative(ctx, a, "m1", h(2)); !ok || string(b) != "s" {
			t.Fatal("miss")
		}
		if _, ok, _ := l.Speculative(ctx, a, "m2", h(2)); ok {
			t.Error("another model's summary was used")
		}
		if _, ok, _ := l.Longest(ctx, a, prefixes); ok {
			t.Error("a speculative summary was returned as a compaction")
		}
	})
}
