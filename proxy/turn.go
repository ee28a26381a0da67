package proxy

import (
	"net/http"
	"sync"
	"time"
)

// keepAlive holds a streaming response open while compactd waits on the summariser. Nothing is
// sent for the first interval, so a quick summariser (or a quick failure) still gets a proper
// HTTP status; after that the headers are committed and tick's bytes (SSE comments, or
// response.compaction.compacting events) are written every interval.
type keepAlive struct {
	mu        sync.Mutex
	w         http.ResponseWriter
	tick      func(first bool) []byte
	committed bool
	stop      chan struct{}
	done      chan struct{}
}

func startKeepAlive(w http.ResponseWriter, interval time.Duration, tick func(first bool) []byte) *keepAlive {
	k := &keepAlive{w: w, tick: tick, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(k.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-t.C:
				k.mu.Lock()
				first := !k.committed
				if first {
					commitEventStream(w)
					k.committed = true
				}
				_, err := w.Write(k.tick(first))
				if err == nil {
					err = http.NewResponseController(w).Flush()
				}
				k.mu.Unlock()
				if err != nil {
					return // client gone; the request context cancels the rest
				}
			}
		}
	}()
	return k
}

// Stop ends the keep-alives and reports whether the response was committed. After Stop returns
// no other goroutine writes to w.
func (k *keepAlive) Stop() bool {
	close(k.stop)
	<-k.done
	return k.committed
}

// committedWriter passes writes through but swallows the header write the ReverseProxy makes
// after compactd has already committed a 200 stream.
type committedWriter struct{ http.ResponseWriter }

func (c committedWriter) WriteHeader(int) {}

func (c committedWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// commitEventStream sends the 200 and headers of an SSE response compactd writes itself (a held
// turn's keep-alive, or an answer compactd renders): nothing after it may change the status.
func commitEventStream(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
}
