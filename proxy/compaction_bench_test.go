package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/compactd/compactd/bench/cputime"
	"github.com/compactd/compactd/bench/workload"
	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/engine"
)

// instantSummarizer answers at once with a fixed summary, so a benchmark of compactItems measures
// everything a compaction does apart from waiting on the summariser.
type instantSummarizer struct{ summary string }

func (s instantSummarizer) Summarize(context.Context, summarizer.Request) (summarizer.Result, error) {
	return summarizer.Result{Summary: s.summary, Model: "bench", Calls: 1}, nil
}

func benchServer(tb testing.TB, sum summarizer.Summarizer) *Server {
	return benchServerWith(tb, sum, compact.NewCounter(compact.CounterOptions{}), 0)
}

func benchServerWith(tb testing.TB, sum summarizer.Summarizer, counter *compact.Counter, ledgerBytes int) *Server {
	tb.Helper()
	key, err := crypto.GenerateKey()
	if err != nil {
		tb.Fatal(err)
	}
	ring, err := crypto.NewKeyring(key)
	if err != nil {
		tb.Fatal(err)
	}
	up, _ := url.Parse("http://127.0.0.1:9")
	s, err := New(Config{Upstream: up, Sealer: ring, Summarizer: sum, Counter: counter, LedgerBytes: ledgerBytes})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func parsedItems(tb testing.TB, raw [][]byte) []api.Item {
	tb.Helper()
	r, err := api.ParseResponsesRequest(workload.Body(raw, workload.BodyOptions{}))
	if err != nil {
		tb.Fatal(err)
	}
	return r.Items
}

// benchSummary is a summary and ledger of realistic size: 16 KB and the default 6 KB ledger.
var benchSummary, benchLedger = strings.Repeat("The handler now returns positioned errors; tests pass. ", 300), strings.Repeat("- ran `go test ./proxy` exit 0\n", 200)

// BenchmarkExpand is the handoff of a turn after a compaction, with the counter warm as it is in
// a running server. "codex" is the shape Codex sends (instructions and retained user messages,
// the compaction item, then the new turn's items); "full-history" a client that kept the whole
// history before the item, all of which expand must partition and drop.
func BenchmarkExpand(b *testing.B) {
	s := benchServer(b, instantSummarizer{summary: benchSummary})
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
				s.cfg.Counter.Item(it.Raw)
			}
			b.Run(size.name+"/"+shape, func(b *testing.B) {
				b.ReportAllocs()
				c0 := cputime.Process()
				for b.Loop() {
					if out := s.expand(items, k, o); len(out) == 0 || !out[len(out)-1-(len(items)-k-1)].Handoff {
						b.Fatal("no handoff message")
					}
				}
				cputime.Report(b, c0)
			})
		}
	}
}

// BenchmarkCompactItems is everything a compaction does apart from waiting on the summariser —
// partition, transcript rendering, facts ledger, payload, seal — for a history of about 400k
// tokens whose counts are cached (the threshold decision that triggered it counted them).
func BenchmarkCompactItems(b *testing.B) {
	s := benchServer(b, instantSummarizer{summary: benchSummary})
	var raw [][]byte
	tokens := 0
	for i := 0; tokens < 400_000; i++ {
		for _, it := range workload.Step(i) {
			raw = append(raw, it)
			tokens += s.cfg.Counter.Item(it)
		}
	}
	items := parsedItems(b, append(workload.Preamble(), raw...))
	total := s.engine.CountItems(items)
	bodyBytes := 0
	for _, it := range items {
		bodyBytes += len(it.Raw)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/responses", nil)
	b.Logf("history: %d items, %d tokens, %d bytes", len(items), total, bodyBytes)
	for _, ledger := range []struct {
		name  string
		bytes int
	}{{"ledger", 0}, {"no-ledger", -1}} {
		// The engine copies LedgerBytes when New builds it, so each variant needs its own
		// server; it shares the counter, so the counts stay cached.
		s := s
		if ledger.bytes != 0 {
			s = benchServerWith(b, instantSummarizer{summary: benchSummary}, s.cfg.Counter, ledger.bytes)
		}
		b.Run(ledger.name, func(b *testing.B) {
			b.SetBytes(int64(bodyBytes))
			b.ReportAllocs()
			c0 := cputime.Process()
			for b.Loop() {
				c, err := s.compactItems(context.Background(), r, compactRequest{model: "m", items: items, tokensBefore: total})
				if err != nil || c.item == nil {
					b.Fatalf("compact: %v", err)
				}
			}
			cputime.Report(b, c0)
		})
	}
}
