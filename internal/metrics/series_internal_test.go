package metrics

import (
	"sync"
	"sync/atomic"
	"testing"
)

// seriesCache makes each label set's series once, however many goroutines ask for it at once,
// and every caller gets that one series.
func TestSeriesCacheOncePerKey(t *testing.T) {
	var made atomic.Int64
	c := seriesCache[genAIKey, *int]{mk: func(genAIKey) *int { made.Add(1); return new(int) }}
	keys := []genAIKey{{"chat", "openai", "gpt", ""}, {"chat", "openai", "gpt", "input"}, {"chat", "anthropic", "claude", ""}}
	got := make([][]*int, 8)
	var wg sync.WaitGroup
	for g := range got {
		wg.Go(func() {
			for range 100 {
				got[g] = got[g][:0]
				for _, k := range keys {
					got[g] = append(got[g], c.get(k))
				}
			}
		})
	}
	wg.Wait()
	if made.Load() != int64(len(keys)) {
		t.Fatalf("made %d series for %d label sets", made.Load(), len(keys))
	}
	for g := range got {
		for i := range keys {
			if got[g][i] != got[0][i] {
				t.Fatalf("goroutine %d got a different series for %v", g, keys[i])
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { c.get(keys[1]) }); n != 0 {
		t.Errorf("a cached series costs %.1f allocations, want 0", n)
	}
}
