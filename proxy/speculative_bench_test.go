package proxy_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// BenchmarkCrossingTurn measures what the turn that crosses the threshold costs the client, with
// a summariser that takes a realistic 2 s, with and without speculative compaction. Each
// iteration plays two turns: one past 85% of the threshold (which starts the speculation), a pause
// while the user reads and types (not timed), then the crossing turn (timed).
//
//	go test -run '^$' -bench CrossingTurn -benchtime 5x ./proxy
func BenchmarkCrossingTurn(b *testing.B) {
	for _, tc := range []struct {
		name     string
		fraction float64
	}{{"speculative=off", -1}, {"speculative=on", 0.85}} {
		b.Run(tc.name, func(b *testing.B) {
			h := newHarness(b, fakeupstream.Options{SummaryDelay: 2 * time.Second}, func(c *proxy.Config) {
				c.RetainTokens = 1000
				c.Speculative.Fraction = tc.fraction
			})
			ctx := context.Background()
			send := func(items []any) *responses.Response {
				resp, err := h.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", items),
					option.WithJSONSet("context_management", []map[string]any{{"type": "compaction", "compact_threshold": 6000}}))
				if err != nil {
					b.Fatal(err)
				}
				return resp
			}
			var total time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				items := toAny(history(5, 400))
				items = append(items, map[string]any{"role": "user", "content": "variant " + string(rune('a'+i%26))})
				r1 := send(items)
				// The user reads the answer and types the next message: longer than the summariser takes.
				time.Sleep(2500 * time.Millisecond)
				for _, o := range r1.Output {
					items = append(items, json.RawMessage(o.RawJSON()))
				}
				items = append(items, map[string]any{"role": "user", "content": "U-CROSS " + strings.Repeat("more words here ", 400)})
				b.StartTimer()
				start := time.Now()
				r2 := send(items)
				total += time.Since(start)
				if r2.Output[0].Type != "compaction" {
					b.Fatal("the crossing turn did not compact")
				}
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "crossing-ms/op")
		})
	}
}
