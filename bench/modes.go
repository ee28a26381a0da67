package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/bench/workload"
	"github.com/compactd/compactd/internal/fakeupstream"
)

// warmPrefix measures the steady state of a long agent session: a WarmSize history compactd has
// seen before (its token counts cached) plus one new tool round trip (call and output) per
// request, below the
// threshold, one request at a time. It returns the direct cell and the compactd cell; the
// difference of their AllocPerReq is compactd's allocation per request.
func warmPrefix(ctx context.Context, e *env, o Options, progress io.Writer) []Cell {
	// Answered: more items follow the history, so a call it ends with must have its output, or
	// the (strict) upstream refuses the direct target's requests as the real API would.
	hist := workload.Answered(workload.Items(o.WarmSize - 1200))
	marker := []byte(`{"type":"bench_marker"}`)
	reqs := map[string]*requester{}
	targets := []string{Direct, BelowThresh}
	for _, t := range targets {
		whole := bodyFor(t, append(hist[:len(hist):len(hist)], marker), false)
		at := bytes.Index(whole, marker)
		prefix, suffix := whole[:at], whole[at+len(marker):]
		var seq atomic.Int64 // distinct across rounds, so every request adds an item never seen
		r := &requester{client: newClient(4), url: e.urls[t] + "/v1/responses", body: func(int) []byte {
			it := workload.NewRound(int(seq.Add(1)))
			b := make([]byte, 0, len(prefix)+len(it)+len(suffix))
			return append(append(append(b, prefix...), it...), suffix...)
		}}
		// The history turn the session already had: counted (and cached) once before.
		// (Without the marker: it is a placeholder for splicing, not an item the API knows.)
		histBody := bodyFor(t, hist, false)
		closedLoop(ctx, &collector{}, &requester{client: r.client, url: r.url, body: func(int) []byte { return histBody }}, 1, min(300*time.Millisecond, o.Duration))
		time.Sleep(100 * time.Millisecond) // let the background counter finish the history
		reqs[t] = r
	}
	w := Workload{Size: o.WarmSize, Conc: 1}
	cells := measureAll(ctx, e, targets, w, reqs, 4, o.Duration)
	for _, c := range cells {
		fmt.Fprintf(progress, "warm %-23s %-26s %8.1f req/s p50 %v\n", w, c.Target, c.Throughput, c.P50)
	}
	return cells
}

// StreamResult is the long-stream mode for one target: Streams concurrent streaming requests
// that each last StreamFor, with the process RSS along the way.
type StreamResult struct {
	Target  string
	Streams int
	Errors  int
	// RSS before the streams; when every stream had its first byte (all open); later, when the
	// first-opened stream is 90% through (all still open: flat means Late equals Early); the peak;
	// and after they ended.
	RSSStart, RSSEarly, RSSLate, RSSPeak, RSSEnd int64
	// Ramp is how long it took until all streams were open; Elapsed until all had ended.
	Ramp, Elapsed time.Duration
}

// longStreams opens o.Streams streams at once through each of direct and compactd, against a fake
// that paces its deltas to last o.StreamFor.
func longStreams(ctx context.Context, o Options, progress io.Writer) ([]StreamResult, error) {
	const deltas = 50
	e, err := newEnv(fakeupstream.Options{Deltas: deltas, TokenDelay: o.StreamFor / deltas})
	if err != nil {
		return nil, err
	}
	defer e.close()
	var out []StreamResult
	for _, t := range []string{Direct, BelowThresh} {
		body := bodyFor(t, workload.Items(1<<10), true)
		var opened atomic.Int64
		allOpen := make(chan struct{})
		r := &requester{client: newClient(o.Streams), url: e.urls[t] + "/v1/responses", body: func(int) []byte { return body },
			firstByte: func() {
				if opened.Add(1) == int64(o.Streams) {
					close(allOpen)
				}
			}}
		e.fake.Reset()
		debug.FreeOSMemory()
		res := StreamResult{Target: t, Streams: o.Streams, RSSStart: rssBytes()}
		rss := sampleRSS(20 * time.Millisecond)
		col := &collector{}
		var wg sync.WaitGroup
		start := time.Now()
		for i := range o.Streams {
			wg.Go(func() { col.add(r.do(ctx, i, time.Now())) })
		}
		select {
		case <-allOpen:
		case <-time.After(o.StreamFor):
		case <-ctx.Done():
		}
		tOpen := time.Now()
		res.Ramp = tOpen.Sub(start)
		res.RSSEarly = rssBytes()
		sleepUntil(ctx, start.Add(o.StreamFor*9/10))
		res.RSSLate = rssBytes()
		wg.Wait()
		res.Elapsed = time.Since(start)
		res.RSSPeak = rss.Peak()
		res.RSSEnd = rssBytes()
		res.Errors = col.errs
		r.client.CloseIdleConnections()
		out = append(out, res)
		fmt.Fprintf(progress, "streams %-20d %-26s RSS %d→%d MB, %d errors\n", o.Streams, t, res.RSSStart>>20, res.RSSPeak>>20, res.Errors)
	}
	if err := refusedErr(e.fake); err != nil {
		return out, err
	}
	return out, ctx.Err()
}

func sleepUntil(ctx context.Context, t time.Time) {
	select {
	case <-time.After(time.Until(t)):
	case <-ctx.Done():
	}
}
