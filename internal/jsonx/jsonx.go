// Package jsonx holds the one JSON safety check every parser of client or upstream bytes in
// compactd goes through before it walks a document: validation with a nesting-depth bound, in one
// linear, non-recursive pass.
//
// Why it exists: gjson (and any recursive-descent parser, gjson.ValidBytes included) recurses once
// per nesting level, and a Go stack overflow is a fatal error that no recover catches — a 6 MB body
// of "[" took the whole process down. The scan below never recurses, so it is safe on any input,
// and once a document has passed it every recursive walk over it is bounded by MaxDepth frames.
//
// The package also has a small reader for documents that have passed Valid (Members, Elements,
// End, AppendUnquoted): it finds member and element spans without decoding values, so a skim of a
// multi-megabyte body does not copy its strings; and Iter, a walk that validates as it goes, for
// a skim that would otherwise validate a body and then walk it again (see iter.go).
package jsonx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// MaxDepth is the deepest nesting of arrays and objects compactd accepts in a JSON document
// (the top-level value is depth 1). Real agent traffic stays far below it — tool schemas and
// tool results nest a few dozen levels at most — while it keeps every recursive walk shallow.
// Python's json module fails near the same depth, so an upstream would not read deeper
// documents either.
const MaxDepth = 1000

// ErrTooDeep is returned for documents nested deeper than the limit.
var ErrTooDeep = errors.New("JSON nested too deeply")

// ErrInvalidUTF8 is returned for a document whose strings are not valid UTF-8; it matches
// ErrInvalid with errors.Is. JSON text must be UTF-8 (RFC 8259), and decoders disagree on what
// an invalid byte means (kept as is, replaced by U+FFFD, refused): compactd would read one value
// and an upstream another, so such a document is refused rather than interpreted.
var ErrInvalidUTF8 = &utf8Error{}

type utf8Error struct{}

func (*utf8Error) Error() string        { return "not valid JSON: a string is not valid UTF-8" }
func (*utf8Error) Is(target error) bool { return target == ErrInvalid }

// ErrInvalid is returned for bytes that are not one valid JSON value.
var ErrInvalid = errors.New("not valid JSON")

// DepthError says how deep the limit was crossed; it matches ErrTooDeep with errors.Is.
type DepthError struct {
	Offset int // byte offset of the bracket that crossed the limit
	Limit  int
}

func (e *DepthError) Error() string {
	return fmt.Sprintf("JSON nested more than %d levels deep (at byte %d)", e.Limit, e.Offset)
}

// Is makes errors.Is(err, ErrTooDeep) true.
func (e *DepthError) Is(target error) bool { return target == ErrTooDeep }

// CheckDepth reports a *DepthError when b nests arrays and objects more than limit levels deep.
// It is one linear pass that only tracks strings and brackets; it does not validate.
func CheckDepth(b []byte, limit int) error {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			// Skip the string: brackets inside it are text.
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '[', '{':
			depth++
			if depth > limit {
				return &DepthError{Offset: i, Limit: limit}
			}
		case ']', '}':
			depth--
		}
	}
	return nil
}

// Valid checks that b is one valid JSON value (RFC 8259, as encoding/json.Valid reads it) nested
// at most MaxDepth levels deep. It returns nil, a *DepthError (matching ErrTooDeep) when a
// bracket crosses the limit before any syntax error, or ErrInvalid.
//
// It is a single iterative pass: a goto state machine whose only memory is one bit per open
// bracket (object or array) in a fixed array on the stack, so it neither recurses nor allocates.
// That also makes it faster than gjson.ValidBytes on agent bodies, which are mostly long strings
// (see BenchmarkValid).
func Valid(b []byte) error {
	i, err := scanValue(b, 0, 0)
	if err != nil {
		return err
	}
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	if i != len(b) {
		return ErrInvalid
	}
	return nil
}

