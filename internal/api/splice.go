package api

import "unsafe"

// Splice is a rewritten body as the pieces it is made of, in order: runs of the client's own
// bytes (sub-slices of the body it came from, never copied) and the few bytes compactd writes
// between them (a handoff message, a separator, a tool). Sent as one body — the front writes the
// pieces one after the other — a turn that replaces one span of a 2 MB body forwards the rest
// with one copy, into the socket, instead of first joining it into a second 2 MB buffer.
type Splice [][]byte

// Len is the length of the body the pieces make.
func (s Splice) Len() int {
	n := 0
	for _, p := range s {
		n += len(p)
	}
	return n
}

// Bytes joins the pieces into a new slice, for callers that need the body as one.
func (s Splice) Bytes() []byte {
	out := make([]byte, 0, s.Len())
	for _, p := range s {
		out = append(out, p...)
	}
	return out
}

// splicer builds a Splice over body: raw adds body bytes, merging a run that begins where the
// previous one ended into it (so an unchanged stretch stays one piece however it was added);
// lit adds bytes of compactd's own.
type splicer struct {
	body  []byte
	parts Splice
	// last is the end offset in body of the last piece when it is a run of body bytes, -1 when
	// the last piece is compactd's.
	last int
}

func newSplicer(body []byte, pieces int) *splicer {
	return &splicer{body: body, parts: make(Splice, 0, pieces), last: -1}
}

// inBody is the offset of b in body, -1 when b is not a sub-slice of it.
func (s *splicer) inBody(b []byte) int {
	if len(b) == 0 || len(s.body) == 0 {
		return -1
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(s.body)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p+uintptr(len(b)) > base+uintptr(len(s.body)) {
		return -1
	}
	return int(p - base)
}

// raw adds body[from:to].
func (s *splicer) raw(from, to int) {
	if from >= to {
		return
	}
	if s.last == from && len(s.parts) > 0 {
		p := s.parts[len(s.parts)-1]
		s.parts[len(s.parts)-1] = s.body[from-len(p) : to]
	} else {
		s.parts = append(s.parts, s.body[from:to])
	}
	s.last = to
}

// lit adds b, bytes of compactd's own (or of the body, added as they are).
func (s *splicer) lit(b []byte) {
	if len(b) == 0 {
		return
	}
	if o := s.inBody(b); o >= 0 {
		s.raw(o, o+len(b))
		return
	}
	s.parts = append(s.parts, b)
	s.last = -1
}

// element adds b as the next element of an array being written (first: it is the first): when
// b is body bytes that follow the previous element in the body, separated by nothing but a
// comma and whitespace, the separator is the body's own and the run continues; else a comma of
// compactd's goes before b.
func (s *splicer) element(b []byte, first bool) {
	if o := s.inBody(b); o >= 0 && !first && s.last >= 0 && s.last <= o && isSeparator(s.body[s.last:o]) {
		s.raw(s.last, o+len(b))
		return
	}
	if !first {
		s.lit(comma)
	}
	s.lit(b)
}

var (
	comma        = []byte{','}
	openBracket  = []byte{'['}
	closeBracket = []byte{']'}
)

// isSeparator reports whether b is whitespace, one comma, whitespace: what lies between two
// elements of a JSON array.
func isSeparator(b []byte) bool {
	commas := 0
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
		case ',':
			commas++
		default:
			return false
		}
	}
	return commas == 1
}

// closeArray ends an array being written whose closing bracket in body is at end-1: when the
// last element added is body bytes followed there by whitespace and the bracket, those bytes
// continue the run.
func (s *splicer) closeArray(end int) {
	if s.last >= 0 && s.last < end && isClosing(s.body[s.last:end]) {
		s.raw(s.last, end)
		return
	}
	s.lit(closeBracket)
}

// openArray begins an array being written whose opening bracket in body is at start, with
// first as its first element (nil: empty): when first is body bytes preceded there by the
// bracket and whitespace, the bracket is the body's own.
func (s *splicer) openArray(start int, first []byte) {
	if o := s.inBody(first); o > start && s.last == start && s.body[start] == '[' && isSpace(s.body[start+1:o]) {
		s.raw(start, o+len(first))
		return
	}
	s.lit(openBracket)
	if first != nil {
		s.lit(first)
	}
}

func isClosing(b []byte) bool {
	return len(b) > 0 && b[len(b)-1] == ']' && isSpace(b[:len(b)-1])
}

func isSpace(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}
