package proxy

import (
	"net/http"
	"time"
)

// Writes to a client that stops reading. net/http sets no write deadline of its own unless the
// server has a WriteTimeout, which bounds the whole response and would cut long streams; so a
// client that stops reading a stream (a hung agent, a laptop that went to sleep behind a NAT
// that keeps the connection) blocked the handler's next write forever, and with it the upstream
// request and whatever the turn holds. Here every write to the client must complete within
// Config.StreamWriteTimeout: the response writer (obsWriter, middleware.go) moves the
// connection's write deadline forward before each write, so it bounds one write, not the
// response, and a stream may pause for as long as its upstream does. A write past the deadline
// fails; net/http then cancels the request's context, which cancels the upstream call, and
// closes the connection.

// DefaultStreamWriteTimeout is Config.StreamWriteTimeout's default: far beyond what a reading
// client needs to take one event or 32 KiB of a body, short enough that a gone client does not
// hold a stream for long.
const DefaultStreamWriteTimeout = 60 * time.Second

// writeDeadline is one response's write deadline. Setting a deadline is a call into the
// runtime's poller, so it is moved only when a sixteenth of the timeout has passed since it was
// last set: each write then has at least 15/16 of the timeout. It is lifted when the handler
// returns (clear), so the next request on the connection starts without one.
type writeDeadline struct {
	timeout time.Duration       // <= 0: none
	rw      http.ResponseWriter // net/http's writer, beneath obsWriter
	set     time.Time           // when the deadline was last set; zero: none is set
	off     bool                // the writer does not support deadlines
}

// arm makes sure the deadline is at least 15/16 of the timeout away, before a write.
func (d *writeDeadline) arm() {
	if d.timeout <= 0 || d.off {
		return
	}
	now := time.Now()
	if !d.set.IsZero() && now.Sub(d.set) < d.timeout/16 {
		return
	}
	if setWriteDeadline(d.rw, now.Add(d.timeout)) != nil {
		d.off = true // e.g. a test's recorder: no deadline
		return
	}
	d.set = now
}

// clear lifts the deadline; called when the handler returns.
func (d *writeDeadline) clear() {
	if !d.set.IsZero() {
		_ = setWriteDeadline(d.rw, time.Time{})
		d.set = time.Time{}
	}
}

// setWriteDeadline is http.ResponseController.SetWriteDeadline without the controller, which
// NewResponseController allocates on every request: the writer's own SetWriteDeadline, found
// through Unwrap as the controller finds it.
func setWriteDeadline(rw http.ResponseWriter, t time.Time) error {
	for {
		switch x := rw.(type) {
		case interface{ SetWriteDeadline(time.Time) error }:
			return x.SetWriteDeadline(t)
		case interface{ Unwrap() http.ResponseWriter }:
			rw = x.Unwrap()
		default:
			return http.ErrNotSupported
		}
	}
}