// scanValue validates the one value that starts at b[i] (after optional whitespace) inside base
// open brackets, and returns the index just past it (trailing whitespace not included). The depth
// bound counts the base brackets, so a value checked this way inside a walk (Iter) is refused at
// the same bracket, with the same offset, as Valid refuses it in the whole document.
func scanValue(b []byte, i, base int) (int, error) {
	var objects [(MaxDepth + 63) / 64]uint64 // bit d-1 set: the bracket open at depth d is '{'
	depth, n := base, len(b)
	var ok bool
value:
	for i < n && isSpace(b[i]) {
		i++
	}
	if i == n {
		return i, ErrInvalid
	}
	switch b[i] {
	case '{':
		if depth == MaxDepth {
			return i, &DepthError{Offset: i, Limit: MaxDepth}
		}
		objects[depth>>6] |= 1 << (depth & 63)
		depth++
		for i++; i < n && isSpace(b[i]); i++ {
		}
		if i < n && b[i] == '}' {
			i++
			depth--
			goto after
		}
		goto key
	case '[':
		if depth == MaxDepth {
			return i, &DepthError{Offset: i, Limit: MaxDepth}
		}
		objects[depth>>6] &^= 1 << (depth & 63)
		depth++
		for i++; i < n && isSpace(b[i]); i++ {
		}
		if i < n && b[i] == ']' {
			i++
			depth--
			goto after
		}
		goto value
	case '"':
		if i, ok = skipString(b, i+1); !ok {
			return i, stringError(b, i)
		}
	case 't':
		if !hasLiteral(b, i, "true") {
			return i, ErrInvalid
		}
		i += 4
	case 'f':
		if !hasLiteral(b, i, "false") {
			return i, ErrInvalid
		}
		i += 5
	case 'n':
		if !hasLiteral(b, i, "null") {
			return i, ErrInvalid
		}
		i += 4
	default:
		if i, ok = skipNumber(b, i); !ok {
			return i, ErrInvalid
		}
	}
after:
	if depth == base {
		return i, nil
	}
	for i < n && isSpace(b[i]) {
		i++
	}
	if i == n {
		return i, ErrInvalid
	}
	if objects[(depth-1)>>6]&(1<<((depth-1)&63)) != 0 {
		switch b[i] {
		case ',':
			for i++; i < n && isSpace(b[i]); i++ {
			}
			goto key
		case '}':
			i++
			depth--
			goto after
		}
		return i, ErrInvalid
	}
	switch b[i] {
	case ',':
		i++
		goto value
	case ']':
		i++
		depth--
		goto after
	}
	return i, ErrInvalid
key:
	if i == n || b[i] != '"' {
		return i, ErrInvalid
	}
	if i, ok = skipString(b, i+1); !ok {
		return i, stringError(b, i)
	}
	for i < n && isSpace(b[i]) {
		i++
	}
	if i == n || b[i] != ':' {
		return i, ErrInvalid
	}
	i++
	goto value
}

