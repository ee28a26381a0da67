package handoff

import (
	"fmt"
	"strings"
	"testing"

	"github.com/compactd/compactd/bench/cputime"
)

// BenchmarkRender measures the handoff rendering every turn after a compaction pays: the fixed
// prefix, the summary and the facts ledger, as text and as a Responses user message (JSON-escaped).
func BenchmarkRender(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10, 64 << 10} {
		summary := strings.Repeat("The handler returns \"positioned\" errors;\ttests pass.\n", size/52+1)[:size]
		ledger := strings.Repeat("- ran `go test ./proxy` -> exit 0 <ok>\n", 160)
		b.Run(fmt.Sprintf("Text/%dKB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(summary) + len(ledger)))
			b.ReportAllocs()
			c0 := cputime.Process()
			for b.Loop() {
				if len(Text(summary, ledger)) < size {
					b.Fatal("short")
				}
			}
			cputime.Report(b, c0)
		})
		b.Run(fmt.Sprintf("ResponsesMessage/%dKB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(summary) + len(ledger)))
			b.ReportAllocs()
			c0 := cputime.Process()
			for b.Loop() {
				if len(ResponsesMessage(summary, ledger)) < size {
					b.Fatal("short")
				}
			}
			cputime.Report(b, c0)
		})
	}
}
