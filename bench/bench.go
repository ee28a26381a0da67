// Package bench is compactd's end-to-end load generator (`compactd bench`). In one process, on
// loopback, it starts the fake upstream with zero delays, a bare httputil.ReverseProxy to it (the
// floor: what any Go proxy costs) and a compactd proxy.Server, and drives each — and the fake
// directly — with the same Codex-shaped Responses requests, closed loop at a fixed concurrency
// and open loop at fixed rates. Everything is reported relative to going direct, because the
// client and the fake upstream share the machine with the proxy under test.
//
// What is measured, honestly: all parts run in this one process, so CPU and RSS are the
// process's. Per-target CPU per request is process CPU (getrusage) over a phase divided by its
// requests; subtracting the direct phase's figure leaves the proxy's own cost, assuming the client
// and the fake cost the same per request in every phase (they do the same work). Peak RSS is
// sampled every 20 ms during a phase, after returning freed memory to the OS before it.
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/compactd/compactd/bench/cputime"
	"github.com/compactd/compactd/bench/workload"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// Options sets the size of a run.
type Options struct {
	Duration    time.Duration // per measured cell (one target, one workload)
	Concurrency int           // closed-loop workers
	Rates       []float64     // open-loop request rates per second
	Sizes       []int         // request body sizes in bytes

	WarmSize int // body size of the warm-prefix mode (0: skip the mode)

	Streams   int           // concurrent long streams (0: skip the mode)
	StreamFor time.Duration // how long each long stream lasts
}

// Defaults is the full run whose tables go into BENCHMARKS.md (about three minutes).
func Defaults() Options {
	return Options{
		Duration: 2 * time.Second, Concurrency: 8, Rates: []float64{50, 200},
		Sizes:    []int{2 << 10, 200 << 10, 2 << 20},
		WarmSize: 2 << 20, Streams: 500, StreamFor: 5 * time.Second,
	}
}

// Quick is a CI-sized run (a few seconds): every table, small numbers.
func Quick() Options {
	return Options{
		// 200 req/s over a 150 ms cell is 7-8 requests in each of its 4 rounds (at 40 req/s each
		// round scheduled one request).
		Duration: 150 * time.Millisecond, Concurrency: 4, Rates: []float64{200},
		Sizes:    []int{2 << 10, 200 << 10},
		WarmSize: 256 << 10, Streams: 20, StreamFor: 300 * time.Millisecond,
	}
}

// Target names, in the order they are measured.
const (
	Direct        = "direct"
	Bare          = "bare proxy"
	PassThrough   = "compactd pass-through"
	BelowThresh   = "compactd below-threshold"
	hugeThreshold = 1_000_000_000
)

// Targets lists the target names in order.
var Targets = []string{Direct, Bare, PassThrough, BelowThresh}

// Workload is one row group: a body size, JSON or SSE, closed or open loop.
type Workload struct {
	Size   int
	Stream bool
	Open   bool    // open loop at Rate; closed loop at Concurrency otherwise
	Rate   float64 // requests per second (open loop)
	Conc   int     // workers (closed loop)
}

func (w Workload) String() string {
	kind := "json"
	if w.Stream {
		kind = "sse"
	}
	if w.Open {
		return fmt.Sprintf("%s %s open %g/s", sizeName(w.Size), kind, w.Rate)
	}
	return fmt.Sprintf("%s %s closed c=%d", sizeName(w.Size), kind, w.Conc)
}

// Cell is one target under one workload.
type Cell struct {
	Workload Workload
	Target   string

	Requests, Errors, Missed int
	Elapsed                  time.Duration
	P50, P99                 time.Duration
	TTFB50, TTFB99           time.Duration // streams only
	Throughput               float64       // successful requests per second
	CPUPerReq                time.Duration // process CPU over the phase / requests
	PeakRSS                  int64
	AllocPerReq              float64 // Go heap bytes allocated over the phase / requests
}

// Report is the outcome of Run.
type Report struct {
	Machine Machine
	Options Options
	Cells   []Cell
	Skipped []string // open-loop cells not run, and why
	Warm    []Cell   // warm-prefix mode: direct and compactd below-threshold
	Streams []StreamResult
}

// env is the servers of a run.
type env struct {
	fake     *fakeupstream.Server
	urls     map[string]string // target -> base URL
	shutdown []func()
}

