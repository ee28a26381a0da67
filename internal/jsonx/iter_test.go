package jsonx

import (
	"errors"
	"math/bits"
	"strings"
	"testing"
)

// walk descends through every container of the next value down to depth limit (relative), and
// leaves deeper values to Object/Array, so a test exercises both Value and the iterator's own
// bracket handling.
func walk(it *Iter, limit int) {
	if limit <= 0 {
		it.Value()
		return
	}
	switch it.Peek() {
	case '{':
		it.Object(func(_ []byte, _, _ int) bool { walk(it, limit-1); return true })
	case '[':
		it.Array(func(_, _ int) bool { walk(it, limit-1); return true })
	default:
		it.Value()
	}
}

// iterVerdict walks b with Iter to the given depth and returns what Valid would: nil or the
// error.
func iterVerdict(b []byte, limit int) error {
	it := NewIter(b)
	walk(it, limit)
	it.End()
	return it.Err()
}

func sameVerdict(t *testing.T, b []byte, limit int) {
	t.Helper()
	want, got := Valid(b), iterVerdict(b, limit)
	var wd, gd *DepthError
	switch {
	case (want == nil) != (got == nil):
		t.Fatalf("walk %d of %.80q: Iter %v, Valid %v", limit, b, got, want)
	case errors.As(want, &wd) != errors.As(got, &gd):
		t.Fatalf("walk %d of %.80q: Iter %v, Valid %v", limit, b, got, want)
	case wd != nil && *wd != *gd:
		t.Fatalf("walk %d of %.80q: Iter %v, Valid %v (offsets differ)", limit, b, got, want)
	case wd == nil && want != got:
		t.Fatalf("walk %d of %.80q: Iter %v, Valid %v", limit, b, got, want)
	}
}

// TestIterAgreesWithValid: whatever part of a document a skim walks itself, the walk refuses
// exactly what Valid refuses, with the same error (depth errors at the same bracket).
func TestIterAgreesWithValid(t *testing.T) {
	cases := []string{
		`{}`, `[]`, ` { "a" : [ 1 , {"b":null} ] } `, `{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":}`, `{,}`,
		`[1 2]`, `{"a":1}x`, `{"a":1}}`, `"x"`, `1`, ``, ` `, `{"a":"\x01"}`, "{\"a\":\"\xff\"}",
		"{\"\xc3\x28\":1}", `{"a":"\q"}`, `{"a":[tru]}`, `{"a":01}`, `[{"a":{"b":[{"c":"d"}]}}]`,
		string(deep(MaxDepth, "[", "]")), string(deep(MaxDepth+1, "[", "]")),
		strings.Repeat(`{"a":`, MaxDepth+1), strings.Repeat(`{"a":[`, 600),
		`{"input":[{"type":"message","content":[{"type":"input_text","text":"hi"}]}]}`,
	}
	for _, c := range cases {
		for limit := range 6 {
			sameVerdict(t, []byte(c), limit)
		}
		sameVerdict(t, []byte(c), MaxDepth+2)
	}
}

// TestSpecialLowestBitExact: the lowest byte special flags is the first byte a string scan must
// stop at, for every byte value in every position after every prefix class; skipString jumps there.
func TestSpecialLowestBitExact(t *testing.T) {
	stop := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80 }
	fillers := []byte{'a', ' ', '!', '#', '[', '~', 0x7f, 0x21}
	for pos := range 8 {
		for c := range 256 {
			for _, f := range fillers {
				var w [8]byte
				for k := range w {
					w[k] = f
				}
				w[pos] = byte(c)
				// bytes above pos: the worst cases for borrows
				for k := pos + 1; k < 8; k++ {
					w[k] = byte(0x20 + k)
				}
				x := uint64(0)
				for k := 7; k >= 0; k-- {
					x = x<<8 | uint64(w[k])
				}
				want := 8
				for k := range w {
					if stop(w[k]) {
						want = k
						break
					}
				}
				got := 8
				if m := special(x); m != 0 {
					got = bits.TrailingZeros64(m) >> 3
				}
				if got != want {
					t.Fatalf("special(% x): first stop byte %d, want %d", w, got, want)
				}
			}
		}
	}
}

// FuzzIter holds Iter walks of every depth to Valid: a skim built on Iter accepts and refuses
// exactly what Valid does.
func FuzzIter(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":"c"}]}`, `[[[`, `{"a":1,}`, "\"\xff\"", `{"a":"\u00e9"}`,
		string(deep(MaxDepth+1, "[", "]"))} {
		f.Add([]byte(s), uint8(2))
	}
	f.Fuzz(func(t *testing.T, b []byte, limit uint8) {
		sameVerdict(t, b, int(limit%8))
	})
}
