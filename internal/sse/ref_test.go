package sse

import (
	"bytes"
	"io"
)

// refReader is the Reader as it was before events were held in place (it copied every event's
// lines into a Raw of its own and its data into another): kept as the oracle the Reader is
// compared with, on streams cut anywhere, in TestReaderAgreesWithReference.
type refReader struct {
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

// newRefReader is NewReaderSize of the old Reader.
func newRefReader(r io.Reader, max int) *refReader {
	return &refReader{src: r, buf: make([]byte, min(32<<10, max+1)), max: max}
}

// Next returns the next event. At the end of the stream it returns io.EOF; a stream that ends in
// the middle of an event returns that partial event (Terminated false) with a nil error first,
// then io.EOF. Other read errors are returned as they are, together with any partial event. An
// event over the cap returns ErrEventTooLong, and the Reader is done. The Event's slices are
// valid until the next call.
func (r *refReader) Next() (Event, error) {
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

// line returns the next line including its terminator (LF, CRLF or lone CR). The slice aliases
// the read buffer until the next call. Each byte is scanned once, so a line costs what it is long.
func (r *refReader) line() ([]byte, error) {
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
func (r *refReader) take(end int) []byte {
	line := r.buf[r.r:end]
	r.r = end
	return line
}

// fill moves unread bytes to the front (returning how far they moved), grows the buffer when it
// is full, and reads once from src.
func (r *refReader) fill() int {
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

// trimEOL drops one line ending (LF, CRLF or CR) from line.
func trimEOL(line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line
}
