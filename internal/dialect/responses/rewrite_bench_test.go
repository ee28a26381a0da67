package responses

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/compactd/compactd/bench/cputime"
	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/turn"
	"github.com/compactd/compactd/internal/turn/turntest"
)

// BenchmarkSSERewrite measures the SSE rewriting of a turn that compacted: every event of the
// upstream's stream is parsed for its type, sequence number and output index and rewritten, and
// the compaction item (16 KB of ciphertext) goes in after response.in_progress and into the final
// response object. ns/event is the per-event cost a streamed token pays; the stream's first event
// pays no more than any other before its bytes go out.
func BenchmarkSSERewrite(b *testing.B) {
	item := api.CompactionItem("cmp_0123456789abcdef0123456789abcdef", "cmp_0123456789abcdef0123456789abcdef."+strings.Repeat("QUJD", 4<<10))
	for _, deltas := range []int{16, 256} {
		stream, events := turntest.ResponsesStream(b, deltas)
		b.Run(fmt.Sprintf("%devents", events), func(b *testing.B) {
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			n := 0
			c0 := cputime.Process()
			for b.Loop() {
				t := &Turn{a: Adapter{}, item: item, itemID: "cmp_0123456789abcdef0123456789abcdef", stream: turn.Stream{Streamed: true}}
				rw := t.Events(io.NopCloser(bytes.NewReader(stream)))
				m, err := io.Copy(io.Discard, rw)
				if err != nil || m <= int64(len(stream)) {
					b.Fatalf("rewrite: %d bytes, %v", m, err)
				}
				n += events
			}
			cputime.Report(b, c0)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/event")
		})
	}
}
