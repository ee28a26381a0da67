package proxy

import (
	"bytes"
	"context"
	"errors"
	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/fault"
	"io"
	"net/http"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/sse"
)

// maxSSEEvent bounds one upstream event compactd relays: the stream guard (and so every
// rewriter above it) and the recall loop hold one event at most, and an event over this ends the
// stream with the dialect's error event. Responses streams carry the whole response object in
// their terminal event, so it is the limit of a JSON response compactd reads whole. A variable
// only so a test can lower it (sse_export_test.go).
var maxSSEEvent = 64 << 20

// eventSource hands out whole SSE events. The stream guard is one, so a rewriter stacked on it
// takes its events as they are instead of parsing the bytes again.
type eventSource interface {
	nextEvent() (sse.Event, error)
}

// readerSource is an eventSource over a body nothing has parsed yet.
type readerSource struct{ *sse.Reader }

func (r readerSource) nextEvent() (sse.Event, error) { return r.Next() }

// eventsOf returns body's events: the guard's own when body is a stream guard (trusted then
// says it checked every event's JSON), else a Reader's.
func eventsOf(body io.Reader) (src eventSource, trusted bool) {
	if g, ok := body.(*streamGuard); ok {
		return g, g.validate
	}
	return readerSource{sse.NewReaderSize(body, maxSSEEvent)}, false
}

// streamGuard sits between an upstream SSE body and everything above it (the rewriters, then
// the client). It passes whole events only, and when the upstream stream breaks — a read error
// such as a reset or a cut mid-event, a clean EOF before the terminal event, or an event over
// maxSSEEvent — it drops the partial event and ends the stream with an error event in the
// route's dialect instead.
//
// Without it httputil.ReverseProxy aborts the client's connection on an upstream read error, so
// an agent sees a truncated stream (unexpected EOF) rather than an error it can retry on: found
// by the fault-injected load test (loadtest/).
//
// With validate set (a turn compactd rewrites, whose rewriters would splice into broken JSON
// blindly) an event whose data is not valid JSON within the depth bound ends the stream the
// same way.
//
// With capOnly set (a Messages or Chat Completions request compactd passed through untouched)
// the guard enforces the event cap alone: an event over maxSSEEvent still ends the stream with
// the dialect's error event, so no pass-through holds more than one capped event, but however
// else the upstream's stream ends — cut mid-event, reset, or without its terminal event, which
// some Chat Completions backends never send — it ends so for the client too, as it would
// without compactd in between.
type streamGuard struct {
	src      io.ReadCloser
	rd       *sse.Reader
	ctx      context.Context
	d        dialect // whose terminal events end the stream normally
	validate bool
	capOnly  bool
	// fail renders the closing error events, numbered from the next sequence number; why is ""
	// when the stream broke off, else what was wrong with the upstream's event.
	fail func(seq int, why string) []byte

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
		return g.end(io.EOF, "sent an event larger than the "+strconv.Itoa(maxSSEEvent>>20)+" MiB compactd relays")
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
	data, ok := eventJSON(ev)
	if !ok {
		if g.validate {
			return "sent an event that is not valid JSON"
		}
		return ""
	}
	if g.d.terminal(data) {
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

// eventJSON returns an event's data, trimmed, and whether compactd can use it: data that is
// absent (comments, keep-alives), empty, a [DONE] marker or valid JSON within the depth bound.
func eventJSON(ev *sse.Event) (data []byte, ok bool) {
	data = bytes.TrimSpace(ev.Data)
	if len(data) == 0 || bytes.Equal(data, doneMarker) {
		return data, true
	}
	return data, jsonx.Valid(data) == nil
}

// guardStream wraps a successful SSE response body in a streamGuard; any other response is left
// alone.
func guardStream(resp *http.Response, d dialect, validate bool, fail func(seq int, why string) []byte) {
	if !guardable(resp) {
		return
	}
	resp.Body = &streamGuard{src: resp.Body, rd: sse.NewReaderSize(resp.Body, maxSSEEvent),
		ctx: resp.Request.Context(), d: d, validate: validate, fail: fail}
}

// guardPassThrough guards the stream of a Messages or Chat Completions request compactd
// forwarded untouched: the event cap only (capOnly), ended with the dialect's error event.
func guardPassThrough(resp *http.Response, d dialect) {
	if !guardable(resp) {
		return
	}
	resp.Body = &streamGuard{src: resp.Body, rd: sse.NewReaderSize(resp.Body, maxSSEEvent),
		ctx: resp.Request.Context(), d: d, capOnly: true, fail: func(_ int, why string) []byte {
			return d.errorEvent(invalidUpstream(d, false, why), nil)
		}}
}

// guardable reports whether resp is a stream guardStream guards: a successful event stream.
func guardable(resp *http.Response) bool {
	return resp.StatusCode/100 == 2 && isEventStream(resp.Header)
}

// upstreamInterrupted is the error a Responses stream ends with when the upstream's broke off.
func upstreamInterrupted() *fault.Fault {
	return &fault.Fault{Kind: fault.Upstream, Code: fault.CodeUpstreamInterrupted,
		Message: "the upstream API's stream ended before its answer was complete; retry the request"}
}

// guardResponsesStream guards a Responses stream: the closing error is `error` +
// `response.failed`, numbered on from the upstream's sequence numbers (a rewriter above shifts
// them like every other event).
func guardResponsesStream(resp *http.Response, validate bool) {
	if !guardable(resp) {
		return // not a stream: no guard, and no closure allocated for one
	}
	guardStream(resp, dialectOpenAI, validate, func(seq int, why string) []byte {
		t := turnFrom(resp.Request.Context())
		id := ""
		if t != nil {
			id = t.responseID
		}
		e := upstreamInterrupted()
		if why != "" {
			e = invalidUpstream(dialectOpenAI, t != nil && t.item != nil, why)
		}
		return api.OpenAIFault(e).SSE(seq, id)
	})
}

// guardMessagesStream guards a Messages stream: the closing error is an Anthropic `error` event.
func guardMessagesStream(resp *http.Response, validate bool) {
	if !guardable(resp) {
		return // not a stream: no guard, and no closure allocated for one
	}
	guardStream(resp, dialectAnthropic, validate, func(_ int, why string) []byte {
		e := upstreamInterrupted()
		if why != "" {
			mt := msgTurnFrom(resp.Request)
			e = invalidUpstream(dialectAnthropic, mt != nil && mt.block != nil, why)
		}
		return dialectAnthropic.errorEvent(e, nil)
	})
}

// guardChatStream guards a Chat Completions stream: it ends normally at `data: [DONE]`; broken
// off before it, it ends with an error chunk (chatDialect.errorEvent), which the openai SDKs
// report as a stream error, instead of looking like a short, complete answer.
func guardChatStream(resp *http.Response, validate bool) {
	if !guardable(resp) {
		return // not a stream: no guard, and no closure allocated for one
	}
	guardStream(resp, dialectChat, validate, func(_ int, why string) []byte {
		e := upstreamInterrupted()
		if why != "" {
			e = invalidUpstream(dialectChat, false, why)
		}
		return dialectChat.errorEvent(e, nil)
	})
}
