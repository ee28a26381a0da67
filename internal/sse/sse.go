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
type Reader struct {
	src      io.Reader
	buf      []byte
	r, w     int   // unread bytes are buf[r:w]
	srcErr   error // the error src returned; buf may still hold bytes before it
	max      int
	raw      []byte
	data     []byte
	started  bool
	finished bool
}

// NewReader reads r with the default event cap.
func NewReader(r io.Reader) *Reader { return NewReaderSize(r, DefaultMaxEvent) }

// NewReaderSize reads r, refusing events longer than max bytes.
func NewReaderSize(r io.Reader, max int) *Reader {
	return &Reader{src: r, buf: make([]byte, 32<<10), max: max}
}

// Next returns the next event. At the end of the stream it returns io.EOF; a stream that ends in
// the middle of an event returns that partial event (Terminated false) with a nil error first,
// then io.EOF. Other read errors are returned as they are, after any partial event. The Event's
// slices are valid until the next call.
func (r *Reader) Next() (Event, error) {
	if r.finished {
		return Event{}, io.EOF
	}
	r.raw, r.data = r.raw[:0], r.data[:0]
	ev := Event{}
	hasData := false
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
				if len(r.raw) == len(line) {
					// A blank line with nothing before it dispatches nothing: keep reading.
					r.raw = r.raw[:0]
					continue
				}
				ev.Raw, ev.Terminated = r.raw, true
				if hasData {
					ev.Data = r.data
				}
				return ev, nil
			}
			field, value := splitField(body)
			switch string(field) {
			case "data":
				if hasData {
					r.data = append(r.data, '\n')
				}
				r.data = append(r.data, value...)
				hasData = true
			case "event":
				ev.Name = string(value)
			case "id":
				ev.ID = string(value)
			}
		}
		if err != nil {
			r.finished = true
			if len(r.raw) > 0 {
				ev.Raw = r.raw
				if hasData {
					ev.Data = r.data
				}
				if err == io.EOF {
					return ev, nil
				}
				return ev, err
			}
			return Event{}, err
		}
	}
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
