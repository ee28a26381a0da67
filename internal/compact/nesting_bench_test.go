package compact

import (
	"strconv"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/api"
)

// benchNestLevels is the nesting of the deep item in the nesting benchmarks: 20k levels, well
// past the front door's limit, built directly.
const benchNestLevels = 20_000

// nestingItems returns a tool output holding one value nested benchNestLevels deep and a flat
// tool output of at least the same byte size holding the same kind of strings one level deep.
func nestingItems() (deep, flat string) {
	wrap := func(v string) string {
		return `{"type":"function_call_output","call_id":"c1","output":[` + v + `]}`
	}
	deep = wrap(deepValue(benchNestLevels / 2))
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; b.Len() < len(deep)-len(wrap("")); i++ {
		b.WriteString(`{"t":"w` + strconv.Itoa(i) + `","c":[]},`)
	}
	b.WriteString(`{"t":"end"}]`)
	return deep, wrap(b.String())
}

// BenchmarkNestingBookkeeping measures the per-item work a compaction does over a replaced item
// in package compact — ledger extraction, exact token counting (BPE), estimation and transcript
// rendering — on an item holding a 20k-deep value beside a flat item of the same byte size. The
// walks are single passes, so deep should cost about what flat costs (target: within 2x); the
// archive's share (index and excerpt) is BenchmarkNestingArchive in package archive.
func BenchmarkNestingBookkeeping(b *testing.B) {
	deep, flat := nestingItems()
	for _, tc := range []struct{ name, raw string }{{"deep", deep}, {"flat", flat}} {
		it := item(tc.raw)
		items := []api.Item{it}
		c := NewCounter(CounterOptions{})
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.raw)))
			b.ReportAllocs()
			for b.Loop() {
				Ledger(items, []int{0}, 8<<10)
				c.exact(kindItem, tc.raw)
				estimate(kindItem, tc.raw)
				RenderEntry(it)
			}
		})
	}
}

// BenchmarkNestingWalk is the walk alone (estimation, no tokenizer): the part nesting could make
// quadratic.
func BenchmarkNestingWalk(b *testing.B) {
	deep, flat := nestingItems()
	for _, tc := range []struct{ name, raw string }{{"deep", deep}, {"flat", flat}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.raw)))
			b.ReportAllocs()
			for b.Loop() {
				estimate(kindItem, tc.raw)
			}
		})
	}
}
