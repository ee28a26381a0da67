// Package loadtest drives many concurrent streaming conversations through compactd while the
// upstream model and the summariser misbehave, and checks what an agent would notice: every turn
// ends in a complete stream or a clean error in the API's dialect, and no compaction item compactd
// issues ever fails to open on the next turn.
//
// It is a library so the test (loadtest_test.go) and, later, a `compactd loadtest` command can
// share it. Everything binds to 127.0.0.1; nothing reaches the network.
package loadtest

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/fakeupstream"
)

// Fault kinds, as counted by FaultInjector.Counts.
const (
	FaultNone      = "none"
	Fault5xx       = "status_5xx"
	FaultRateLimit = "status_429"
	FaultSlow      = "slow_first_byte"
	FaultCut       = "cut_mid_event"
	FaultReset     = "connection_reset"
)

var faultKinds = []string{FaultNone, Fault5xx, FaultRateLimit, FaultSlow, FaultCut, FaultReset}

// Faults sets the probability of each fault per upstream request (model and summariser calls
// alike). Rates add up to at most 1; the rest of the requests are served untouched.
type Faults struct {
	Seed uint64
	// Status5xx answers 500, 502 or 503 with an error envelope in the route's dialect.
	Status5xx float64
	// RateLimit answers 429 with Retry-After: 1 (the fake upstream's own 429).
	RateLimit float64
	// SlowFirstByte holds the response for SlowDelay before serving it normally.
	SlowFirstByte float64
	SlowDelay     time.Duration
	// CutStream ends the response mid-event by aborting the connection: after 0–8 whole SSE
	// events for a stream, after half the body for JSON.
	CutStream float64
	// Reset hijacks the connection and closes it with SO_LINGER 0 (a TCP RST) before any answer.
	Reset float64
}

// DefaultFaults is the mix the load test runs: about one upstream request in four misbehaves.
func DefaultFaults(seed uint64) Faults {
	return Faults{
		Seed: seed, Status5xx: 0.06, RateLimit: 0.04, SlowFirstByte: 0.06, SlowDelay: 150 * time.Millisecond,
		CutStream: 0.05, Reset: 0.03,
	}
}

// FaultInjector is an http.Handler that wraps the fake upstream and injects faults with seeded
// randomness. Which request gets which fault depends on arrival order, which concurrency makes
// vary from run to run; the rates and the kinds do not.
type FaultInjector struct {
	next http.Handler
	f    Faults

	mu  sync.Mutex
	rng *rand.Rand

	counts   map[string]*atomic.Int64
	inflight sync.WaitGroup
}

// NewFaultInjector wraps next (normally a *fakeupstream.Server).
func NewFaultInjector(next http.Handler, f Faults) *FaultInjector {
	fi := &FaultInjector{next: next, f: f, rng: rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15)), counts: map[string]*atomic.Int64{}}
	for _, k := range faultKinds {
		fi.counts[k] = new(atomic.Int64)
	}
	return fi
}

// Counts returns how many requests got each fault kind so far (FaultNone: untouched ones).
func (fi *FaultInjector) Counts() map[string]int64 {
	out := make(map[string]int64, len(fi.counts))
	for k, v := range fi.counts {
		out[k] = v.Load()
	}
	return out
}

// roll picks the fault for one request and, for faults with a parameter, the parameter.
func (fi *FaultInjector) roll() (kind string, n int) {
	fi.mu.Lock()
	u := fi.rng.Float64()
	n = fi.rng.IntN(9)
	fi.mu.Unlock()
	for _, c := range []struct {
		kind string
		p    float64
	}{{Fault5xx, fi.f.Status5xx}, {FaultRateLimit, fi.f.RateLimit}, {FaultSlow, fi.f.SlowFirstByte}, {FaultCut, fi.f.CutStream}, {FaultReset, fi.f.Reset}} {
		if u < c.p {
			return c.kind, n
		}
		u -= c.p
	}
	return FaultNone, n
}

// ServeHTTP implements http.Handler. It must be served by an http.Server (not a
// ResponseRecorder): cuts abort the handler and resets hijack the connection.
func (fi *FaultInjector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fi.inflight.Add(1)
	defer fi.inflight.Done()
	kind, n := fi.roll()
	fi.counts[kind].Add(1)
	switch kind {
	case Fault5xx:
		r.Header.Set(fakeupstream.HeaderStatus, strconv.Itoa([]int{500, 502, 503}[n%3]))
	case FaultRateLimit:
		r.Header.Set(fakeupstream.HeaderStatus, "429")
	case FaultSlow:
		t := time.NewTimer(fi.f.SlowDelay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			panic(http.ErrAbortHandler)
		}
	case FaultReset:
		reset(w)
		return
	case FaultCut:
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if gjson.GetBytes(body, "stream").Bool() {
			r.Header.Set(fakeupstream.HeaderCut, strconv.Itoa(n))
			break
		}
		cutJSON(w, r, fi.next)
		return
	}
	fi.next.ServeHTTP(w, r)
}

// reset closes the connection with a TCP RST, the way a crashed or overloaded load balancer
// drops it.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// cutJSON serves a non-streaming request into memory, then sends its headers (with the full
// Content-Length) and half its body, and aborts: the client reads a truncated body.
func cutJSON(w http.ResponseWriter, r *http.Request, next http.Handler) {
	rec := &memWriter{h: http.Header{}, status: http.StatusOK}
	next.ServeHTTP(rec, r)
	for k, v := range rec.h {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(rec.body.Len()))
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes()[:rec.body.Len()/2])
	_ = http.NewResponseController(w).Flush()
	panic(http.ErrAbortHandler)
}

// memWriter is a minimal in-memory http.ResponseWriter (httptest stays out of library code).
type memWriter struct {
	h      http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (m *memWriter) Header() http.Header { return m.h }
func (m *memWriter) WriteHeader(code int) {
	if !m.wrote {
		m.status, m.wrote = code, true
	}
}
func (m *memWriter) Write(p []byte) (int, error) { m.wrote = true; return m.body.Write(p) }
func (m *memWriter) Flush()                      {}

// Wait blocks until every request the injector is handling has returned.
func (fi *FaultInjector) Wait() { fi.inflight.Wait() }
