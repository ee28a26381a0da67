package proxy

import (
	"io"

	"github.com/compactd/compactd/internal/sse"
)

// eventRewriter is the frame every dialect's SSE rewriter shares: an io.ReadCloser over the
// upstream body that takes whole events from it (the stream guard's, or a Reader's), hands each
// to the dialect's rewrite, and passes on what rewrite returns — ev.Raw, byte for byte, when
// nothing changes. Nothing is buffered beyond the event being rewritten.
//
// rewrite gets the event's trimmed data (absent, empty, [DONE], or JSON within the depth bound).
// On a body no guard has checked, the first event whose data is not JSON ends the stream with
// broken's error event instead: a rewriter must never splice into bytes it cannot parse.
type eventRewriter struct {
	src     eventSource
	body    io.Closer
	trusted bool // src checked every event's JSON (the stream guard of a rewritten turn)
	rewrite func(ev *sse.Event, data []byte) []byte
	broken  func() []byte

	ended bool // an event was not JSON: the stream ended with broken's event
	out   []byte
	err   error
}

func newEventRewriter(body io.ReadCloser, rewrite func(ev *sse.Event, data []byte) []byte, broken func() []byte) *eventRewriter {
	src, trusted := eventsOf(body)
	return &eventRewriter{src: src, trusted: trusted, body: body, rewrite: rewrite, broken: broken}
}

func (r *eventRewriter) Close() error { return r.body.Close() }

func (r *eventRewriter) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		ev, err := r.src.nextEvent()
		if len(ev.Raw) > 0 {
			r.out = r.next(&ev)
		}
		if r.err = err; r.ended {
			r.err = io.EOF
		}
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

func (r *eventRewriter) next(ev *sse.Event) []byte {
	data, ok := eventJSON(ev)
	if !ok && !r.trusted {
		r.ended = true
		return r.broken()
	}
	return r.rewrite(ev, data)
}
