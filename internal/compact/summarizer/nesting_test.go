package summarizer

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestChunkAndExtractiveIgnoreNesting feeds the chunker and the extractive fallback the entries
// a compaction renders from items holding values nested 100k levels deep (the transcript keeps
// unknown items and non-text outputs as compact JSON) and a 6 MB run of "[". Both read entries
// as text, never as JSON, so they must finish under a 16 MB stack cap — a walk recursing per
// nesting level would kill the test binary — with heap allocations a small multiple of the input,
// and keep the user messages around the hostile entries.
func TestChunkAndExtractiveIgnoreNesting(t *testing.T) {
	const depth = 100_000
	deep := strings.Repeat(`{"a":[`, depth) + `"x"` + strings.Repeat(`]}`, depth)
	entries := []string{
		"[user] fix the parser",
		"[x_unknown] " + deep,
		"[tool output c1] " + strings.Repeat("[", 6<<20),
		"[user] " + deep,
		"[assistant] done",
		"[user] then run the tests",
	}
	size := 0
	for _, e := range entries {
		size += len(e)
	}
	cases := []struct {
		name string
		run  func() string
	}{
		{"chunk", func() string {
			var b strings.Builder
			for _, c := range Chunk(entries, 4000, nil) {
				b.WriteString(strings.Join(c, "\n"))
			}
			return b.String()
		}},
		{"extractive", func() string { return Extractive(entries, 8000) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out string
			old := debug.SetMaxStack(16 << 20)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			done := make(chan struct{})
			go func() { defer close(done); out = tc.run() }()
			<-done
			runtime.ReadMemStats(&after)
			debug.SetMaxStack(old)
			if alloc, limit := after.TotalAlloc-before.TotalAlloc, uint64(8*size+1<<20); alloc > limit {
				t.Errorf("allocated %d bytes for %d bytes of entries, want at most %d", alloc, size, limit)
			}
			for _, want := range []string{"fix the parser", "then run the tests"} {
				if !strings.Contains(out, want) {
					t.Errorf("lost %q", want)
				}
			}
		})
	}
}
