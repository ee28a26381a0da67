// Package sse reads and writes server-sent event streams the way the HTML Living Standard's
// event-stream grammar defines them, for every part of compactd that touches a stream: the
// response rewriters, the stream guard, the recall loop, metrics and the fake upstream.
//
// One reader exists because five hand-written ones had drifted (only one handled CRLF, only one
// joined multi-line data). The Reader keeps each event's exact bytes next to its parsed fields,
// so a rewriter that leaves an event alone forwards it byte for byte, and it never holds more
// than one event: a stream is relayed as it arrives, and an event larger than the cap is an error
// rather than unbounded memory.
package sse

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"strings"
	"unicode"
)

// MediaType is the media type of an event stream.
const MediaType = "text/event-stream"

// IsStream reports whether a Content-Type header value names an event stream: media type
// text/event-stream in any case, with or without parameters and surrounding whitespace. A
// malformed parameter does not change the media type it follows.
func IsStream(contentType string) bool {
	switch contentType {
	case MediaType, MediaType + "; charset=utf-8": // what upstreams send: no parse, no allocation
		return true
	}
	// Any other media type (application/json, every pass-through answer) is told apart before
	// the parse, which allocates: the media type is what comes first, less its leading space.
	if t := strings.TrimLeftFunc(contentType, unicode.IsSpace); len(t) < len(MediaType) || !strings.EqualFold(t[:len(MediaType)], MediaType) {
		return false
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return (err == nil || errors.Is(err, mime.ErrInvalidMediaParameter)) && mt == MediaType
}

// DefaultMaxEvent bounds one event's size (its lines together). Responses streams carry whole
// response objects in their terminal events, so it is generous; a stream that exceeds it is
// broken or hostile.
const DefaultMaxEvent = 64 << 20

// ErrEventTooLong is returned when one event exceeds the Reader's cap.
var ErrEventTooLong = errors.New("sse: event exceeds the size limit")

// Event is one dispatched event.
type Event struct {
	// Raw is the event exactly as received, from its first line through the blank line that
	// ended it (or through the last line, when the stream ended without one). Comment-only
	// blocks such as keep-alives are events too, with no Data.
	Raw []byte
	// Name is the `event:` field ("" when absent; the standard's default type is "message").
	Name string
	// Data is the `data:` fields joined with "\n", as the standard dispatches them; nil when the
	// event had no data field.
	Data []byte
	// ID is the `id:` field, "" when absent.
	ID string
	// Terminated reports whether a blank line ended the event; false for the tail of a stream
	// that was cut mid-event.
	Terminated bool
}

// HasData reports whether the event carries a data field (a comment or keep-alive does not).
func (e *Event) HasData() bool { return e.Data != nil }

// Reader reads events from a stream. It accepts LF, CRLF and lone CR line endings, strips one
// leading space after a field's colon, and ignores a leading byte-order mark.
//
// Every byte read belongs to the Raw of exactly one event: blank lines between events (which
// dispatch nothing) open the Raw of the event after them, and whatever follows the last blank
// line comes back as a final unterminated event. So the Raws of a stream concatenate to the
// stream, and a relay that passes every Raw it does not rewrite changes nothing.
//
// Holding an event costs about its size, once. An event stays where it was read: its Raw, and
// its Data when one data line carries it (as in every JSON stream), are slices of the read
// buffer, not copies of it. The buffer doubles up to bigEvent; an event longer than that is read
// on in chunks of bigEvent bytes, joined into one Raw of its exact size when it ends, so a large
// event neither leaves a buffer of up to twice its size behind nor costs every doubling on its
// way there.
type Reader struct {
	src    io.Reader
	buf    []byte
	r, w   int   // unread bytes are buf[r:w]
	srcErr error // the error src returned; buf may still hold bytes before it
	max    int
	spill  [][]byte // the current event's first bytes, once it outgrew the buffer
	end    eventEnd
	b      builder
	// started: the stream's first event has begun (only it may open with a byte-order mark).
	started  bool
	finished bool
}

// The read buffer starts at readBuffer bytes and doubles up to bigEvent; a longer event is read
// on in chunks of bigEvent bytes. Variables only so a test can lower them.
var readBuffer, bigEvent = 32 << 10, 1 << 20

// NewReader reads r with the default event cap.
func NewReader(r io.Reader) *Reader { return NewReaderSize(r, DefaultMaxEvent) }

// NewReaderSize reads r, refusing events longer than max bytes.
func NewReaderSize(r io.Reader, max int) *Reader {
	return &Reader{src: r, buf: make([]byte, min(readBuffer, max+1)), max: max, b: builder{alias: true}}
}

// Next returns the next event. At the end of the stream it returns io.EOF; a stream that ends in
// the middle of an event returns that partial event (Terminated false) with a nil error first,
// then io.EOF. Other read errors are returned as they are, together with any partial event. An
// event over the cap returns ErrEventTooLong, and the Reader is done. The Event's slices are
// valid until the next call.
func (r *Reader) Next() (Event, error) {
	if r.finished {
		return Event{}, io.EOF
	}
	end := &r.end
	*end = eventEnd{atStart: true, bom: !r.started, lines: end.lines[:0]}
	r.started = true
	start, scanned := r.r, r.r // the event is r.spill, then buf[start:]; buf[start:scanned] is scanned
	spilled := 0
	for {
		if n := end.scan(r.buf[scanned:r.w], spilled+scanned-start); n >= 0 {
			r.r = scanned + n
			if spilled+r.r-start > r.max {
				return r.tooLong()
			}
			return r.event(start, true), nil
		}
		scanned = r.w
		if spilled+r.w-start > r.max {
			return r.tooLong()
		}
		if r.srcErr != nil {
			r.r = r.w
			if end.blankCR {
				// The event's blank line was a lone CR, the stream's last byte.
				return r.event(start, true), nil
			}
			r.finished = true
			if spilled+r.w-start == 0 {
				return Event{}, r.srcErr
			}
			end.finish(spilled + r.w - start)
			ev := r.event(start, false)
			if r.srcErr == io.EOF {
				return ev, nil
			}
			return ev, r.srcErr
		}
		if start > 0 { // keep the event's bytes, drop the ones before it
			copy(r.buf, r.buf[start:r.w])
			r.w -= start
			scanned -= start
			r.r, start = 0, 0
		}
		if r.w == len(r.buf) {
			if len(r.buf) < bigEvent {
				grown := make([]byte, min(2*len(r.buf), max(bigEvent, len(r.buf))))
				copy(grown, r.buf[:r.w])
				r.buf = grown
			} else {
				// The event outgrew the buffer: the buffer becomes its chunk, and a new one reads on.
				r.spill = append(r.spill, r.buf[:r.w])
				spilled += r.w
				r.buf = make([]byte, len(r.buf))
				r.w, scanned = 0, 0
			}
		}
		n, err := r.src.Read(r.buf[r.w:])
		r.w += n
		if err != nil {
			r.srcErr = err
		}
	}
}

func (r *Reader) tooLong() (Event, error) {
	r.finished = true
	clear(r.spill)
	r.spill = r.spill[:0]
	return Event{}, ErrEventTooLong
}

// event dispatches the event that is r.spill followed by buf[start:r.r], from its lines.
func (r *Reader) event(start int, terminated bool) Event {
	raw := r.buf[start:r.r]
	if len(r.spill) > 0 {
		n := len(raw)
		for _, c := range r.spill {
			n += len(c)
		}
		joined := make([]byte, 0, n)
		for _, c := range r.spill {
			joined = append(joined, c...)
		}
		raw = append(joined, raw...)
		clear(r.spill)
		r.spill = r.spill[:0]
	}
	r.b.reset()
	for _, l := range r.end.lines {
		r.b.add(raw[l.from:l.to])
	}
	return r.b.event(raw, terminated)
}

var byteOrderMark = []byte("\xef\xbb\xbf")

// eventEnd finds where an event ends in a stream handed to scan piece by piece: after the line
// ending of the first blank line that follows a line with content. It looks at every byte once,
// keeps none of them and notes where each line with content lies, so that an event is scanned
// wherever its bytes are held and parsed without a second look for its line endings.
type eventEnd struct {
	atStart bool // the next byte starts a line
	cr      bool // the last byte was a CR ending a line: an LF next belongs to that line ending
	blankCR bool // ... and that line was the blank line that ends the event
	fields  bool // a line with content went by
	bom     bool // the stream's first line: a byte-order mark may open it
	bomN    int  // bytes of the mark seen so far
	from    int  // where the current line's content starts, from the event's start
	lines   []span
}

// span is where one line's content (without its line ending) lies in an event.
type span struct{ from, to int }

// scan takes the next bytes of the stream, which lie at base from the event's start, and returns
// how many of them belong to the event, or -1 when it has not ended within them.
func (e *eventEnd) scan(p []byte, base int) int {
	i := 0
	for i < len(p) {
		if e.cr {
			e.cr = false
			if p[i] == '\n' {
				i++
			}
			if e.blankCR {
				return i
			}
			continue
		}
		if e.atStart {
			c := p[i]
			if e.bom {
				if c == byteOrderMark[e.bomN] {
					i++
					if e.bomN++; e.bomN == len(byteOrderMark) {
						e.bom = false // a whole mark, dropped: the line is what follows it
					}
					continue
				}
				e.bom = false
				if e.bomN > 0 { // part of a mark, which the line keeps: it has content
					e.atStart, e.fields, e.from = false, true, 0
				}
			}
			if e.atStart && (c == '\n' || c == '\r') { // a blank line
				i++
				if c == '\r' {
					e.cr, e.blankCR = true, e.fields
					continue
				}
				if e.fields {
					return i
				}
				continue
			}
			if e.atStart {
				e.atStart, e.fields, e.from = false, true, base+i
			}
		}
		j := indexEOL(p[i:])
		if j < 0 {
			return -1
		}
		i += j
		e.lines = append(e.lines, span{e.from, base + i})
		e.cr = p[i] == '\r'
		e.atStart = true
		i++
	}
	return -1
}

// finish notes the line the stream ended in, at size bytes from the event's start.
func (e *eventEnd) finish(size int) {
	if !e.atStart {
		e.lines = append(e.lines, span{e.from, size})
	}
}

// builder collects the fields of one event, for Reader and Scanner alike.
type builder struct {
	// alias: the Reader's data may be a slice of the line it came in (the Reader holds the
	// event's bytes until the next event); the Scanner's lines are reused, so it copies.
	alias   bool
	one     []byte // the one data line's value so far, aliased
	data    []byte // the data lines joined, when they are not one aliased line
	hasData bool
	name    string
	id      string
	// lastName and lastID keep the previous event's strings: a stream repeats a handful of
	// names, so an event costs no allocation for its name.
	lastName, lastID string
}

func (b *builder) reset() {
	b.one, b.data, b.hasData, b.name, b.id = nil, b.data[:0], false, "", ""
}

// add takes one non-blank line without its line ending.
func (b *builder) add(line []byte) {
	field, value := splitField(line)
	switch string(field) {
	case "data":
		switch {
		case !b.hasData && b.alias:
			b.one = value
		case !b.hasData:
			b.data = append(b.data, value...)
		default:
			if b.one != nil {
				b.data = append(b.data[:0], b.one...)
				b.one = nil
			}
			b.data = append(append(b.data, '\n'), value...)
		}
		b.hasData = true
	case "event":
		if string(value) != b.lastName {
			b.lastName = string(value)
		}
		b.name = b.lastName
	case "id":
		if string(value) != b.lastID {
			b.lastID = string(value)
		}
		b.id = b.lastID
	}
}

func (b *builder) event(raw []byte, terminated bool) Event {
	ev := Event{Raw: raw, Name: b.name, ID: b.id, Terminated: terminated}
	if b.hasData {
		ev.Data = b.data
		if b.one != nil {
			ev.Data = b.one
		}
		if ev.Data == nil {
			ev.Data = []byte{}
		}
	}
	return ev
}

// indexEOL returns the index of the first CR or LF in b, or -1, with two vectorised scans.
func indexEOL(b []byte) int {
	lf := bytes.IndexByte(b, '\n')
	head := b
	if lf >= 0 {
		head = b[:lf]
	}
	if cr := bytes.IndexByte(head, '\r'); cr >= 0 {
		return cr
	}
	return lf
}

// splitField splits "field: value" at the first colon, dropping one space after it. A line that
// starts with a colon is a comment (field "").
func splitField(line []byte) (field, value []byte) {
	i := bytes.IndexByte(line, ':')
	if i < 0 {
		return line, nil
	}
	value = line[i+1:]
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	return line[:i], value
}

// AppendEvent appends one event with an optional `event:` line. Data containing newlines is
// written as several data lines, so it reads back as the same bytes.
func AppendEvent(dst []byte, name string, data []byte) []byte {
	if name != "" {
		dst = append(dst, "event: "...)
		dst = append(dst, name...)
		dst = append(dst, '\n')
	}
	for {
		i := bytes.IndexByte(data, '\n')
		dst = append(dst, "data: "...)
		if i < 0 {
			dst = append(dst, data...)
			break
		}
		dst = append(dst, bytes.TrimSuffix(data[:i], []byte("\r"))...)
		dst = append(dst, '\n')
		data = data[i+1:]
	}
	return append(dst, "\n\n"...)
}

// AppendComment appends a comment line block (": text"), the form keep-alives take.
func AppendComment(dst []byte, text string) []byte {
	dst = append(dst, ": "...)
	dst = append(dst, text...)
	return append(dst, "\n\n"...)
}

// Append appends ev rendered anew from its fields: its `event:` and `id:` lines, then its data.
// A rewriter uses it for an event whose data it changed (comments and retry lines of that event
// are not kept); an event it leaves alone it passes on as ev.Raw.
func Append(dst []byte, ev Event) []byte {
	if ev.ID != "" {
		dst = append(dst, "id: "...)
		dst = append(dst, ev.ID...)
		dst = append(dst, '\n')
	}
	if ev.Data == nil {
		if ev.Name != "" {
			dst = append(dst, "event: "...)
			dst = append(dst, ev.Name...)
			dst = append(dst, '\n')
		}
		return append(dst, '\n')
	}
	return AppendEvent(dst, ev.Name, ev.Data)
}

// Scanner is the push form of Reader, for code that watches a stream someone else reads (the
// metrics on the upstream body): Write takes the bytes as they pass, in any pieces, and fn gets
// every whole event. It never stops or changes the stream: an event over the cap is skipped (fn
// does not see it), not an error. Its events have no Raw, and their slices are valid only
// during fn.
type Scanner struct {
	fn      func(*Event)
	max     int
	b       builder
	ev      Event  // handed to fn: a field, so no event escapes to the heap
	line    []byte // a line split across writes, so far
	size    int    // bytes of the current event so far
	fields  bool   // a non-blank line of the current event went by
	over    bool   // the current event is past the cap: it is skipped
	partial bool   // s.line holds the start of a line (it may be empty when the event is over)
	cr      bool   // the last write ended in CR: an LF first in the next ends nothing
	started bool
}

// NewScanner calls fn for each event of at most max bytes.
func NewScanner(max int, fn func(*Event)) *Scanner { return &Scanner{fn: fn, max: max} }

// Write scans p; it always consumes all of p and never fails.
func (s *Scanner) Write(p []byte) (int, error) {
	n := len(p)
	if s.cr && len(p) > 0 && p[0] == '\n' {
		p = p[1:]
		s.size++
	}
	s.cr = false
	for len(p) > 0 {
		i := indexEOL(p)
		if i < 0 {
			s.grow(len(p))
			if !s.over {
				s.line = append(s.line, p...)
			}
			s.partial = true
			break
		}
		eol := i + 1
		if p[i] == '\r' {
			if i+1 == len(p) {
				s.cr = true
			} else if p[i+1] == '\n' {
				eol++
			}
		}
		s.grow(eol)
		body := p[:i]
		if s.partial {
			s.line = append(s.line, body...)
			body = s.line
		}
		s.endLine(body, len(body) == 0 && !s.partial)
		s.line, s.partial = s.line[:0], false
		p = p[eol:]
	}
	return n, nil
}

// Flush hands fn a final event the stream ended without its blank line (Terminated false).
func (s *Scanner) Flush() {
	if s.partial {
		s.endLine(s.line, false)
		s.line, s.partial = s.line[:0], false
	}
	if s.fields && !s.over {
		s.ev = s.b.event(nil, false)
		s.fn(&s.ev)
	}
	s.next()
}

func (s *Scanner) grow(n int) {
	if s.size += n; s.size > s.max && !s.over {
		s.over, s.line = true, s.line[:0]
		s.b.reset()
	}
}

// endLine takes one line without its ending; blank says it was empty as received.
func (s *Scanner) endLine(body []byte, blank bool) {
	if !s.started {
		s.started = true
		if b := bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")); len(b) < len(body) {
			body, blank = b, len(b) == 0
		}
	}
	if !blank {
		s.fields = true
		if !s.over {
			s.b.add(body)
		}
		return
	}
	if !s.fields {
		return // a blank line with nothing before it
	}
	if !s.over {
		s.ev = s.b.event(nil, true)
		s.fn(&s.ev)
	}
	s.next()
}

func (s *Scanner) next() {
	s.b.reset()
	s.size, s.fields, s.over = 0, false, false
}
