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
)

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
type Reader struct {
	src      io.Reader
	buf      []byte
	r, w     int   // unread bytes are buf[r:w]
	srcErr   error // the error src returned; buf may still hold bytes before it
	max      int
	raw      []byte
	b        builder
	started  bool
	finished bool
}

// NewReader reads r with the default event cap.
func NewReader(r io.Reader) *Reader { return NewReaderSize(r, DefaultMaxEvent) }

// NewReaderSize reads r, refusing events longer than max bytes.
func NewReaderSize(r io.Reader, max int) *Reader {
	return &Reader{src: r, buf: make([]byte, min(32<<10, max+1)), max: max}
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
	r.raw = r.raw[:0]
	r.b.reset()
	fields := false // a non-blank line went by: a blank line now dispatches
	for {
		line, err := r.line()
		if len(line) > 0 {
			r.raw = append(r.raw, line...)
			if len(r.raw) > r.max {
				r.finished = true
				return Event{}, ErrEventTooLong
			}
			body := trimEOL(line)
			if !r.started {
				r.started = true
				body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
			}
			if len(body) == 0 {
				if fields {
					return r.b.event(r.raw, true), nil
				}
				// A blank line with nothing before it dispatches nothing: keep it in this Raw.
			} else {
				fields = true
				r.b.add(body)
			}
		}
		if err != nil {
			r.finished = true
			if len(r.raw) > 0 {
				ev := r.b.event(r.raw, false)
				if err == io.EOF {
					return ev, nil
				}
				return ev, err
			}
			return Event{}, err
		}
	}
}

// builder collects the fields of one event, for Reader and Scanner alike.
type builder struct {
	data    []byte
	hasData bool
	name    string
	id      string
	// lastName and lastID keep the previous event's strings: a stream repeats a handful of
	// names, so an event costs no allocation for its name.
	lastName, lastID string
}

func (b *builder) reset() {
	b.data, b.hasData, b.name, b.id = b.data[:0], false, "", ""
}

// add takes one non-blank line without its line ending.
func (b *builder) add(line []byte) {
	field, value := splitField(line)
	switch string(field) {
	case "data":
		if b.hasData {
			b.data = append(b.data, '\n')
		}
		b.data = append(b.data, value...)
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
		if ev.Data == nil {
			ev.Data = []byte{}
		}
	}
	return ev
}

// line returns the next line including its terminator (LF, CRLF or lone CR). The slice aliases
// the read buffer until the next call. Each byte is scanned once, so a line costs what it is long.
func (r *Reader) line() ([]byte, error) {
	scan := r.r
	for {
		if i := indexEOL(r.buf[scan:r.w]); i >= 0 {
			j := scan + i
			switch {
			case r.buf[j] == '\n':
				return r.take(j + 1), nil
			case j+1 < r.w: // CR followed by something: CRLF, or a lone CR
				if r.buf[j+1] == '\n' {
					return r.take(j + 2), nil
				}
				return r.take(j + 1), nil
			case r.srcErr != nil: // CR as the stream's last byte
				return r.take(j + 1), nil
			}
			scan = j // a CR at the end of what is buffered: read on to see whether LF follows
		} else {
			scan = r.w
		}
		if r.srcErr != nil {
			return r.take(r.w), r.srcErr
		}
		if r.w-r.r > r.max {
			return r.take(r.w), nil // the caller's size check fires
		}
		scan -= r.fill()
	}
}

// take consumes buf[r:end] and returns it.
func (r *Reader) take(end int) []byte {
	line := r.buf[r.r:end]
	r.r = end
	return line
}

// fill moves unread bytes to the front (returning how far they moved), grows the buffer when it
// is full, and reads once from src.
func (r *Reader) fill() int {
	shift := r.r
	if shift > 0 {
		copy(r.buf, r.buf[r.r:r.w])
		r.w -= shift
		r.r = 0
	}
	if r.w == len(r.buf) {
		r.buf = append(r.buf, make([]byte, len(r.buf))...)
	}
	n, err := r.src.Read(r.buf[r.w:])
	r.w += n
	if err != nil {
		r.srcErr = err
	}
	return shift
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

func trimEOL(line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line
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
