package proxy

import (
	"context"
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

// benchSummary is a summary of realistic size: 16 KB.
var benchSummary = strings.Repeat("The handler now returns positioned errors; tests pass. ", 300)

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
				c, err := s.engine.Compact(context.Background(), engine.Request{Dialect: dialectOpenAI.Engine(), Model: "m", Items: items,
					TokensBefore: total, Retain: s.cfg.RetainTokens, Finish: func(c *engine.Compaction) (int, int) { return 0, len(c.Compacted) }})
				if err != nil || c.EncryptedContent == "" {
					b.Fatalf("compact: %v", err)
				}
			}
			cputime.Report(b, c0)
		})
	}
}
