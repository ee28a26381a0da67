// Package eventlog records the event log: what the operator console shows of a conversation
// (internal/console), written into the archive's database (archive.EventLog) from the few places
// every compaction, memo application and recall search passes.
//
// Recording never slows a turn: events go into a bounded queue that one goroutine writes in
// batches; when the queue is full the event is dropped and counted
// (compactd_events_dropped_total), and a write that fails drops its batch the same way. The
// rows are built here from plain values (Source: the request's tenant, owner, route, client kind
// and API) and the engine's results; nothing here sees a request.
package eventlog

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/compactd/compactd/internal/archive"
)

// Sink is where a Recorder writes its events. *archive.EventLog is one.
type Sink interface {
	Append(ctx context.Context, evs []archive.Event) error
}

const (
	queueLen   = 1024 // events waiting to be written
	batchLen   = 64   // written in one transaction
	writeLimit = 10 * time.Second
)

// Recorder queues events for one writer goroutine. It is safe for concurrent use. A nil
// *Recorder records nothing: every method is a no-op on it (Dropped is 0, Sink nil).
type Recorder struct {
	sink    Sink
	q       chan archive.Event
	dropped atomic.Int64
	counter prometheus.Counter // nil without a registry
	log     func(msg string, args ...any)

	mu     sync.Mutex // guards closed against add racing close
	closed bool
	done   chan struct{}
}

// New starts a recorder that writes to sink, registers compactd_events_dropped_total on reg
// (when not nil), and reports a failed write to warn (never with event content). Close stops it.
func New(sink Sink, reg *prometheus.Registry, warn func(msg string, args ...any)) *Recorder {
	r := &Recorder{sink: sink, q: make(chan archive.Event, queueLen), log: warn, done: make(chan struct{})}
	if reg != nil {
		r.counter = prometheus.NewCounter(prometheus.CounterOpts{Name: "compactd_events_dropped_total",
			Help: "Event log rows (the operator console's timeline) dropped because the write queue was full or the write failed."})
		reg.MustRegister(r.counter)
	}
	go r.run()
	return r
}

// Sink is the sink the recorder writes to (nil for a nil recorder).
func (r *Recorder) Sink() Sink {
	if r == nil {
		return nil
	}
	return r.sink
}

// Dropped is how many events were dropped so far: the queue full, the recorder closed, or
// their write failed.
func (r *Recorder) Dropped() int64 {
	if r == nil {
		return 0
	}
	return r.dropped.Load()
}

// Add queues e, or drops and counts it when the queue is full or the recorder closed. It never
// blocks on the write.
func (r *Recorder) Add(e archive.Event) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		r.drop(1)
		return
	}
	select {
	case r.q <- e:
	default:
		r.drop(1)
	}
}

func (r *Recorder) drop(n int) {
	r.dropped.Add(int64(n))
	if r.counter != nil {
		r.counter.Add(float64(n))
	}
}

func (r *Recorder) run() {
	defer close(r.done)
	batch := make([]archive.Event, 0, batchLen)
	for e := range r.q {
		batch = append(batch[:0], e)
	more:
		for len(batch) < batchLen {
			select {
			case e, ok := <-r.q:
				if !ok {
					break more
				}
				batch = append(batch, e)
			default:
				break more
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), writeLimit)
		err := r.sink.Append(ctx, batch)
		cancel()
		if err != nil {
			r.drop(len(batch))
			r.log("event log: write failed; the console's timeline misses these events", "events", len(batch), "err", err)
		}
	}
}

// Close stops taking events (later ones are dropped) and waits, until ctx is done, for the
// queued ones to be written. Safe to call more than once.
func (r *Recorder) Close(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.q)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return errors.New("event log: still writing")
	}
}
