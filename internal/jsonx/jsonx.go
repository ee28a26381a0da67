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
// Code and logs carry an escape every few dozen bytes (\n, \t, \"), so the word loop passes
// simple escapes itself, with one table lookup, and resumes at the byte after: leaving it for the
// switch below cost a second, unpredictable branch per escape (on which escape character it was).
func skipString(b []byte, i int) (int, bool) {
	n := len(b)
	for {
		for i+8 <= n {
			m := special(binary.LittleEndian.Uint64(b[i:]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
			if b[i] != '\\' || i+1 >= n || !simpleEscape[b[i+1]] {
				break
			}
			i += 2
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
				return i, false // stringError tells this apart from other failures
			}
			i = j
		default:
			i++
		}
	}
}

// simpleEscape holds the bytes that may follow a backslash in a string, except 'u' (which takes
// four hex digits and is left to skipString's switch).
var simpleEscape = [256]bool{'"': true, '\\': true, '/': true, 'b': true, 'f': true, 'n': true, 'r': true, 't': true}

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
