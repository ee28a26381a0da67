package responses

import (
	"strings"
	"testing"

	"github.com/compactd/compactd/bench/cputime"
	"github.com/compactd/compactd/bench/workload"
	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/turn/turntest"
)

// benchSummary is a summary and ledger of realistic size: 16 KB and the default 6 KB ledger.
var benchSummary, benchLedger = strings.Repeat("The handler now returns positioned errors; tests pass. ", 300), strings.Repeat("- ran `go test ./proxy` exit 0\n", 200)

func parsedItems(tb testing.TB, raw [][]byte) []api.Item {
	tb.Helper()
	r, err := api.ParseResponsesRequest(workload.Body(raw, workload.BodyOptions{}))
	if err != nil {
		tb.Fatal(err)
	}
	return r.Items
}

// BenchmarkExpand is the handoff (handoffAt) of a turn after a compaction, with the counter warm as it is in
// a running server. "codex" is the shape Codex sends (instructions and retained user messages,
// the compaction item, then the new turn's items); "full-history" a client that kept the whole
// history before the item, all of which expand must partition and drop.
func BenchmarkExpand(b *testing.B) {
	h := turntest.NewHarness(b, Adapter{})
	o := &engine.Opened{ID: "cmp_bench", Payload: &compact.Payload{V: 1, Summary: benchSummary, Ledger: benchLedger}}
	cmp := api.CompactionItem("cmp_bench", "cmp_bench.sealed")
	for _, size := range []struct {
		name string
		size int
	}{{"10KB", 10 << 10}, {"1MB", 1 << 20}, {"4MB", 4 << 20}} {
		hist := workload.Items(size.size)
		shapes := map[string][][]byte{
			"codex":        append(append(append([][]byte{}, workload.Preamble()...), cmp), hist...),
			"full-history": append(append([][]byte{}, hist...), cmp, workload.NewItem(1)),
		}
		for _, shape := range []string{"codex", "full-history"} {
			items := parsedItems(b, shapes[shape])
			k := -1
			for i, it := range items {
				if it.Type == api.TypeCompaction {
					k = i
				}
			}
			for _, it := range items {
				h.Env.Counter.Item(it.Raw)
			}
			b.Run(size.name+"/"+shape, func(b *testing.B) {
				b.ReportAllocs()
				c0 := cputime.Process()
				for b.Loop() {
					if out := handoffAt(h.Env, items[:k], items[k+1:], o); len(out) == 0 || !out[len(out)-1-(len(items)-k-1)].Handoff {
						b.Fatal("no handoff message")
					}
				}
				cputime.Report(b, c0)
			})
		}
	}
}
