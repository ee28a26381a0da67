// Package jsonx holds the one JSON safety check every parser of client or upstream bytes in
// compactd goes through before it walks a document: a nesting-depth bound, enforced by a linear,
// non-recursive scan.
//
// Why it exists: gjson (and any recursive-descent parser) recurses once per nesting level, and a
// Go stack overflow is a fatal error that no recover catches — a 6 MB body of "[" took the whole
// process down. The scan below never recurses, so it is safe on any input, and once a document has
// passed it every recursive walk over it is bounded by MaxDepth frames.
package jsonx

import (
	"errors"
	"fmt"

	"github.com/tidwall/gjson"
)

// MaxDepth is the deepest nesting of arrays and objects compactd accepts in a JSON document
// (the top-level value is depth 1). Real agent traffic stays far below it — tool schemas and
// tool results nest a few dozen levels at most — while it keeps every recursive walk shallow.
// Python's json module fails near the same depth, so an upstream would not read deeper
// documents either.
const MaxDepth = 1000

// ErrTooDeep is returned for documents nested deeper than the limit.
var ErrTooDeep = errors.New("JSON nested too deeply")

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

// Valid checks that b is one valid JSON value nested at most MaxDepth levels deep. It returns nil,
// an error matching ErrTooDeep, or ErrInvalid.
func Valid(b []byte) error {
	if err := CheckDepth(b, MaxDepth); err != nil {
		return err
	}
	if !gjson.ValidBytes(b) {
		return ErrInvalid
	}
	return nil
}

// ValidString is Valid for a string (a tool output, a metadata value).
func ValidString(s string) error {
	return Valid([]byte(s))
}