func (e *env) close() {
	for i := len(e.shutdown) - 1; i >= 0; i-- {
		e.shutdown[i]()
	}
}

// serve serves h on a fresh loopback port.
func (e *env) serve(h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	e.shutdown = append(e.shutdown, func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), nil
}

// newCompactd builds a compactd proxy.Server configured as `compactd serve` builds it (metrics
// registry, background token counting), in front of upstream.
func newCompactd(upstream string) (*proxy.Server, func(), error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, nil, err
	}
	key, err := crypto.GenerateKey()
	if err != nil {
		return nil, nil, err
	}
	ring, err := crypto.NewKeyring(key)
	if err != nil {
		return nil, nil, err
	}
	counter := compact.NewCounter(compact.CounterOptions{Background: true})
	sum, err := summarizer.New(summarizer.Config{BaseURL: upstream + "/v1", APIKey: "bench", Model: "bench"})
	if err != nil {
		return nil, nil, err
	}
	s, err := proxy.New(proxy.Config{
		Upstream: u, Sealer: ring, Summarizer: sum, Counter: counter,
		Registry: proxy.NewRegistry(),
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		counter.Close()
		return nil, nil, err
	}
	// The Server owns the Counter: Close stops it with the speculative jobs.
	return s, func() { _ = s.Close(context.Background()) }, nil
}

// newEnv starts the fake upstream with opt, the bare proxy and compactd.
func newEnv(opt fakeupstream.Options) (*env, error) {
	e := &env{urls: map[string]string{}}
	opt.DropBodies = true
	e.fake = fakeupstream.New(opt)
	fakeURL, stop, err := e.fake.Start()
	if err != nil {
		return nil, err
	}
	e.shutdown = append(e.shutdown, stop)
	e.urls[Direct] = fakeURL
	u, _ := url.Parse(fakeURL)
	// The same floor as the side-by-side runs: full duplex, or an SSE answer's early headers
	// race the transport's read of the request body and cut a stream now and then (bareproxy.go).
	if e.urls[Bare], err = e.serve(bareProxy(u)); err != nil {
		e.close()
		return nil, err
	}
	cd, closeCounter, err := newCompactd(fakeURL)
	if err != nil {
		e.close()
		return nil, err
	}
	e.shutdown = append(e.shutdown, closeCounter)
	if e.urls[PassThrough], err = e.serve(cd); err != nil {
		e.close()
		return nil, err
	}
	e.urls[BelowThresh] = e.urls[PassThrough]
	return e, nil
}

// bodyFor returns the request body a target gets: context_management only for the
// below-threshold target (the fake upstream, like a backend without native compaction, refuses
// it; compactd removes it before forwarding).
func bodyFor(target string, items [][]byte, stream bool) []byte {
	o := workload.BodyOptions{Stream: stream}
	if target == BelowThresh {
		o.CompactThreshold = hugeThreshold
	}
	return workload.Body(items, o)
}

// Run performs a whole run: the sweep (skipped when Sizes is empty), then the warm-prefix and
// long-stream modes. progress, if
// not nil, gets one line per measured cell.
func Run(ctx context.Context, o Options, progress io.Writer) (*Report, error) {
	if progress == nil {
		progress = io.Discard
	}
	rep := &Report{Machine: machine(), Options: o}
	e, err := newEnv(fakeupstream.Options{})
	if err != nil {
		return nil, err
	}
	defer e.close()
	maxConns := max(o.Concurrency, 64)
	clients := map[string]*http.Client{}
	for _, t := range Targets {
		clients[t] = newClient(maxConns)
	}
	for _, size := range o.Sizes {
		items := workload.Items(size - 1200)
		for _, stream := range []bool{false, true} {
			reqs := map[string]*requester{}
			for _, t := range Targets {
				body := bodyFor(t, items, stream)
				reqs[t] = &requester{client: clients[t], url: e.urls[t] + "/v1/responses", body: func(int) []byte { return body }}
				// Warm connections, the token-count cache and the allocator.
				closedLoop(ctx, &collector{}, reqs[t], o.Concurrency, min(200*time.Millisecond, o.Duration/2))
			}
			w := Workload{Size: size, Stream: stream, Conc: o.Concurrency}
			cells := measureAll(ctx, e, Targets, w, reqs, maxConns, o.Duration)
			directTput := cells[0].Throughput
			for _, rate := range o.Rates {
				ow := Workload{Size: size, Stream: stream, Open: true, Rate: rate}
				if rate > directTput {
					rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: above the %.0f req/s this machine sustained going direct", ow, directTput))
					continue
				}
				cells = append(cells, measureAll(ctx, e, Targets, ow, reqs, maxConns, o.Duration)...)
			}
			for _, c := range cells {
				fmt.Fprintf(progress, "%-28s %-26s %8.1f req/s p50 %v\n", c.Workload, c.Target, c.Throughput, c.P50)
			}
			rep.Cells = append(rep.Cells, cells...)
			if err := ctx.Err(); err != nil {
				return rep, err
			}
		}
	}
	if o.WarmSize > 0 {
		rep.Warm = warmPrefix(ctx, e, o, progress)
	}
	if o.Streams > 0 {
		s, err := longStreams(ctx, o, progress)
		if err != nil {
			return rep, err
		}
		rep.Streams = s
	}
	if err := refusedErr(e.fake); err != nil {
		return rep, err
	}
	rep.Machine.LoadEnd = loadAvg()
	return rep, ctx.Err()
}

