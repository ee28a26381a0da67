package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"

	"github.com/compactd/compactd/bench/cputime"
	"github.com/compactd/compactd/bench/workload"
	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/engine"
	"github.com/tidwall/gjson"
)

// cannedUpstream answers every request in-process with a small Responses JSON object after
// draining the body, so BenchmarkTurn's allocations are compactd's own (and the ReverseProxy's),
// not a server's or a socket's.
type cannedUpstream struct{}

const cannedResponse = `{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}]}`

func (cannedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(strings.NewReader(cannedResponse)),
		ContentLength: int64(len(cannedResponse)), Request: r}, nil
}

// BenchmarkTurn is one whole /v1/responses turn through compactd's handler with an in-process
// upstream: "pass-through" (no context_management: skim, forward), "below-threshold" (skim,
// count, splice out context_management, forward) with a history seen before plus one new item per
// request — the steady state of an agent session; "handoff" carries a compaction item compactd
// sealed after the first half of the history (open, verify, window, handoff message, splice).
// bodies/op is allocation in units of the body size (the budget is 2).
func BenchmarkTurn(b *testing.B) {
	key, _ := crypto.GenerateKey()
	ring, _ := crypto.NewKeyring(key)
	up, _ := url.Parse("http://upstream.invalid")
	counter := compact.NewCounter(compact.CounterOptions{})
	s, err := New(Config{Upstream: up, Transport: cannedUpstream{}, Sealer: ring, Summarizer: instantSummarizer{}, Counter: counter})
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{10 << 10, 1 << 20, 2 << 20, 4 << 20} {
		for _, mode := range []string{"pass-through", "below-threshold", "handoff"} {
			b.Run(fmt.Sprintf("%s/%s", sizeLabel(size), mode), func(b *testing.B) {
				var bodies [][]byte
				if mode == "handoff" {
					bodies = handoffBodies(b, s, size, counter)
				} else {
					bodies = turnBodies(size, mode == "below-threshold", counter)
				}
				b.SetBytes(int64(len(bodies[0])))
				b.ReportAllocs()
				i := 0
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				c0 := cputime.Process()
				for b.Loop() {
					body := bodies[i%len(bodies)]
					i++
					req := httptest.NewRequest(http.MethodPost, "/v1/responses", bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					w := httptest.NewRecorder()
					s.ServeHTTP(w, req)
					if w.Code != http.StatusOK {
						b.Fatalf("status %d: %s", w.Code, w.Body)
					}
				}
				cputime.Report(b, c0)
				runtime.ReadMemStats(&m1)
				b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(i)/float64(len(bodies[0])), "bodies/op")
			})
		}
	}
}

// turnBodies returns requests of about size bytes: one history, counted into counter as earlier
// turns would have, plus a different new item each. They are built ahead so the timed loop
// allocates only compactd's share.
func turnBodies(size int, threshold bool, counter *compact.Counter) [][]byte {
	hist := workload.Items(size - 1200)
	o := workload.BodyOptions{}
	if threshold {
		o.CompactThreshold = 1_000_000_000
	}
	marker := []byte(`{"type":"bench_marker"}`)
	whole := workload.Body(append(hist[:len(hist):len(hist)], marker), o)
	at := bytes.Index(whole, marker)
	prefix, suffix := whole[:at], whole[at+len(marker):]
	for _, it := range hist {
		counter.Item(it)
	}
	bodies := make([][]byte, 16)
	for i := range bodies {
		it := workload.NewItem(i)
		bodies[i] = append(append(append(make([]byte, 0, len(prefix)+len(it)+len(suffix)), prefix...), it...), suffix...)
	}
	return bodies
}

// handoffBodies are turnBodies whose history holds, after its first half, a compaction item s
// sealed over that half: each turn opens it and renders the handoff.
func handoffBodies(b *testing.B, s *Server, size int, counter *compact.Counter) [][]byte {
	hist := workload.Items(size - 1200)
	half := hist[:len(hist)/2]
	items := make([]api.Item, len(half))
	for i, raw := range half {
		items[i] = api.Item{Raw: raw, Type: gjson.GetBytes(raw, "type").Str, Role: gjson.GetBytes(raw, "role").Str}
	}
	c, err := s.engine.Compact(context.Background(), engine.Request{Dialect: dialectOpenAI.Engine(), Tenant: s.cfg.Tenant, Model: "bench",
		Items: items, AllowEmpty: true, Explicit: true, Finish: func(c *engine.Compaction) (int, int) { return 0, len(c.Compacted) }})
	if err != nil {
		b.Fatal(err)
	}
	withItem := append(append(append([][]byte{}, half...), api.CompactionItem(c.ID, c.EncryptedContent)), hist[len(hist)/2:]...)
	marker := []byte(`{"type":"bench_marker"}`)
	whole := workload.Body(append(withItem, marker), workload.BodyOptions{})
	at := bytes.Index(whole, marker)
	prefix, suffix := whole[:at], whole[at+len(marker):]
	for _, it := range hist {
		counter.Item(it)
	}
	bodies := make([][]byte, 16)
	for i := range bodies {
		it := workload.NewItem(i)
		bodies[i] = append(append(append(make([]byte, 0, len(prefix)+len(it)+len(suffix)), prefix...), it...), suffix...)
	}
	return bodies
}

func sizeLabel(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMB", n>>20)
	}
	return fmt.Sprintf("%dKB", n>>10)
}
