package archive

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkNestingArchive measures the archive's per-item work at a compaction — indexing the
// replaced item and choosing an excerpt from it — on a tool output holding a value nested 20k
// levels deep beside a flat tool output of the same byte size (the compact package's share is
// BenchmarkNestingBookkeeping). Target: deep within 2x of flat.
func BenchmarkNestingArchive(b *testing.B) {
	deep := deepItem(10_000) // an object and an array per step: 20k levels
	var fb strings.Builder
	fb.WriteString(`{"type":"function_call_output","call_id":"c1","output":[`)
	for i := 0; fb.Len() < len(deep)-3; i++ {
		fb.WriteString(`{"t":"w` + strconv.Itoa(i) + `","c":[]},`)
	}
	fb.WriteString(`{"t":"end"}]}`)
	flat := fb.String()
	ix := newBlindIndex(testKey)
	q := parseQuery("w9999 end")
	for _, tc := range []struct{ name, raw string }{{"deep", deep}, {"flat", flat}} {
		items := []json.RawMessage{json.RawMessage(tc.raw)}
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.raw)))
			b.ReportAllocs()
			for b.Loop() {
				ix.document("t", items)
				bestExcerpt(q, items, 1200)
			}
		})
	}
}
