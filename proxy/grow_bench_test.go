package proxy

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/compactd/compactd/bench/cputime"
	"github.com/compactd/compactd/bench/workload"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/crypto"
)

// BenchmarkGrowingTurn is one turn of a growing 2 MB conversation (bench/workload's Grower: the
// last request plus one turn's items) through compactd's handler with an in-process upstream, on
// each API: the steady state the skim cache is for, where BenchmarkTurn's bodies (one history
// plus a different item each) mostly miss it. The side-by-side growing rows measure the same
// turns across processes.
func BenchmarkGrowingTurn(b *testing.B) {
	key, _ := crypto.GenerateKey()
	ring, _ := crypto.NewKeyring(key)
	up, _ := url.Parse("http://upstream.invalid")
	counter := compact.NewCounter(compact.CounterOptions{})
	defer counter.Close()
	s, err := New(Config{Upstream: up, AnthropicUpstream: up, Transport: cannedUpstream{}, Sealer: ring, Summarizer: instantSummarizer{}, Counter: counter,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	for _, api := range []struct {
		name string
		d    workload.Dialect
		path string
	}{{"responses", workload.Responses, "/v1/responses"}, {"messages", workload.Messages, "/v1/messages"}, {"chat", workload.Chat, "/v1/chat/completions"}} {
		b.Run(api.name, func(b *testing.B) {
			g := workload.NewGrower(api.d, 1, workload.GrowOptions{From: 1800 << 10, To: 2200 << 10})
			var bodies [][]byte
			for range 64 { // one conversation from 1.8 MB on; a turn is its request after the last
				bodies = append(bodies, bytes.Clone(g.Next()))
			}
			conn := ConnContext(context.Background(), nil) // one kept-alive connection, as serve has it
			send := func(body []byte) {
				req := httptest.NewRequestWithContext(conn, http.MethodPost, api.path, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer sk-bench")
				w := httptest.NewRecorder()
				s.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			send(bodies[0])
			b.SetBytes(int64(len(bodies[len(bodies)/2])))
			b.ReportAllocs()
			i := 1
			c0 := cputime.Process()
			for b.Loop() {
				if i == len(bodies) {
					b.StopTimer()
					send(bodies[0]) // the conversation again from its start: its skim is remembered anew
					i = 1
					b.StartTimer()
				}
				send(bodies[i])
				i++
			}
			cputime.Report(b, c0)
		})
	}
}
