package metrics

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strconv"

	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/sse"
)

// Usage finds the token usage an upstream reported in a model turn's response body as the body
// streams past, for the GenAI "chat" operation (GenAI): the "usage" of a JSON body, or of the
// SSE events that carry one (response.completed, message_start, message_delta, the last chat
// chunk). It keeps only what it must, so a response is never buffered to read its token counts:
// the top-level usage object of a JSON body (at most 64 KiB) or one SSE event at a time (at most
// 8 MiB; larger ones pass unread and report no tokens). It is linear in the body and bounded in
// depth. It is not safe for concurrent use.
type Usage struct {
	// SSE says the body is an event stream (else it is JSON); set it before the first Feed.
	SSE bool

	json   usageScan    // the JSON body's top-level usage, found as it passes
	events *sse.Scanner // the SSE events, as they pass
	in     int64
	out    int64
}

// Feed looks at the next bytes of the body. Once a JSON body's usage was found (or cannot be),
// the rest is not looked at.
func (u *Usage) Feed(p []byte) {
	if u.SSE {
		if u.events == nil {
			u.events = sse.NewScanner(usageCap, u.event)
		}
		_, _ = u.events.Write(p)
		return
	}
	u.json.write(p) // once it found the usage, or never will, it looks at nothing more
}

// Finish ends the body and returns the input and output tokens found (0: not reported). eof says
// the body was read to its end: a JSON body's usage and a last SSE event without its blank line
// count only then. Finish drops what the scan kept; call it once.
func (u *Usage) Finish(eof bool) (input, output int64) {
	if eof && !u.SSE && u.json.found() && jsonx.Valid(u.json.obj) == nil {
		u.count(u.json.obj)
	}
	if eof && u.events != nil {
		u.events.Flush() // a last event without its blank line still counts
	}
	u.json, u.events = usageScan{}, nil
	return u.in, u.out
}

// event looks at one SSE event for usage.
func (u *Usage) event(ev *sse.Event) {
	if bytes.Contains(ev.Data, []byte(`"usage"`)) {
		u.usage(ev.Data)
	}
}

// usage takes the token counts from doc's usage object: response.usage (Responses events),
// message.usage (Anthropic's message_start) or a top-level usage. doc is checked for validity and
// depth before it is walked.
func (u *Usage) usage(doc []byte) {
	if jsonx.Valid(doc) != nil {
		return
	}
	for _, path := range [...][2]string{{"response", "usage"}, {"message", "usage"}, {"usage", ""}} {
		v := member(doc, path[0])
		if path[1] != "" && v != nil {
			v = member(v, path[1])
		}
		if v != nil && v[0] == '{' {
			u.count(v)
			return
		}
	}
}

// count takes the token counts from a usage object (valid JSON).
func (u *Usage) count(obj []byte) {
	var input, cacheRead, cacheCreation, output, prompt, completion int64
	jsonx.Members(obj, func(key []byte, start, end int) bool {
		var dst *int64
		switch string(key) {
		case "input_tokens":
			dst = &input
		case "cache_read_input_tokens":
			dst = &cacheRead
		case "cache_creation_input_tokens":
			dst = &cacheCreation
		case "output_tokens":
			dst = &output
		case "prompt_tokens": // Chat Completions
			dst = &prompt
		case "completion_tokens":
			dst = &completion
		default:
			return true
		}
		*dst = tokenCount(obj[start:end])
		return true
	})
	in := input + cacheRead + cacheCreation
	if in == 0 {
		in = prompt
	}
	out := output
	if out == 0 {
		out = completion
	}
	// Anthropic reports input in message_start and cumulative output in message_delta.
	u.in, u.out = max(u.in, in), max(u.out, out)
}

// member is the value of obj's member named key (the last one, as a JSON decoder keeps it), nil
// when obj is not an object or has none. Keys are compared as written: the APIs' usage fields
// never carry escapes.
func member(obj []byte, key string) []byte {
	var v []byte
	jsonx.Members(obj, func(k []byte, start, end int) bool {
		if string(k) == key {
			v = obj[start:end]
		}
		return true
	})
	return v
}

// tokenCount reads a token count: a JSON integer (a number with a fraction or exponent is
// truncated, as the float it is; anything else, or out of range, is 0).
func tokenCount(raw []byte) int64 {
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return max(n, 0)
	}
	if f, err := strconv.ParseFloat(string(raw), 64); err == nil && f >= 0 && f < 1<<62 {
		return int64(f)
	}
	return 0
}

