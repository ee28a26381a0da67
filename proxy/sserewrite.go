package proxy

import (
	"bytes"
	"io"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/sse"
)

// eventRewriter is the frame every dialect's SSE rewriter shares: an io.ReadCloser over the
// upstream body that takes whole events from it (the stream guard's, or a Reader's), hands each
// to the dialect's rewrite, and passes on what rewrite returns — ev.Raw, byte for byte, when
// nothing changes. Nothing is buffered beyond the event being rewritten.
//
// rewrite appends the event's rendering to out as pieces, which are read out in order before the
// next event is taken: an event it changes is spliced (spliceEvent) from slices of the event's
// own bytes and the few bytes it changes, so a large event is never copied on its way through.
// rewrite gets the event's trimmed data (absent, empty, [DONE], or JSON within the depth bound).
// On a body no guard has checked, the first event whose data is not JSON ends the stream with
// broken's error event instead: a rewriter must never splice into bytes it cannot parse.
type eventRewriter struct {
	src     eventSource
	body    io.Closer
	trusted bool // src checked every event's JSON (the stream guard of a rewritten turn)
	rewrite func(out [][]byte, ev *sse.Event, data []byte) [][]byte
	broken  func() []byte

	ended  bool // an event was not JSON: the stream ended with broken's event
	pieces [][]byte
	out    [][]byte // the pieces of the current event not yet read
	err    error
}

func newEventRewriter(body io.ReadCloser, rewrite func(out [][]byte, ev *sse.Event, data []byte) [][]byte, broken func() []byte) *eventRewriter {
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
			clear(r.pieces) // nothing of the last event stays reachable
			r.pieces = r.next(r.pieces[:0], &ev)
			r.out = r.pieces
		}
		if r.err = err; r.ended {
			r.err = io.EOF
		}
	}
	n := 0
	for len(r.out) > 0 && n < len(p) {
		c := copy(p[n:], r.out[0])
		n += c
		if r.out[0] = r.out[0][c:]; len(r.out[0]) == 0 {
			r.out = r.out[1:]
		}
	}
	return n, nil
}

func (r *eventRewriter) next(out [][]byte, ev *sse.Event) [][]byte {
	data, ok := eventJSON(ev)
	if !ok && !r.trusted {
		r.ended = true
		return append(out, r.broken())
	}
	return r.rewrite(out, ev, data)
}

// splice is one edit of an event's data: data[from:to] becomes with (from == to inserts).
type splice struct {
	from, to int
	with     []byte
}

// spliceEvent appends the pieces of ev rendered anew (as sse.Append does) with its data edited:
// the data between the edits is not copied but sliced, so an event costs a few small pieces
// whatever its size. edits may come in any order and must not overlap; scratch holds the lines
// before the data. Data of more than one line (which JSON only has when the upstream split it
// over several data lines) is rendered into scratch whole, as sse.Append would.
func spliceEvent(out [][]byte, scratch *[]byte, ev *sse.Event, data []byte, edits []splice) [][]byte {
	slices.SortFunc(edits, func(a, b splice) int { return a.from - b.from })
	if bytes.IndexByte(data, '\n') >= 0 {
		changed := *ev
		changed.Data = applySplices(data, edits)
		return append(out, sse.Append(nil, changed))
	}
	h := (*scratch)[:0]
	if ev.ID != "" {
		h = append(append(append(h, "id: "...), ev.ID...), '\n')
	}
	if ev.Name != "" {
		h = append(append(append(h, "event: "...), ev.Name...), '\n')
	}
	h = append(h, "data: "...)
	*scratch = h
	out = append(out, h)
	at := 0
	for _, e := range edits {
		out = appendPiece(appendPiece(out, data[at:e.from]), e.with)
		at = e.to
	}
	return append(appendPiece(out, data[at:]), eventTail)
}

var eventTail = []byte("\n\n")

func appendPiece(out [][]byte, b []byte) [][]byte {
	if len(b) == 0 {
		return out
	}
	return append(out, b)
}

// numberAt is the edit that sets the number r (a member of data, found by getAlias) to n; ok is
// false when r does not say where it lies.
func numberAt(r gjson.Result, n int64) (splice, bool) {
	if !r.Exists() || r.Index <= 0 {
		return splice{}, false
	}
	return splice{from: r.Index, to: r.Index + len(r.Raw), with: strconv.AppendInt(nil, n, 10)}, true
}

// prependAt is the edit that puts elem first in the array r (a member of data, found by
// getAlias); ok is false when r is no array or does not say where it lies.
func prependAt(r gjson.Result, elem []byte) (splice, bool) {
	if !r.IsArray() || r.Index <= 0 {
		return splice{}, false
	}
	with := elem
	if inner := strings.TrimLeft(r.Raw[1:], " \t\r\n"); inner != "" && inner[0] != ']' {
		with = append(slices.Clip(elem), ',')
	}
	return splice{from: r.Index + 1, to: r.Index + 1, with: with}, true
}

// getAlias is gjson.GetBytes without its copies: the result's Raw and Str are slices of data
// (gjson.GetBytes copies both, which on an event's output array or text is the event's size
// again). They are valid as long as data is: clone what outlives the event.
func getAlias(data []byte, path string) gjson.Result {
	return gjson.Get(unsafe.String(unsafe.SliceData(data), len(data)), path)
}

// parseAlias is gjson.ParseBytes without its copy of data; see getAlias.
func parseAlias(data []byte) gjson.Result {
	return gjson.Parse(unsafe.String(unsafe.SliceData(data), len(data)))
}

// applySplices returns data with edits applied, as a copy: for the rare event a rewriter must
// edit as a whole after all (sjson on it).
func applySplices(data []byte, edits []splice) []byte {
	if len(edits) == 0 {
		return data
	}
	slices.SortFunc(edits, func(a, b splice) int { return a.from - b.from })
	out := make([]byte, 0, len(data)+64)
	at := 0
	for _, e := range edits {
		out = append(append(out, data[at:e.from]...), e.with...)
		at = e.to
	}
	return append(out, data[at:]...)
}
