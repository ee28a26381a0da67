package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/api"
)

// maxGuardEvent bounds the one event streamGuard holds back; an upstream event larger than this
// is passed on in pieces (the guard then can no longer drop it whole, but memory stays bounded).
const maxGuardEvent = 8 << 20

// streamGuard sits between an upstream SSE body and everything above it (the rewriters, then
// the client). It passes whole events only, and when the upstream stream breaks — a read error
// such as a reset or a cut mid-event, or a clean EOF before the terminal event — it drops the
// partial event and ends the stream with an error event in the route's dialect instead.
//
// Without it httputil.ReverseProxy aborts the client's connection on an upstream read error, so
// an agent sees a truncated stream (unexpected EOF) rather than an error it can retry on: found
// by the fault-injected load test (loadtest/).
//
// With validate set (a turn compactd rewrites, whose rewriters would splice into broken JSON
// blindly) an event whose data is not valid JSON within the depth bound is held back too, and
// ends the stream the same way.
type streamGuard struct {
	src      io.ReadCloser
	ctx      context.Context
	validate bool
	// fail renders the closing error events, numbered from the next sequence number; invalid
	// says an event was not JSON rather than the stream broke off.
	fail func(seq int, invalid bool) []byte

	pending  []byte // bytes after the last complete event
	out      []byte // complete events (or the closing error) ready for the reader
	nextSeq  int
	terminal bool // a terminal event went past: a later EOF is a normal end
	err      error
	buf      [32 << 10]byte
}

func (g *streamGuard) Close() error { return g.src.Close() }

func (g *streamGuard) Read(p []byte) (int, error) {
	for len(g.out) == 0 {
		if g.err != nil {
			return 0, g.err
		}
		n, err := g.src.Read(g.buf[:])
		g.pending = append(g.pending, g.buf[:n]...)
		g.release()
		if err != nil && g.err == nil {
			g.finish(err)
		}
	}
	n := copy(p, g.out)
	g.out = g.out[n:]
	return n, nil
}

// release moves every complete event from pending to out, noting sequence numbers and terminal
// events on the way.
func (g *streamGuard) release() {
	done := 0
	for {
		i, sep := eventEnd(g.pending[done:])
		if i < 0 {
			break
		}
		if !g.observe(g.pending[done : done+i]) {
			// Pass what came before, drop the event and everything after it.
			g.out = append(g.out, g.pending[:done]...)
			g.pending = nil
			g.err = io.EOF
			if g.ctx.Err() == nil {
				g.out = append(g.out, g.fail(g.nextSeq, true)...)
			}
			return
		}
		done += i + sep
	}
	if done == 0 && len(g.pending) > maxGuardEvent {
		done = len(g.pending) // an oversized event: pass it on rather than grow without bound
	}
	if done > 0 {
		g.out = append(g.out, g.pending[:done]...)
		g.pending = append(g.pending[:0], g.pending[done:]...)
	}
}

// eventEnd returns the length of the first event in b and of the blank line that ends it, or -1.
func eventEnd(b []byte) (int, int) {
	lf := bytes.Index(b, []byte("\n\n"))
	crlf := bytes.Index(b, []byte("\r\n\r\n"))
	switch {
	case lf < 0 && crlf < 0:
		return -1, 0
	case crlf >= 0 && (lf < 0 || crlf < lf):
		return crlf, 4
	}
	return lf, 2
}

// observe notes an event's sequence number and whether it is terminal. It reports false for an
// event the guard must not pass: one that is not JSON, when validating. Data that is not JSON is
// never walked (gjson recurses on nesting).
func (g *streamGuard) observe(ev []byte) bool {
	data, ok := eventData(ev)
	if !ok {
		return !g.validate
	}
	if len(data) == 0 || data[0] != '{' {
		return true
	}
	if sq := gjson.GetBytes(data, "sequence_number"); sq.Exists() && int(sq.Int()) >= g.nextSeq {
		g.nextSeq = int(sq.Int()) + 1
	}
	switch gjson.GetBytes(data, "type").Str {
	case "response.completed", "response.failed", "response.incomplete", "error", "message_stop":
		g.terminal = true
	}
	return true
}

// finish ends the stream after the upstream's read returned err.
func (g *streamGuard) finish(err error) {
	g.err = err
	if g.ctx.Err() != nil {
		return // the client went away: nobody to tell
	}
	if errors.Is(err, io.EOF) {
		if g.terminal {
			if len(g.pending) > 0 { // trailing bytes without a blank line: pass them on as sent
				g.out = append(g.out, g.pending...)
			}
			return
		}
	}
	g.pending = nil
	g.out = append(g.out, g.fail(g.nextSeq, false)...)
	g.err = io.EOF
}

// guardStream wraps a successful SSE response body in a streamGuard; any other response is left
// alone.
func guardStream(resp *http.Response, validate bool, fail func(seq int, invalid bool) []byte) {
	if resp.StatusCode/100 != 2 || !isEventStream(resp.Header) {
		return
	}
	resp.Body = &streamGuard{src: resp.Body, ctx: resp.Request.Context(), validate: validate, fail: fail}
}

// upstreamInterrupted is the error a Responses stream ends with when the upstream's broke off.
func upstreamInterrupted() *api.OpenAIError {
	return &api.OpenAIError{
		Status: http.StatusBadGateway, Type: "server_error", Code: "upstream_stream_interrupted",
		Message: "the upstream API's stream ended before the response was complete; retry the request",
	}
}

// guardResponsesStream guards a Responses stream: the closing error is `error` +
// `response.failed`, numbered on from the upstream's sequence numbers (a rewriter above shifts
// them like every other event).
func guardResponsesStream(resp *http.Response, validate bool) {
	guardStream(resp, validate, func(seq int, invalid bool) []byte {
		t := turnFrom(resp.Request.Context())
		id := ""
		if t != nil {
			id = t.responseID
		}
		if invalid {
			return invalidUpstreamOpenAI(t != nil && t.item != nil, "sent an event that is not valid JSON").SSE(seq, id)
		}
		return upstreamInterrupted().SSE(seq, id)
	})
}

// guardMessagesStream guards a Messages stream: the closing error is an Anthropic `error` event.
func guardMessagesStream(resp *http.Response, validate bool) {
	guardStream(resp, validate, func(_ int, invalid bool) []byte {
		e := &api.AnthropicError{Status: http.StatusBadGateway, Type: "api_error",
			Message: "the upstream API's stream ended before the message was complete; retry the request"}
		if invalid {
			mt := msgTurnFrom(resp.Request)
			e = invalidUpstreamAnthropic(mt != nil && mt.block != nil, "sent an event that is not valid JSON")
		}
		return e.SSE()
	})
}
