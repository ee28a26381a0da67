package jsonx

// Iter walks a document while validating it, so a skim that needs the members and elements of a
// few shallow objects and arrays looks at each byte once: the containers it descends into are
// validated by Object and Array as they go, and everything else by Value, which skips one value
// with the same state machine as Valid. A document the caller walks to the end (every container
// it opens closed, then End) has been checked exactly as Valid checks it: same grammar, same
// depth bound counted from the top, strict UTF-8.
//
// Errors are sticky: after the first, every method returns false and Err reports it. Callbacks
// return false to stop the walk early (the caller's own refusal); Err is then nil.
type Iter struct {
	b     []byte
	i     int
	depth int // open brackets around the position
	err   error
}

// NewIter returns an Iter at the start of b.
func NewIter(b []byte) *Iter { return &Iter{b: b} }

// Err is the first syntax, UTF-8 or depth error met (ErrInvalid, ErrInvalidUTF8, *DepthError).
func (it *Iter) Err() error { return it.err }

// Pos is the offset of the next byte to read: just past the last value walked.
func (it *Iter) Pos() int { return it.i }

func (it *Iter) space() {
	for it.i < len(it.b) && isSpace(it.b[it.i]) {
		it.i++
	}
}

func (it *Iter) fail(err error) bool {
	if it.err == nil {
		it.err = err
	}
	return false
}

// Peek skips whitespace and returns the first byte of the next value ('{', '[', '"', …), or 0 at
// the end of the input or after an error.
func (it *Iter) Peek() byte {
	if it.err != nil {
		return 0
	}
	it.space()
	if it.i >= len(it.b) {
		return 0
	}
	return it.b[it.i]
}

// Value validates the next value and returns its span b[start:end].
func (it *Iter) Value() (start, end int, ok bool) {
	if it.err != nil {
		return it.i, it.i, false
	}
	it.space()
	start = it.i
	end, err := scanValue(it.b, it.i, it.depth)
	it.i = end
	if err != nil {
		return start, end, it.fail(err)
	}
	return start, end, true
}

// open consumes the bracket c that opens a container, counting it against MaxDepth.
func (it *Iter) open(c byte) bool {
	if it.err != nil {
		return false
	}
	it.space()
	if it.i >= len(it.b) || it.b[it.i] != c {
		return it.fail(ErrInvalid)
	}
	if it.depth == MaxDepth {
		return it.fail(&DepthError{Offset: it.i, Limit: MaxDepth})
	}
	it.depth++
	it.i++
	it.space()
	return true
}

// next moves past the separator after a member or element: true for ',' (another follows), false
// for the closing bracket (or an error).
func (it *Iter) next(closing byte) (more bool) {
	it.space()
	if it.i >= len(it.b) {
		return it.fail(ErrInvalid)
	}
	switch it.b[it.i] {
	case ',':
		it.i++
		it.space()
		return true
	case closing:
		it.i++
		it.depth--
		return false
	}
	return it.fail(ErrInvalid)
}

// Object walks the object that is the next value. For each member it calls fn with the raw key
// (between its quotes, escapes intact), the offset of the key's opening quote and of the value's
// first byte; fn may walk the value itself (Value, Object, Array: exactly one value) or leave it,
// and Object then validates and skips it. Object reports whether it reached the closing brace:
// false when fn stopped it or on an error (see Err).
func (it *Iter) Object(fn func(key []byte, keyStart, valueStart int) bool) bool {
	if !it.open('{') {
		return false
	}
	if it.i < len(it.b) && it.b[it.i] == '}' {
		it.i++
		it.depth--
		return true
	}
	for {
		b, ks := it.b, it.i
		if ks >= len(b) || b[ks] != '"' {
			return it.fail(ErrInvalid)
		}
		ke, ok := skipString(b, ks+1)
		if !ok {
			return it.fail(stringError(b, ke))
		}
		it.i = ke
		it.space()
		if it.i >= len(b) || b[it.i] != ':' {
			return it.fail(ErrInvalid)
		}
		it.i++
		it.space()
		if it.i >= len(b) {
			return it.fail(ErrInvalid)
		}
		vs := it.i
		if !fn(b[ks+1:ke-1], ks, vs) || it.err != nil {
			return false
		}
		if it.i == vs {
			if _, _, ok := it.Value(); !ok {
				return false
			}
		}
		if !it.next('}') {
			return it.err == nil
		}
	}
}

// Array walks the array that is the next value, calling fn with each element's index and the
// offset of its first byte; as with Object, fn may walk the element or leave it to Array.
func (it *Iter) Array(fn func(index, start int) bool) bool {
	if !it.open('[') {
		return false
	}
	if it.i < len(it.b) && it.b[it.i] == ']' {
		it.i++
		it.depth--
		return true
	}
	for n := 0; ; n++ {
		s := it.i
		if !fn(n, s) || it.err != nil {
			return false
		}
		if it.i == s {
			if _, _, ok := it.Value(); !ok {
				return false
			}
		}
		if !it.next(']') {
			return it.err == nil
		}
	}
}

// End reports whether only whitespace is left after the walk (and no error was met); otherwise
// Err is ErrInvalid (trailing bytes) or the error met earlier.
func (it *Iter) End() bool {
	if it.err != nil {
		return false
	}
	it.space()
	if it.i != len(it.b) {
		return it.fail(ErrInvalid)
	}
	return true
}

// Resume moves the walk forward to offset to without reading the bytes before it: the caller
// vouches that b[Pos():to] is the rest of the current value followed by zero or more complete,
// valid elements or members at the current depth — bytes this Iter's checks already passed in a
// body that began with the same bytes (a skim resuming from a remembered prefix, whose identity a
// keyed MAC proved). It reports false, and moves nothing, when to lies behind the position or past
// the end, or after an error.
func (it *Iter) Resume(to int) bool {
	if it.err != nil || to < it.i || to > len(it.b) {
		return false
	}
	it.i = to
	return true
}
