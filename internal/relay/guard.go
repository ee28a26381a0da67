package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/sse"
)

// GuardOptions are what a stream guard needs of the route's dialect, as plain values.
type GuardOptions struct {
	// Terminal reports whether an event's trimmed data (valid JSON, empty or [DONE]) ends the
	// dialect's stream normally: an EOF after one is the stream's end, before one a break. Not
	// consulted with CapOnly; nil is an event that never ends the stream.
	Terminal func(data []byte) bool
	// Fail renders the error events the stream ends with when the upstream's broke off or sent
	// an event the guard does not pass, numbered from seq (the next sequence number after the
	// upstream's own, 0 when it sent none). why is "" when the stream broke off, else what was
	// wrong with the upstream's event, worded to follow "the upstream's response " (as in "sent
	// an event that is not valid JSON"). Called at most once.
	Fail func(seq int, why string) []byte
	// Validate ends the stream (Fail) at an event whose data is not valid JSON within the depth
	// bound: for a turn compactd rewrites, whose rewriters would otherwise splice into it blindly.
	Validate bool
	// CapOnly enforces the event cap alone (a request compactd passed through untouched): an
	// event over MaxEvent still ends the stream with Fail's events, but however else the
	// upstream's stream ends — cut mid-event, reset, or without its terminal event, which some
	// Chat Completions backends never send — it ends so for the client too, as it would without
	// compactd in between.
	CapOnly bool
}

// Guardable reports whether resp is a stream Guard guards: a successful event stream.
func Guardable(resp *http.Response) bool {
	return resp.StatusCode/100 == 2 && IsEventStream(resp.Header)
}

// Guard wraps the body of resp, when it is a successful SSE response (Guardable), in a stream
// guard; any other response is left alone. resp.Request's context says whether the client is
// still there: when it has gone, a break is not reported (nobody to tell) and the body's reads
// end with the context's error.
//
// The guard sits between the upstream body and everything above it (the rewriters, then the
// client). It passes whole events only, and when the upstream stream breaks — a read error such
// as a reset or a cut mid-event, a clean EOF before the terminal event, or an event over
// MaxEvent — it drops the partial event and ends the stream with opts.Fail's error events
// instead. Without it httputil.ReverseProxy aborts the client's connection on an upstream read
// error, so an agent sees a truncated stream (unexpected EOF) rather than an error it can retry
// on: found by the fault-injected load test (loadtest/). An EventRewriter over the guarded body
// takes the guard's events as they are, without parsing the stream again.
func Guard(resp *http.Response, opts GuardOptions) {
	if !Guardable(resp) {
		return
	}
	resp.Body = &streamGuard{src: resp.Body, rd: sse.NewReaderSize(resp.Body, MaxEvent),
		ctx: resp.Request.Context(), isTerminal: opts.Terminal, validate: opts.Validate, capOnly: opts.CapOnly, fail: opts.Fail}
}

// streamGuard is Guard's body; see Guard and GuardOptions.
type streamGuard struct {
	src        io.ReadCloser
	rd         *sse.Reader
	ctx        context.Context
	isTerminal func(data []byte) bool // whose terminal events end the stream normally
	validate   bool
	capOnly    bool
	fail       func(seq int, why string) []byte

	closing  *sse.Reader // the closing error events, once the stream ended
	out      []byte      // the rest of the current event, for Read
	nextSeq  int
	terminal bool // a terminal event went past: a later EOF is a normal end
	err      error
}

func (g *streamGuard) Close() error { return g.src.Close() }

// Read passes the guarded stream on as bytes, one event at a time (the pass-through path).
func (g *streamGuard) Read(p []byte) (int, error) {
	for len(g.out) == 0 {
		ev, err := g.nextEvent()
		if err != nil {
			return 0, err
		}
		g.out = ev.Raw
	}
	n := copy(p, g.out)
	g.out = g.out[n:]
	return n, nil
}

// nextEvent returns the next event the guard lets through, then the closing error events when
// the upstream's stream broke; then the error the stream ended with (io.EOF when it was closed
// with an error event, or the client's own when it went away).
func (g *streamGuard) nextEvent() (sse.Event, error) {
	if g.closing != nil {
		ev, err := g.closing.Next()
		if err != nil {
			return sse.Event{}, g.err
		}
		return ev, nil
	}
	if g.err != nil {
		return sse.Event{}, g.err
	}
	ev, err := g.rd.Next()
	if g.capOnly && !errors.Is(err, sse.ErrEventTooLong) {
		if err != nil {
			g.err = err
			return sse.Event{}, err
		}
		if !ev.Terminated {
			g.err = io.EOF // the stream's last bytes, passed on as they came
		}
		return ev, nil
	}
	switch {
	case err == nil && ev.Terminated:
		if why := g.observe(&ev); why != "" {
			return g.end(io.EOF, why)
		}
		return ev, nil
	case err == nil: // the stream ended mid-event, or with bytes after its last event
		if g.terminal && g.ctx.Err() == nil {
			g.err = io.EOF
			return ev, nil // passed on as sent
		}
		return g.end(io.EOF, "")
	case errors.Is(err, sse.ErrEventTooLong):
		return g.end(io.EOF, "sent an event larger than the "+strconv.Itoa(MaxEvent>>20)+" MiB compactd relays")
	case errors.Is(err, io.EOF) && g.terminal:
		g.err = io.EOF
		return sse.Event{}, io.EOF
	}
	return g.end(err, "")
}

// end finishes the stream after err: with the closing error events, unless the client went away
// (nobody to tell).
func (g *streamGuard) end(err error, why string) (sse.Event, error) {
	if g.ctx.Err() != nil {
		if g.err = err; errors.Is(err, io.EOF) {
			g.err = g.ctx.Err()
		}
		return sse.Event{}, g.err
	}
	g.err = io.EOF
	g.closing = sse.NewReader(bytes.NewReader(g.fail(g.nextSeq, why)))
	return g.nextEvent()
}

// observe notes an event's sequence number and whether it is terminal. It returns why the guard
// must not pass it ("" when it may): its data is not JSON, when validating. Data that is not
// JSON is never walked (gjson recurses on nesting).
func (g *streamGuard) observe(ev *sse.Event) string {
	data, ok := EventJSON(ev)
	if !ok {
		if g.validate {
			return "sent an event that is not valid JSON"
		}
		return ""
	}
	if g.isTerminal != nil && g.isTerminal(data) {
		g.terminal = true
	}
	if len(data) == 0 || data[0] != '{' {
		return ""
	}
	if sq := gjson.GetBytes(data, "sequence_number"); sq.Exists() && int(sq.Int()) >= g.nextSeq {
		g.nextSeq = int(sq.Int()) + 1
	}
	return ""
}

// DoneMarker is the data of the event that ends an OpenAI stream.
// DoneMarker is the data of the event that ends a Chat Completions stream.
var DoneMarker = []byte("[DONE]")

// EventJSON returns an event's data, trimmed, and whether compactd can use it: data that is
// absent (comments, keep-alives), empty, a [DONE] marker or valid JSON within the depth bound.
// data is a slice of ev.Data.
func EventJSON(ev *sse.Event) (data []byte, ok bool) {
	data = bytes.TrimSpace(ev.Data)
	if len(data) == 0 || bytes.Equal(data, DoneMarker) {
		return data, true
	}
	return data, jsonx.Valid(data) == nil
}
