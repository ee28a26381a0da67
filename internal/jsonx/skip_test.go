package jsonx

import (
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"math/rand/v2"
	"testing"
	"unicode/utf8"
)

// skipStringRef is skipString as it was before the 64-byte block stage: the 8-bytes-at-a-time
// loop alone. The block stage must not change a single verdict or offset of it.
func skipStringRef(b []byte, i int) (int, bool) {
	n := len(b)
	for {
		for i+8 <= n {
			if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= n {
			return i, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= n {
				return i, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if n-i < 6 || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		case c < 0x20:
			return i, false
		case c >= utf8.RuneSelf:
			j := i + 1
			for j < n && b[j] >= utf8.RuneSelf {
				j++
			}
			if !utf8.Valid(b[i:j]) {
				return i, false
			}
			i = j
		default:
			i++
		}
	}
}

// stringAlphabet is what the generated strings are made of: mostly plain text, and every byte
// class the scan treats apart — quotes, runs of backslashes (escaping quotes, backslashes, each
// other, across 64-byte blocks), simple and bad escapes, \u, controls, valid and broken UTF-8.
var stringAlphabet = []string{
	"a", "b", "c", "d", " ", "x", "0", "{", "]", ":", ",", "~", "\x7f", `"`, `\`, `\\`, `\"`, `\n`,
	`\t`, `\/`, `\q`, `\u00e9`, `\u12`, `\uD83D\uDE00`, "\x00", "\x1f", "\n", "é", "世", "\xff",
	"\xc3", "\xe4\xb8", "\xf0\x9f\x98\x80",
}

// compareSkip checks skipString against skipStringRef at every start offset of b.
func compareSkip(t *testing.T, b []byte) {
	t.Helper()
	for i := range b {
		gj, gok := skipString(b, i)
		wj, wok := skipStringRef(b, i)
		if gj != wj || gok != wok {
			t.Fatalf("skipString(%q, %d) = %d, %v; the byte loop alone says %d, %v", b, i, gj, gok, wj, wok)
		}
	}
}

// TestSkipStringBlocks holds skipString (with its 64-byte block stage) to the byte loop alone on
// long generated strings, at every offset, with plain-text runs of several lengths so that each
// byte class lands at every position of a block and straddles block boundaries.
func TestSkipStringBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 400 {
		var b []byte
		for len(b) < 300 {
			if r.IntN(3) == 0 {
				b = append(b, stringAlphabet[r.IntN(len(stringAlphabet))]...)
			} else {
				for k := r.IntN(40); k > 0; k-- {
					b = append(b, 'a'+byte(r.IntN(26)))
				}
			}
		}
		compareSkip(t, b)
	}
	// Backslash runs of every length ending at every position around a block boundary, then a
	// quote: the carry between blocks decides whether the quote ends the string.
	for run := 1; run <= 9; run++ {
		for at := 50; at < 140; at++ {
			b := make([]byte, 0, 200)
			for len(b) < at-run {
				b = append(b, 'a')
			}
			for range run {
				b = append(b, '\\')
			}
			b = append(b, `"tail"`...)
			for len(b) < 200 {
				b = append(b, 'z')
			}
			compareSkip(t, b)
		}
	}
}

// TestMovemask: movemask gathers exactly the high bits, byte k to bit k.
func TestMovemask(t *testing.T) {
	for m := range 256 {
		var v uint64
		for k := range 8 {
			if m&(1<<k) != 0 {
				v |= 0x80 << (8 * k)
			}
		}
		if got := movemask(v); got != uint64(m) {
			t.Fatalf("movemask(%#x) = %#x, want %#x", v, got, m)
		}
	}
}

// TestEqHiBadHiExact: eqHi and badHi flag exactly their bytes, whatever the neighbours are.
func TestEqHiBadHiExact(t *testing.T) {
	fillers := []byte{0, 0x01, 0x1f, 0x20, 0x21, '"', '\\', 'a', 0x7f, 0x80, 0xff}
	for pos := range 8 {
		for c := range 256 {
			for _, f := range fillers {
				var x uint64
				for k := range 8 {
					v := f
					if k == pos {
						v = byte(c)
					}
					x |= uint64(v) << (8 * k)
				}
				for k := range 8 {
					v := byte(x >> (8 * k))
					if got, want := eqHi(x, lo*'"')>>(8*k+7)&1 == 1, v == '"'; got != want {
						t.Fatalf("eqHi(%#x, '\"') byte %d = %v", x, k, got)
					}
					if got, want := badHi(x)>>(8*k+7)&1 == 1, v < 0x20 || v >= 0x80; got != want {
						t.Fatalf("badHi(%#x) byte %d = %v", x, k, got)
					}
				}
			}
		}
	}
}

// FuzzSkipString builds a long string out of the fuzzer's bytes (each picks a piece of
// stringAlphabet or a plain-text run), so the block stage sees every class at every alignment,
// and holds it to the byte loop alone, and Valid on the quoted string to encoding/json + UTF-8.
func FuzzSkipString(f *testing.F) {
	f.Add([]byte("abc\x05\x10\x11\x12"), uint8(0))
	f.Add([]byte{14, 14, 14, 13, 200, 201, 15}, uint8(3))
	f.Fuzz(func(t *testing.T, in []byte, shift uint8) {
		b := make([]byte, int(shift%64))
		for k := range b {
			b[k] = 'p'
		}
		for _, c := range in {
			if int(c) < len(stringAlphabet) {
				b = append(b, stringAlphabet[c]...)
			} else {
				for k := int(c) - len(stringAlphabet); k > 0; k -= 3 {
					b = append(b, 'q')
				}
			}
		}
		compareSkip(t, b)
		doc := append(append([]byte{'"'}, b...), '"')
		if got, want := Valid(doc) == nil, json.Valid(doc) && utf8.Valid(doc); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json.Valid and utf8.Valid say %v", doc, got, want)
		}
	})
}