// ValidString is Valid for a string (a header, a tool output), without copying it.
func ValidString(s string) error {
	return Valid(unsafe.Slice(unsafe.StringData(s), len(s)))
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

func hasLiteral(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

// SWAR constants: lo has 0x01 in every byte, hi 0x80.
const (
	lo = 0x0101010101010101
	hi = 0x8080808080808080
)

// special returns a word with the high bit set in each of the 8 bytes of x (little endian) that
// is '"', '\\', a control character or a non-ASCII byte: the bytes a string scan must stop at.
// Each term is the classic "has a zero byte" / "has a byte < n" test; x&hi is "has a byte >=
// 0x80". The terms can also flag a byte above a flagged one (a borrow carries upward), never one
// below, so the lowest set bit is exact: bits.TrailingZeros64(m)/8 is the first byte to stop at.
func special(x uint64) uint64 {
	q := x ^ (lo * '"')
	s := x ^ (lo * '\\')
	return ((q-lo)&^q | (s-lo)&^s | (x-lo*0x20)&^x | x) & hi
}

// skipString returns the index just past the closing quote of the string whose contents start
// at b[i], and whether the string is valid: no raw control characters, only the escapes JSON
// defines, valid UTF-8. Agent bodies are mostly string contents, so this is the hot loop of every
// skim: plain bytes are passed 8 at a time, the word holding a byte to stop at jumps straight to
// it, and a run of non-ASCII bytes is checked as a whole by utf8.Valid (valid UTF-8 sequences are
// made of bytes >= 0x80 only, so a string is valid UTF-8 exactly when each such run is).
//
// Code and logs carry an escape every few dozen bytes (\n, \t, \"), and each one stops the word
// loop with a mispredicted branch. So simple escapes are passed with one table lookup (not a
// switch on the escape character, a second unpredictable branch), and where two come less than
// 32 bytes apart the string is handed to skipBlocks, which passes 64 bytes at a time without
// stopping at escapes, until a block holds something this loop must look at (see skipBlocks).
// Every refusal, and every offset returned, is this loop's: skipBlocks only ever skips text it
// has checked to be plain ASCII with simple escapes (TestSkipStringFastPath, FuzzSkipString).
func skipString(b []byte, i int) (int, bool) {
	n := len(b)
	// When to hand over to skipBlocks: the last simple escape, where blocks may start again, and
	// the wait after a failed try. An array, kept in memory: as locals they cost the word loop
	// below a register, and it spilled its word.
	st := [3]int{i - 64, i, 64}
	for {
		for i+8 <= n {
			if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i < n && b[i] >= utf8.RuneSelf {
			j := i + 1
			for j < n && b[j] >= utf8.RuneSelf {
				j++
			}
			if !utf8.Valid(b[i:j]) {
				return i, false // stringError tells this apart from other failures
			}
			i = j
			continue
		}
		if i+1 < n && b[i] == '\\' && simpleEscape[b[i+1]] {
			i += 2
			if i-st[0] < 32 && i >= st[1] && n-i >= 64 {
				// Escapes are dense here: pass blocks until one holds something to stop at.
				// What stops them lies in b[j:j+64], for the loop here; when that was the first
				// block (non-ASCII text, say), wait twice as long each time before trying again.
				j, plain := skipBlocks(b, i)
				if !plain {
					if j > i {
						st[2] = 64 // blocks passed: text where they pay
					} else {
						st[2] = min(2*st[2], 4096)
					}
					st[1] = j + st[2]
				}
				i = j
			}
			st[0] = i
			continue
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
		default:
			i++
		}
	}
}

// simpleEscape holds the bytes that may follow a backslash in a string, except 'u' (which takes
// four hex digits and is left to skipString's switch).
var simpleEscape = [256]bool{'"': true, '\\': true, '/': true, 'b': true, 'f': true, 'n': true, 'r': true, 't': true}

const (
	b7f       = 0x7f7f7f7f7f7f7f7f
	evenBits  = 0x5555555555555555
	gatherHis = 0x0102040810204080 // moves bit 8k to bit 56+k (see movemask)
)

// eqHi returns the high bit of each byte of x equal to the byte repeated in c. Unlike special it
// is exact in every byte: the add cannot carry out of a byte (0x7f+0x7f < 0x100).
func eqHi(x, c uint64) uint64 {
	y := x ^ c
	return ^((y&b7f + b7f) | y) & hi
}

// movemask gathers the high bits of the bytes of v (only high bits set) into bits 0-7, byte k to
// bit k: the multiply shifts bit 8k left by 56-7k, and no two partial products share a bit, so
// nothing carries.
func movemask(v uint64) uint64 { return (v >> 7) * gatherHis >> 56 }

// blockWord reads 8 bytes of a block: its backslashes as a bit mask (byte k, bit k), exact; its
// quotes as a bit mask that holds every quote, and may also hold a byte just above one (the
// borrow of the "has a zero byte" test); and bad, nonzero when a byte may be a control or
// non-ASCII byte.
func blockWord(x uint64) (bslash, quote, bad uint64) {
	q := x ^ (lo * '"')
	return movemask(eqHi(x, lo*'\\')), movemask((q - lo) &^ q & hi), (x-lo*0x20)&^x | x
}

// skipBlocks passes string contents from b[i] (not inside an escape or a UTF-8 sequence) 64
// bytes at a time, the way simdjson's first stage does, for text with an escape every few bytes
// (code, logs), where the word loop of skipString stops and mispredicts at each one: per block,
// masks of its backslashes and quotes, the backslashes resolved without a branch into the bytes
// they escape (an odd run escapes the next byte; the carry crosses blocks, as in simdjson's
// find_escaped_branchless), and the block passes when no quote is left unescaped, no byte is a
// control or non-ASCII byte and every escape is a simple one. It never decides anything itself:
// it returns where skipString's loop resumes, the start of the first block it did not pass (or
// of the escape straddling into it), which then holds what stopped it (the closing quote, \u, a
// bad byte, or the end of b); or, with plain true, the end of a block without a backslash, where
// the 8-byte loop is the faster one again.
func skipBlocks(b []byte, i int) (j int, plain bool) {
	var carry uint64 // 1: the block's first byte is escaped by a backslash ending the last one
	for ; len(b)-i >= 64; i += 64 {
		blk := (*[64]byte)(b[i : i+64])
		s0, q0, f0 := blockWord(binary.LittleEndian.Uint64(blk[0:]))
		s1, q1, f1 := blockWord(binary.LittleEndian.Uint64(blk[8:]))
		s2, q2, f2 := blockWord(binary.LittleEndian.Uint64(blk[16:]))
		s3, q3, f3 := blockWord(binary.LittleEndian.Uint64(blk[24:]))
		s4, q4, f4 := blockWord(binary.LittleEndian.Uint64(blk[32:]))
		s5, q5, f5 := blockWord(binary.LittleEndian.Uint64(blk[40:]))
		s6, q6, f6 := blockWord(binary.LittleEndian.Uint64(blk[48:]))
		s7, q7, f7 := blockWord(binary.LittleEndian.Uint64(blk[56:]))
		if (f0|f1|f2|f3|f4|f5|f6|f7)&hi != 0 {
			break
		}
		bslash := s0 | s1<<8 | s2<<16 | s3<<24 | s4<<32 | s5<<40 | s6<<48 | s7<<56
		quote := q0 | q1<<8 | q2<<16 | q3<<24 | q4<<32 | q5<<40 | q6<<48 | q7<<56
		// Bytes escaped by an odd run of backslashes: adding each run's start to the run
		// carries past its end, and the parity of where the run started tells which byte after
		// it is escaped.
		bslash &^= carry
		follows := bslash<<1 | carry
		oddStarts := bslash &^ evenBits &^ follows
		evenSeq, over := bits.Add64(oddStarts, bslash, 0)
		escaped := (evenBits ^ evenSeq<<1) & follows
		if quote&^escaped != 0 {
			break // the closing quote, most likely
		}
		for e := escaped; e != 0; e &= e - 1 {
			if !simpleEscape[blk[bits.TrailingZeros64(e)]] {
				return i - int(carry), false
			}
		}
		if escaped|over == 0 {
			// No backslash at all. (escaped alone is 0 too when the only backslash is the
			// last byte: it escapes the next block's first byte, which over carries.)
			return i + 64, true
		}
		carry = over
	}
	return i - int(carry), false
}

// stringError classes a string skipString refused at b[i]: invalid UTF-8, or invalid JSON.
func stringError(b []byte, i int) error {
	if i < len(b) && b[i] >= utf8.RuneSelf {
		return ErrInvalidUTF8
	}
	return ErrInvalid
}

func isHex(c byte) bool { return c-'0' < 10 || (c|0x20)-'a' < 6 }

// skipNumber returns the index just past the number starting at b[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func skipNumber(b []byte, i int) (int, bool) {
	n := len(b)
	if i < n && b[i] == '-' {
		i++
	}
	switch {
	case i < n && b[i] == '0':
		i++
	case i < n && b[i]-'1' < 9:
		for i++; i < n && b[i]-'0' < 10; i++ {
		}
	default:
		return i, false
	}
	if i < n && b[i] == '.' {
		i++
		if i == n || b[i]-'0' >= 10 {
			return i, false
		}
		for ; i < n && b[i]-'0' < 10; i++ {
		}
	}
	if i < n && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < n && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i == n || b[i]-'0' >= 10 {
			return i, false
		}
		for ; i < n && b[i]-'0' < 10; i++ {
		}
	}
	return i, true
}

// End returns the index just past the JSON value that starts at b[i] (no leading whitespace).
// b must have passed Valid; on other bytes End still terminates and stays within len(b), but
// the span means nothing. It is iterative: nesting is only counted.
func End(b []byte, i int) int {
	n := len(b)
	if i >= n {
		return n
	}
	switch b[i] {
	case '"':
		j, _ := skipString(b, i+1)
		return min(j, n)
	case '{', '[':
		depth := 0
		for ; i < n; i++ {
			switch b[i] {
			case '"':
				j, _ := skipString(b, i+1)
				i = j - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return n
	}
	// A number or a literal: up to the next delimiter.
	for ; i < n; i++ {
		switch b[i] {
		case ',', '}', ']', ' ', '\n', '\r', '\t':
			return i
		}
	}
	return n
}

// Members calls fn for each member of the object that starts at obj[0] (obj must have passed
// Valid, or be a sub-slice that is one valid value): the raw key between its quotes, escapes
// intact, and the value's span obj[start:end]. It stops early when fn returns false, and reports
// false when obj is not an object. It does not allocate or decode values.
func Members(obj []byte, fn func(key []byte, start, end int) bool) bool {
	n := len(obj)
	if n == 0 || obj[0] != '{' {
		return false
	}
	i := 1
	for {
		for i < n && (isSpace(obj[i]) || obj[i] == ',') {
			i++
		}
		if i >= n || obj[i] != '"' {
			return true // '}' (or truncated input)
		}
		ke, _ := skipString(obj, i+1)
		ke = min(ke, n)
		key := obj[i+1 : max(i+1, ke-1)]
		for i = ke; i < n && (isSpace(obj[i]) || obj[i] == ':'); i++ {
		}
		end := End(obj, i)
		if !fn(key, i, end) {
			return true
		}
		i = end
	}
}

// Elements calls fn with the span arr[start:end] of each element of the array that starts at
// arr[0] (arr must have passed Valid). It stops early when fn returns false, and reports false
// when arr is not an array. It does not allocate.
func Elements(arr []byte, fn func(start, end int) bool) bool {
	n := len(arr)
	if n == 0 || arr[0] != '[' {
		return false
	}
	i := 1
	for {
		for i < n && (isSpace(arr[i]) || arr[i] == ',') {
			i++
		}
		if i >= n || arr[i] == ']' {
			return true
		}
		end := End(arr, i)
		if end <= i || !fn(i, end) {
			return true
		}
		i = end
	}
}

// AppendUnquoted appends the decoded contents of a JSON string (raw is what lies between the
// quotes, escapes intact) to dst. Invalid surrogate escapes decode to U+FFFD, as encoding/json
// decodes them.
func AppendUnquoted(dst, raw []byte) []byte {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' || i+1 >= len(raw) {
			dst = append(dst, c)
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(raw, i+1)
			if !ok {
				dst = append(dst, '\\', 'u')
				continue
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2, ok2 := rune(0), false
				if i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					r2, ok2 = hex4(raw, i+3)
				}
				if d := utf16.DecodeRune(r, r2); ok2 && d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, raw[i])
		}
	}
	return dst
}

func hex4(b []byte, i int) (rune, bool) {
	if len(b)-i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c-'0' < 10:
			r = r<<4 | rune(c-'0')
		case (c|0x20)-'a' < 6:
			r = r<<4 | rune((c|0x20)-'a'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