// usageCap bounds what Usage keeps to find the usage: one SSE event. Larger events pass
// through untouched and report no tokens.
const usageCap = 8 << 20

// usageObjectCap bounds the usage object a JSON body's scan keeps (they are a few hundred bytes).
const usageObjectCap = 64 << 10

// usageScan finds the top-level "usage" object of a JSON body as the body streams past, keeping
// only that object: a response is never buffered to read its token counts. It is a byte-level
// state machine (strings, escapes, nesting depth as a counter), so it is linear in the body and
// bounded in depth by construction; the object it keeps is validated before count reads it.
type usageScan struct {
	depth      int
	inStr, esc bool
	prev       byte                   // the last ',', ':' or '{' at depth 1 (0 after a nested value closed)
	isKey      bool                   // the string being read is a key of the top-level object
	key        [len("usage") + 1]byte // the head of the key being read: enough to tell "usage" apart
	keyLen     int
	keyIsUsage bool // the last top-level key read was "usage"
	capturing  bool
	obj        []byte
	done       bool
}

// stringStop returns the index of the first '"' or '\\' in p[i:], len(p) when there is none. Eight
// bytes at a time, with the classic "has a zero byte" test on the word XORed with each: a borrow
// can flag a byte above a flagged one, never one below, so the lowest flag is exact.
func stringStop(p []byte, i int) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(p); i += 8 {
		x := binary.LittleEndian.Uint64(p[i:])
		q, s := x^(lo*'"'), x^(lo*'\\')
		if m := ((q-lo)&^q | (s-lo)&^s) & hi; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(p); i++ {
		if p[i] == '"' || p[i] == '\\' {
			return i
		}
	}
	return i
}

func (u *usageScan) found() bool { return u.done && u.obj != nil }

// write scans p; it reports true once the scan is over (usage found, or given up).
func (u *usageScan) write(p []byte) bool {
	if u.done {
		return true
	}
	start := -1 // where the usage object starts in p, when capturing
	if u.capturing {
		start = 0
	}
	for i := 0; i < len(p); i++ {
		if u.inStr && !u.esc {
			// Inside a string nothing matters but its end (and a top-level key's head): pass the
			// bytes before the next quote or backslash a word at a time (answers are mostly
			// string contents).
			j := stringStop(p, i)
			if u.isKey && u.keyLen < len(u.key) {
				u.keyLen += copy(u.key[u.keyLen:], p[i:j])
			}
			if i = j; i == len(p) {
				break
			}
		}
		c := p[i]
		if u.inStr {
			switch {
			case u.esc:
				u.esc = false
			case c == '\\':
				u.esc = true
			case c == '"':
				u.inStr = false
				if u.isKey {
					u.keyIsUsage = string(u.key[:u.keyLen]) == "usage"
					u.isKey = false
				}
				continue
			}
			if u.isKey && u.keyLen < len(u.key) {
				u.key[u.keyLen] = c
				u.keyLen++
			}
			continue
		}
		switch c {
		case '"':
			u.inStr = true
			if u.depth == 1 && (u.prev == '{' || u.prev == ',') {
				u.isKey, u.keyLen = true, 0
			}
		case '{', '[':
			if u.depth == 1 && u.prev == ':' && u.keyIsUsage && c == '{' {
				u.capturing, start = true, i
			}
			u.depth++
			if u.depth == 1 {
				if c != '{' {
					u.done = true // not an object: no usage to find
					return true
				}
				u.prev = '{'
			}
		case '}', ']':
			u.depth--
			if u.depth == 1 {
				u.prev = 0
				if u.capturing {
					u.capturing, u.done = false, true
					if len(u.obj)+i+1-start > usageObjectCap {
						u.obj = nil
						return true
					}
					u.obj = append(u.obj, p[start:i+1]...)
					return true
				}
			}
			if u.depth <= 0 {
				u.done = true // the end of the body's object: no usage in it
				return true
			}
		case ',', ':':
			if u.depth == 1 {
				u.prev = c
				if c == ',' {
					u.keyIsUsage = false
				}
			}
		}
	}
	if u.capturing {
		if len(u.obj)+len(p)-start > usageObjectCap {
			u.done, u.obj, u.capturing = true, nil, false
			return true
		}
		u.obj = append(u.obj, p[start:]...)
	}
	return false
}