// refusedErr reports the first request the strict fake upstream refused, if any: a run whose
// requests the real API would refuse measures error replies, not the proxy.
func refusedErr(f *fakeupstream.Server) error {
	if r := f.Refusals(); len(r) > 0 {
		return fmt.Errorf("bench: the fake upstream refused %d requests, as the real API would (first: %s %s: %s)", len(r), r[0].Method, r[0].Path, r[0].Refused)
	}
	return nil
}

// rounds is how many slices each cell's duration is cut into. Targets take turns slice by slice,
// so a change in the machine's load during a workload hits every target alike instead of
// whichever happened to run then.
const rounds = 4

// measureAll measures every target under w, interleaved in rounds.
func measureAll(ctx context.Context, e *env, targets []string, w Workload, reqs map[string]*requester, maxInflight int, d time.Duration) []Cell {
	accs := make([]acc, len(targets))
	for range rounds {
		for i, t := range targets {
			accs[i].run(ctx, e, w, reqs[t], maxInflight, d/rounds)
		}
	}
	cells := make([]Cell, len(targets))
	for i, t := range targets {
		cells[i] = accs[i].cell(t, w)
	}
	return cells
}

// acc accumulates one target's measurements over rounds.
type acc struct {
	col     collector
	elapsed time.Duration
	missed  int
	cpu     time.Duration
	alloc   uint64
	peak    int64
}

// run measures one slice with the process's CPU, allocation and RSS observed around it.
func (a *acc) run(ctx context.Context, e *env, w Workload, r *requester, maxInflight int, d time.Duration) {
	e.fake.Reset() // the request log would otherwise grow across the run
	debug.FreeOSMemory()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := cputime.Process()
	rss := sampleRSS(20 * time.Millisecond)
	if w.Open {
		el, missed := openLoop(ctx, &a.col, r, w.Rate, d, maxInflight)
		a.elapsed += el
		a.missed += missed
	} else {
		a.elapsed += closedLoop(ctx, &a.col, r, w.Conc, d)
	}
	a.peak = max(a.peak, rss.Peak())
	a.cpu += cputime.Process() - cpu0
	runtime.ReadMemStats(&m1)
	a.alloc += m1.TotalAlloc - m0.TotalAlloc
}

func (a *acc) cell(target string, w Workload) Cell {
	col := &a.col
	c := Cell{Workload: w, Target: target, Requests: col.n, Errors: col.errs, Missed: a.missed, Elapsed: a.elapsed,
		P50: col.lat.Quantile(0.5), P99: col.lat.Quantile(0.99), PeakRSS: a.peak}
	if w.Stream {
		c.TTFB50, c.TTFB99 = col.ttfb.Quantile(0.5), col.ttfb.Quantile(0.99)
	}
	if col.n > 0 {
		c.Throughput = float64(col.n-col.errs) / a.elapsed.Seconds()
		c.CPUPerReq = a.cpu / time.Duration(col.n)
		c.AllocPerReq = float64(a.alloc) / float64(col.n)
	}
	return c
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
