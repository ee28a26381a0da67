package jsonx

import (
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"math/rand/v2"
	"testing"
	"unicode/utf8"
)

// skipStringRef is skipString as it was before its escape fast path: every stop, escapes
// included, goes through the switch. The fast path must not change a single verdict or offset.
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

// compareSkip checks skipString against skipStringRef at every start offset of b (or the first
// few, given).
func compareSkip(t *testing.T, b []byte, first ...int) {
	t.Helper()
	n := len(b)
	if len(first) > 0 {
		n = min(n, first[0])
	}
	for i := range n {
		gj, gok := skipString(b, i)
		wj, wok := skipStringRef(b, i)
		if gj != wj || gok != wok {
			t.Fatalf("skipString(%q, %d) = %d, %v; the byte loop alone says %d, %v", b, i, gj, gok, wj, wok)
		}
	}
}

// TestSkipStringFastPath holds skipString to skipStringRef on long generated strings, at every
// offset, with plain-text runs of several lengths so that each byte class lands at every
// position of a word and straddles word boundaries.
func TestSkipStringFastPath(t *testing.T) {
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
	// Backslash runs of every length ending at every position, then a quote: the parity of
	// the run decides whether the quote ends the string. The prefix is plain text, or dense
	// escapes (which hand the string to skipBlocks, so runs straddle its block boundaries and
	// the carry between blocks decides).
	for _, prefix := range []string{"a", `\n`, `\t\"`} {
		for _, after := range []string{`"`, "q", "u0041", "u12", "n", "\x01", "é"} {
			testRuns(t, prefix, after, -1)
			testRuns(t, prefix, after, 12)
		}
	}
}

// testRuns checks strings made of prefix (plain text from plainFrom on, if >= 0), a run of
// backslashes at each position, after, and a quote far behind.
func testRuns(t *testing.T, prefix, after string, plainFrom int) {
	for run := 1; run <= 9; run++ {
		for at := 50; at < 200; at++ {
			b := make([]byte, 0, 300)
			for len(b) < at-run {
				b = append(b, prefix...)
			}
			b = b[:at-run]
			if plainFrom >= 0 && plainFrom < len(b) {
				// Plain text from plainFrom on: blocks entered on the escapes before it meet
				// a block whose only backslash is its last byte.
				for k := plainFrom; k < len(b); k++ {
					b[k] = 'a'
				}
			}
			if n := len(b); n > 0 && b[n-1] == '\\' {
				b[n-1] = 'a' // the prefix cut inside an escape
			}
			for range run {
				b = append(b, '\\')
			}
			// The next quote is far: a block that misread what follows the run would pass.
			b = append(b, after...)
			for len(b) < 290 {
				b = append(b, 'z')
			}
			b = append(b, `"tail`...)
			compareSkip(t, b, 4) // at varies the alignment
			compareSkip(t, b[1:], 4)
		}
	}
}

// FuzzSkipString builds a long string out of the fuzzer's bytes (each picks a piece of
// stringAlphabet or a plain-text run), so the fast path sees every class at every alignment,
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
				for k := int(c) - len(stringAlphabet); k > 0; k-- {
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

// TestSkipStringRandomDense: generated strings that mix dense escapes, plain runs of every
// length up to 90 and every byte class, so that blocks are entered, passed, left for plain text
// and stopped at every alignment (this found a block whose only backslash was its last byte
// taken for plain, and the escaped quote after it for the end).
func TestSkipStringRandomDense(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	for range 30000 {
		var b []byte
		for len(b) < 400 {
			switch r.IntN(4) {
			case 0:
				b = append(b, stringAlphabet[r.IntN(len(stringAlphabet))]...)
			case 1:
				b = append(b, `\n`...)
			default:
				for k := r.IntN(90); k > 0; k-- {
					b = append(b, 'a')
				}
			}
		}
		compareSkip(t, b, 3)
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

// TestBlockWord: for every byte value at every position among neighbours of every class,
// blockWord's backslash mask is exact, its quote mask holds every quote (extra bits only make
// skipBlocks hand over early), and bad is nonzero whenever a byte is a control or non-ASCII one.
func TestBlockWord(t *testing.T) {
	fillers := []byte{0, 0x01, 0x1f, 0x20, 0x21, '"', '#', '\\', ']', 'a', 0x7f, 0x80, 0xff}
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
				bs, q, bad := blockWord(x)
				anyBad := false
				for k := range 8 {
					v := byte(x >> (8 * k))
					if got := bs>>k&1 == 1; got != (v == '\\') {
						t.Fatalf("blockWord(%#x): backslash bit %d = %v", x, k, got)
					}
					if v == '"' && q>>k&1 == 0 {
						t.Fatalf("blockWord(%#x): quote at byte %d not flagged", x, k)
					}
					anyBad = anyBad || v < 0x20 || v >= 0x80
				}
				if anyBad && bad&hi == 0 {
					t.Fatalf("blockWord(%#x): bad byte not flagged", x)
				}
			}
		}
	}
}
