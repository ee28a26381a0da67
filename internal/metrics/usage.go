package metrics

import (
	"bytes"

	"github.com/tidwall/gjson"

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
		u.count(gjson.ParseBytes(u.json.obj))
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

// usage takes the token counts from doc's usage object; doc is checked for validity and depth
// before gjson walks it.
func (u *Usage) usage(doc []byte) {
	if jsonx.Valid(doc) != nil {
		return
	}
	for _, path := range []string{"response.usage", "message.usage", "usage"} {
		r := gjson.GetBytes(doc, path)
		if !r.IsObject() {
			continue
		}
		u.count(r)
		return
	}
}

// count takes the token counts from a usage object.
func (u *Usage) count(r gjson.Result) {
	in := r.Get("input_tokens").Int() + r.Get("cache_read_input_tokens").Int() + r.Get("cache_creation_input_tokens").Int()
	if in == 0 {
		in = r.Get("prompt_tokens").Int()
	}
	out := r.Get("output_tokens").Int()
	if out == 0 {
		out = r.Get("completion_tokens").Int()
	}
	// Anthropic reports input in message_start and cumulative output in message_delta.
	u.in, u.out = max(u.in, in), max(u.out, out)
}

// usageCap bounds what Usage keeps to find the usage: one SSE event. Larger events pass
// through untouched and report no tokens.
const usageCap = 8 << 20

// usageObjectCap bounds the usage object a JSON body's scan keeps (they are a few hundred bytes).
const usageObjectCap = 64 << 10

// usageScan finds the top-level "usage" object of a JSON body as the body streams past, keeping
// only that object: a response is never buffered to read its token counts. It is a byte-level
// state machine (strings, escapes, nesting depth as a counter), so it is linear in the body and
// bounded in depth by construction; the object it keeps is validated before gjson reads it.
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
