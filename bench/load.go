package bench

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"
)

// sample is the outcome of one request.
type sample struct {
	lat  time.Duration // to the last byte of the response
	ttfb time.Duration // to the first byte of the response body
	err  bool
}

// Latencies is a set of latency samples, sorted on first use. Percentiles are exact (nearest
// rank over all samples), not bucketed: a run keeps at most a few hundred thousand samples, which
// costs less memory than a fine-grained histogram and needs no library.
type Latencies struct {
	d      []time.Duration
	sorted bool
}

func (l *Latencies) add(d time.Duration) { l.d = append(l.d, d); l.sorted = false }

// Quantile returns the q-quantile (0 <= q <= 1) by nearest rank, 0 when there are no samples.
func (l *Latencies) Quantile(q float64) time.Duration {
	if len(l.d) == 0 {
		return 0
	}
	if !l.sorted {
		slices.Sort(l.d)
		l.sorted = true
	}
	i := int(q*float64(len(l.d))+0.999999) - 1
	return l.d[min(max(i, 0), len(l.d)-1)]
}

// requester sends one prepared request and reads the whole response.
type requester struct {
	client *http.Client
	method string // "" is POST
	url    string
	body   func(i int) []byte // the body of request i
	// firstByte, if set, is called when a response's first body byte arrives.
	firstByte func()
}

func newClient(maxConns int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = maxConns * 2
	t.MaxIdleConnsPerHost = maxConns
	t.DisableCompression = true // compression would measure gzip, not the proxy
	return &http.Client{Transport: t}
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// do sends request i; lat and ttfb are measured from start (the scheduled send time in an open
// loop, so a late send counts against latency rather than vanishing from it).
//
// A zero start is "now, once the body is built": a closed loop's latency is the target's, not
// the time the load generator took to render a growing conversation's next body.
func (r *requester) do(ctx context.Context, i int, start time.Time) sample {
	method, body := r.method, r.body(i)
	if start.IsZero() {
		start = time.Now()
	}
	if method == "" {
		method = http.MethodPost
	}
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.url, rd)
	if err != nil {
		return sample{err: true}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer sk-bench")
	resp, err := r.client.Do(req)
	if err != nil {
		return sample{err: true}
	}
	defer resp.Body.Close()
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var s sample
	first := true
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 && first {
			s.ttfb = time.Since(start)
			first = false
			if r.firstByte != nil {
				r.firstByte()
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return sample{err: true}
		}
	}
	s.lat = time.Since(start)
	s.err = resp.StatusCode != http.StatusOK
	return s
}

// collector gathers samples from concurrent workers.
type collector struct {
	mu        sync.Mutex
	lat, ttfb Latencies
	n, errs   int
	// byIndex and ttfbByIndex, when made (a fixed count of requests), keep each request's
	// latency and time to first byte by its index (0: failed or not sent), so two targets sent
	// the same bodies can be compared request by request.
	byIndex, ttfbByIndex []time.Duration
}

func (c *collector) addAt(i int, s sample) {
	c.add(s)
	if s.err || i >= len(c.byIndex) {
		return
	}
	c.mu.Lock()
	c.byIndex[i], c.ttfbByIndex[i] = s.lat, s.ttfb
	c.mu.Unlock()
}

func (c *collector) add(s sample) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if s.err {
		c.errs++
		return
	}
	c.lat.add(s.lat)
	c.ttfb.add(s.ttfb)
}

// closedLoop runs conc workers, each sending its next request as soon as the previous one is
// answered, for d. It measures capacity: throughput at a fixed number of outstanding requests.
func closedLoop(ctx context.Context, c *collector, r *requester, conc int, d time.Duration) time.Duration {
	return closedLoopN(ctx, c, r, conc, d, 0)
}

// closedLoopN is closedLoop that stops after n requests (0: no limit) or d, whichever is first:
// targets given the same n and the same bodies measure the same multiset of requests, so their
// p50s compare like for like even when one is faster.
func closedLoopN(ctx context.Context, c *collector, r *requester, conc int, d time.Duration, n int) time.Duration {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var next struct {
		sync.Mutex
		i int
	}
	start := time.Now()
	deadline := start.Add(d)
	for range conc {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				next.Lock()
				i := next.i
				next.i++
				next.Unlock()
				if n > 0 && i >= n {
					return
				}
				c.addAt(i, r.do(ctx, i, time.Time{}))
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// openLoop sends requests at a fixed rate for d whatever the answers do, as independent clients
// would. Latency counts from each request's scheduled time. At most maxInflight are outstanding;
// a request that finds no slot is not sent and is counted in missed (the target, or this machine,
// could not keep up with the rate).
//
// elapsed is the schedule's window d, or longer when answers came in after it: an open loop's
// throughput is what completed over the time it was offered, never 1/latency (with a short d the
// old "until the last answer" elapsed made a one-request round report 1/latency as req/s).
func openLoop(ctx context.Context, c *collector, r *requester, rate float64, d time.Duration, maxInflight int) (elapsed time.Duration, missed int) {
	n := max(1, int(math.Round(rate*d.Seconds())))
	sem := make(chan struct{}, maxInflight)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if wait := time.Until(at); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				wg.Wait()
				return time.Since(start), missed
			}
		}
		select {
		case sem <- struct{}{}:
		default:
			missed++
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			c.add(r.do(ctx, i, at))
		})
	}
	wg.Wait()
	return max(d, time.Since(start)), missed
}
