package relay

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

// RewriteFunc is a dialect's rewrite of one event: it appends the event's rendering to out as
// pieces and returns out. ev.Raw, appended alone, passes the event on byte for byte; an event it
// changes it splices (SpliceEvent) from slices of the event's own bytes and the few bytes it
// changes. data is the event's trimmed data: absent, empty, [DONE], or JSON within jsonx's depth
// bound. The pieces and everything they slice need only stay valid until the rewrite is called
// for the next event: they are read out before it.
type RewriteFunc func(out [][]byte, ev *sse.Event, data []byte) [][]byte

// EventRewriter is the frame every dialect's SSE rewriter shares: an io.ReadCloser over the
// upstream body that takes whole events from it (the stream guard's, or a Reader's), hands each
// to the dialect's rewrite, and passes on what rewrite returns — ev.Raw, byte for byte, when
// nothing changes. Nothing is buffered beyond the event being rewritten, and a large event is
// never copied on its way through.
//
// On a body no guard has checked (no Guard with Validate under it), the first event whose data
// is not JSON ends the stream with broken's error event instead: a rewriter must never splice
// into bytes it cannot parse.
type EventRewriter struct {
	src     eventSource
	body    io.Closer
	trusted bool // src checked every event's JSON (the stream guard of a rewritten turn)
	rewrite RewriteFunc
	broken  func() []byte

	ended  bool // an event was not JSON: the stream ended with broken's event
	pieces [][]byte
	out    [][]byte // the pieces of the current event not yet read
	err    error
}

// NewEventRewriter rewrites body's events with rewrite. broken renders the error events a stream
// ends with when an event is not JSON (called at most once, only on a body no validating guard
// checked). Closing the rewriter closes body.
func NewEventRewriter(body io.ReadCloser, rewrite RewriteFunc, broken func() []byte) *EventRewriter {
	src, trusted := eventsOf(body)
	return &EventRewriter{src: src, trusted: trusted, body: body, rewrite: rewrite, broken: broken}
}

// Close closes the upstream body.
func (r *EventRewriter) Close() error { return r.body.Close() }

// Read passes the rewritten stream on, one event's pieces at a time.
func (r *EventRewriter) Read(p []byte) (int, error) {
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

func (r *EventRewriter) next(out [][]byte, ev *sse.Event) [][]byte {
	data, ok := EventJSON(ev)
	if !ok && !r.trusted {
		r.ended = true
		return append(out, r.broken())
	}
	return r.rewrite(out, ev, data)
}

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
	return readerSource{sse.NewReaderSize(body, MaxEvent)}, false
}

// Splice is one edit of an event's data: data[From:To] becomes With (From == To inserts).
// Offsets are into the data the edit was made for (a GetAlias result's Index). With holds no
// line break (CR or LF): SpliceEvent puts it on the data line as it is.
type Splice struct {
	From, To int
	With     []byte
}

// SpliceEvent appends the pieces of ev rendered anew (as sse.Append does) with its data, data,
// edited by edits: the data between the edits is not copied but sliced, so an event costs a few
// small pieces whatever its size. edits may come in any order (SpliceEvent sorts them in place)
// and must not overlap. scratch holds the lines before the data; the pieces slice it, data and
// the edits' With, so all of them must stay unchanged until the pieces are written. Data of more
// than one line (which JSON only has when the upstream split it over several data lines) is
// rendered into a new slice whole, as sse.Append would.
func SpliceEvent(out [][]byte, scratch *[]byte, ev *sse.Event, data []byte, edits []Splice) [][]byte {
	slices.SortFunc(edits, func(a, b Splice) int { return a.From - b.From })
	if bytes.IndexByte(data, '\n') >= 0 {
		changed := *ev
		changed.Data = ApplySplices(data, edits)
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
		out = appendPiece(appendPiece(out, data[at:e.From]), e.With)
		at = e.To
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

// NumberAt is the edit that sets the number r (a member of the data it was found in by
// GetAlias) to n; ok is false when r does not exist or does not say where it lies.
func NumberAt(r gjson.Result, n int64) (Splice, bool) {
	if !r.Exists() || r.Index <= 0 {
		return Splice{}, false
	}
	return Splice{From: r.Index, To: r.Index + len(r.Raw), With: strconv.AppendInt(nil, n, 10)}, true
}

// PrependAt is the edit that puts elem (one JSON value) first in the array r (a member of the
// data it was found in by GetAlias); ok is false when r is no array or does not say where it
// lies. The edit's With may be elem itself: elem must stay unchanged while the edit is in use.
func PrependAt(r gjson.Result, elem []byte) (Splice, bool) {
	if !r.IsArray() || r.Index <= 0 {
		return Splice{}, false
	}
	with := elem
	if inner := strings.TrimLeft(r.Raw[1:], " \t\r\n"); inner != "" && inner[0] != ']' {
		with = append(slices.Clip(elem), ',')
	}
	return Splice{From: r.Index + 1, To: r.Index + 1, With: with}, true
}

// GetAlias is gjson.GetBytes without its copies: the result's Raw and Str alias data (gjson.GetBytes
// copies both, which on an event's output array or text is the event's size again), and its
// Index is the offset of Raw in data. They are valid only as long as data is and unchanged:
// data must not be written to while the result is in use, and whatever outlives the event (it is
// the reader's buffer, the next event's once it is read) must be cloned (strings.Clone).
func GetAlias(data []byte, path string) gjson.Result {
	return gjson.Get(unsafe.String(unsafe.SliceData(data), len(data)), path)
}

// ParseAlias is gjson.ParseBytes without its copy of data; the result and everything read from
// it alias data, as GetAlias's do.
func ParseAlias(data []byte) gjson.Result {
	return gjson.Parse(unsafe.String(unsafe.SliceData(data), len(data)))
}

// ApplySplices returns data with edits applied (sorted in place, not overlapping), as a new
// slice, for the rare event a rewriter must edit as a whole after all (sjson on it); with no
// edits it returns data itself.
func ApplySplices(data []byte, edits []Splice) []byte {
	if len(edits) == 0 {
		return data
	}
	slices.SortFunc(edits, func(a, b Splice) int { return a.From - b.From })
	out := make([]byte, 0, len(data)+64)
	at := 0
	for _, e := range edits {
		out = append(append(out, data[at:e.From]...), e.With...)
		at = e.To
	}
	return append(out, data[at:]...)
}

// EventType is the "type" member of an event's JSON object data ("" for anything else: a
// comment, [DONE], data that is not an object).
func EventType(data []byte) string {
	if len(data) == 0 || data[0] != '{' {
		return ""
	}
	return gjson.GetBytes(data, "type").Str
}

// SetNumber is the edit that sets the number at path of data to n; ok is false when it is n
// already, or absent.
func SetNumber(data []byte, path string, n int64) (Splice, bool) {
	r := GetAlias(data, path)
	if r.Int() == n {
		return Splice{}, false
	}
	return NumberAt(r, n)
}

// KeepAlive is an SSE comment that holds a committed stream open: no event a client parses.
var KeepAlive = sse.AppendComment(nil, "compactd is compacting the conversation")
