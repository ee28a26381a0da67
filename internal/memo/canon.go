package memo

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/jsonx"
)

// A dialect (dialect.Name) picks the normalisation rules and seeds the hash chain, so equal
// bytes under two dialects never collide. Responses are OpenAI Responses API input items
// (/v1/responses), Messages Anthropic Messages API messages (/v1/messages), Chat OpenAI Chat
// Completions messages: for Chat only the generic rules and the one-text-part content rule
// apply; no real client capture backs it yet. The seed and the stored records take the name's
// bytes ("responses", "messages", "chat"), so a rename there would orphan every record.

// ErrDialect is returned for a dialect this package has no rules for.
var ErrDialect = errors.New("memo: unknown dialect")

type kind uint8

const (
	kObj kind = iota + 1
	kArr
	kStr // val is the canonical encoding, quotes included
	kLit // number, true, false, null: val is the raw bytes
)

// node is one JSON value of an item, kept in a flat arena (tree.n) so that neither building
// nor writing it recurses. Children of a container are a singly linked list (first, next).
type node struct {
	key         []byte // canonical key (quotes included) when the parent is an object
	val         []byte // scalars only
	kind        kind
	drop        bool
	first, last int32 // children; -1 when none
	next        int32 // next sibling; -1 when none
}

// tree is reused across items by one Chain, so hashing a long input allocates little.
type tree struct {
	n      []node
	stack  []int32
	out    []byte
	frames []frame
}

type frame struct {
	kids   []int32
	i      int
	obj    bool
	opaque bool // inside a tool input: client data, no key is dropped
}

// parse builds the tree of one item. b must have passed jsonx.Valid (the bound on depth and the
// guarantee that the simple scan below sees well-formed input); the scan itself is iterative.
func (t *tree) parse(b []byte) {
	t.n = t.n[:0]
	t.stack = t.stack[:0]
	var key []byte
	for i := 0; i < len(b); {
		switch c := b[i]; c {
		case ' ', '\t', '\n', '\r', ',', ':':
			i++
		case '{', '[':
			k := kArr
			if c == '{' {
				k = kObj
			}
			idx := t.add(node{key: key, kind: k})
			key = nil
			t.stack = append(t.stack, idx)
			i++
		case '}', ']':
			t.stack = t.stack[:len(t.stack)-1]
			i++
		case '"':
			end, _ := jsonx.StringEnd(b, i)
			s := canonString(b[i:end])
			i = end
			if len(t.stack) > 0 && t.n[t.stack[len(t.stack)-1]].kind == kObj && key == nil && isKey(b, i) {
				key = s
				continue
			}
			t.add(node{key: key, val: s, kind: kStr})
			key = nil
		default:
			end := jsonx.ScalarEnd(b, i)
			t.add(node{key: key, val: b[i:end], kind: kLit})
			key = nil
			i = end
		}
	}
}

// isKey reports whether the string that ended at b[i] is followed by ':' (only keys are, in
// valid JSON).
func isKey(b []byte, i int) bool {
	for ; i < len(b); i++ {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			continue
		case ':':
			return true
		}
		return false
	}
	return false
}

func (t *tree) add(nd node) int32 {
	nd.first, nd.last, nd.next = -1, -1, -1
	idx := int32(len(t.n))
	t.n = append(t.n, nd)
	if len(t.stack) > 0 {
		p := &t.n[t.stack[len(t.stack)-1]]
		if p.last < 0 {
			p.first = idx
		} else {
			t.n[p.last].next = idx
		}
		p.last = idx
	}
	return idx
}

// canonString returns the canonical encoding of the JSON string literal s (quotes included):
// the decoded text with only '"', '\\' and control characters escaped (the two-character forms
// where JSON has them, else \u00xx), so "\u00e9", "\/" and their literal forms all hash the
// same. A lone surrogate escape (a \uD800-\uDFFF that is not half of a pair) has no character
// to decode to, and decoders disagree on it (Python keeps the surrogate, Go and JavaScript's
// encoders write U+FFFD, some refuse the string) while compactd forwards it as sent: it stays an
// escape, its hex in lower case, so "\ud800", "\udfff" and "\ufffd" stay three texts. A literal
// whose escapes are all two-character ones other than "\/" is already canonical (valid JSON
// cannot hold a raw quote or control character), so the common case — agent text full of \n
// and \" — neither decodes nor copies.
func canonString(s []byte) []byte {
	for i := bytes.IndexByte(s, '\\'); i >= 0; {
		switch s[i+1] { // valid JSON: a backslash in a literal is followed by its escape
		case '"', '\\', 'n', 'r', 't', 'b', 'f':
		default: // \/ or \uXXXX
			return recodeString(s)
		}
		j := bytes.IndexByte(s[i+2:], '\\')
		if j < 0 {
			break
		}
		i += 2 + j
	}
	return s
}

const hexDigits = "0123456789abcdef"

// recodeString decodes and re-encodes a literal canonically (see canonString), in one pass over
// it: bytes outside escapes are valid UTF-8 other than '"', '\\' and controls (jsonx.Valid
// checked), so they are copied; each escape is decoded and written canonically.
func recodeString(s []byte) []byte {
	in := s[1 : len(s)-1]
	out := make([]byte, 0, len(s))
	out = append(out, '"')
	for i := 0; i < len(in); i++ {
		c := in[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		switch in[i] {
		case '/':
			out = append(out, '/')
		case 'u':
			r := hex4(in[i+1:])
			i += 4
			if utf16.IsSurrogate(r) {
				if i+6 < len(in) && in[i+1] == '\\' && in[i+2] == 'u' {
					if d := utf16.DecodeRune(r, hex4(in[i+3:])); d != utf8.RuneError {
						out = utf8.AppendRune(out, d)
						i += 6
						continue
					}
				}
				out = append(out, '\\', 'u', hexDigits[r>>12], hexDigits[r>>8&15], hexDigits[r>>4&15], hexDigits[r&15])
				continue
			}
			out = appendCanonRune(out, r)
		default: // '"', '\\', 'b', 'f', 'n', 'r', 't': canonical already
			out = append(out, '\\', in[i])
		}
	}
	return append(out, '"')
}

// appendCanonRune appends r (not a surrogate) as the canonical encoding writes it.
func appendCanonRune(out []byte, r rune) []byte {
	switch {
	case r == '"' || r == '\\':
		return append(out, '\\', byte(r))
	case r == '\n':
		return append(out, '\\', 'n')
	case r == '\r':
		return append(out, '\\', 'r')
	case r == '\t':
		return append(out, '\\', 't')
	case r == '\b':
		return append(out, '\\', 'b')
	case r == '\f':
		return append(out, '\\', 'f')
	case r < 0x20:
		return append(out, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&15])
	}
	return utf8.AppendRune(out, r)
}

// hex4 decodes the four hex digits that begin b (valid JSON: a \u escape has them).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			r = r<<4 | rune(c-'0')
		default:
			r = r<<4 | rune((c|0x20)-'a'+10)
		}
	}
	return r
}

// child returns the first non-dropped member of object o named key (canonical, quotes
// included), or -1.
func (t *tree) child(o int32, key string) int32 {
	if o < 0 || t.n[o].kind != kObj {
		return -1
	}
	for c := t.n[o].first; c >= 0; c = t.n[c].next {
		if !t.n[c].drop && string(t.n[c].key) == key {
			return c
		}
	}
	return -1
}

// str returns the canonical encoding of o's string member key, or "".
func (t *tree) str(o int32, key string) string {
	if c := t.child(o, key); c >= 0 && t.n[c].kind == kStr {
		return string(t.n[c].val)
	}
	return ""
}

func (t *tree) dropMember(o int32, key string) {
	if c := t.child(o, key); c >= 0 {
		t.n[c].drop = true
	}
}

// dropIfEmpty drops o's member key when it is null or an empty array.
func (t *tree) dropIfEmpty(o int32, key string) {
	c := t.child(o, key)
	if c < 0 {
		return
	}
	if (t.n[c].kind == kArr && t.n[c].first < 0) || (t.n[c].kind == kLit && string(t.n[c].val) == "null") {
		t.n[c].drop = true
	}
}

// each calls fn for every element of array a.
func (t *tree) each(a int32, fn func(e int32)) {
	if a < 0 || t.n[a].kind != kArr {
		return
	}
	for c := t.n[a].first; c >= 0; c = t.n[c].next {
		fn(c)
	}
}

// collapse turns content c, when it is a list of exactly one text part of type partType whose
// only remaining members are "type" and "text", into the plain string: the model sees the same
// text either way, and clients switch between the two forms from one request to the next.
func (t *tree) collapse(c int32, partType string) {
	if c < 0 || t.n[c].kind != kArr {
		return
	}
	p := t.n[c].first
	if p < 0 || t.n[p].next >= 0 || t.n[p].kind != kObj {
		return
	}
	members, text := 0, int32(-1)
	for m := t.n[p].first; m >= 0; m = t.n[m].next {
		if t.n[m].drop {
			continue
		}
		members++
		if string(t.n[m].key) == `"text"` {
			text = m
		}
	}
	if members != 2 || text < 0 || t.n[text].kind != kStr || t.str(p, `"type"`) != partType {
		return
	}
	t.n[c].kind, t.n[c].val, t.n[c].first, t.n[c].last = kStr, t.n[text].val, -1, -1
}

// normalise applies the dialect's rules to the item at the root (node 0). Every rule looks at a
// fixed, shallow path, so this is a bounded number of steps per member, not a walk.
func (t *tree) normalise(d dialect.Name) {
	const root = 0
	if len(t.n) == 0 || t.n[root].kind != kObj {
		return
	}
	switch d {
	case dialect.Responses:
		typ := t.str(root, `"type"`)
		if typ == "" && t.child(root, `"role"`) >= 0 {
			// An EasyInputMessage ({"role","content"}) is a message item.
			t.stack = append(t.stack[:0], root)
			t.add(node{key: []byte(`"type"`), val: []byte(`"message"`), kind: kStr})
			typ = `"message"`
		}
		// Ids and statuses are the API's bookkeeping, which clients drop or keep as they
		// please; the model never sees them. An item_reference is nothing but its id.
		if typ != `"item_reference"` {
			t.dropMember(root, `"id"`)
			t.dropMember(root, `"status"`)
		}
		// Codex's client-side metadata (turn ids, timestamps): not model input.
		t.dropMember(root, `"internal_chat_message_metadata_passthrough"`)
		switch typ {
		case `"message"`:
			content := t.child(root, `"content"`)
			t.each(content, func(p int32) {
				t.dropIfEmpty(p, `"annotations"`)
				t.dropIfEmpty(p, `"logprobs"`)
			})
			part := `"input_text"`
			if t.str(root, `"role"`) == `"assistant"` {
				part = `"output_text"`
			}
			t.collapse(content, part)
		case `"function_call_output"`, `"custom_tool_call_output"`:
			t.collapse(t.child(root, `"output"`), `"input_text"`)
		}
	case dialect.Messages:
		// cache_control is dropped everywhere by write (outside tool inputs).
		content := t.child(root, `"content"`)
		t.each(content, func(b int32) {
			t.dropIfEmpty(b, `"citations"`)
			if t.str(b, `"type"`) == `"tool_result"` {
				inner := t.child(b, `"content"`)
				t.each(inner, func(ib int32) { t.dropIfEmpty(ib, `"citations"`); t.dropCacheControl(ib) })
				t.collapse(inner, `"text"`)
			}
			t.dropCacheControl(b)
		})
		t.collapse(content, `"text"`)
	case dialect.Chat:
		t.collapse(t.child(root, `"content"`), `"text"`)
	}
}

// dropCacheControl marks a block's cache_control now, so collapse sees the block without it;
// write drops the remaining ones anywhere.
func (t *tree) dropCacheControl(b int32) { t.dropMember(b, `"cache_control"`) }

// write appends the canonical encoding of the tree to t.out: members sorted by key, no
// whitespace, dropped members left out. It runs on an explicit stack of frames.
func (t *tree) write(d dialect.Name) []byte {
	t.out = t.out[:0]
	if len(t.n) == 0 {
		return t.out
	}
	t.frames = t.frames[:0]
	t.out = t.open(t.out, 0, false, d)
	for len(t.frames) > 0 {
		f := &t.frames[len(t.frames)-1]
		if f.i == len(f.kids) {
			if f.obj {
				t.out = append(t.out, '}')
			} else {
				t.out = append(t.out, ']')
			}
			t.frames = t.frames[:len(t.frames)-1]
			continue
		}
		if f.i > 0 {
			t.out = append(t.out, ',')
		}
		c := f.kids[f.i]
		f.i++
		opaque := f.opaque
		if f.obj {
			t.out = append(t.out, t.n[c].key...)
			t.out = append(t.out, ':')
			// Messages tool_use / server_tool_use input is the client's own JSON: a key
			// named cache_control inside it is data, not a cache breakpoint.
			opaque = opaque || string(t.n[c].key) == `"input"`
		}
		t.out = t.open(t.out, c, opaque, d) // f may be stale from here on
	}
	return t.out
}

// open writes a scalar, or the opening bracket of a container and pushes its frame.
func (t *tree) open(out []byte, c int32, opaque bool, d dialect.Name) []byte {
	nd := &t.n[c]
	switch nd.kind {
	case kStr, kLit:
		return append(out, nd.val...)
	}
	var kids []int32
	for k := nd.first; k >= 0; k = t.n[k].next {
		if t.n[k].drop {
			continue
		}
		if nd.kind == kObj && d == dialect.Messages && !opaque && string(t.n[k].key) == `"cache_control"` {
			continue
		}
		kids = append(kids, k)
	}
	if nd.kind == kObj {
		slices.SortStableFunc(kids, func(a, b int32) int { return bytes.Compare(t.n[a].key, t.n[b].key) })
		out = append(out, '{')
	} else {
		out = append(out, '[')
	}
	t.frames = append(t.frames, frame{kids: kids, obj: nd.kind == kObj, opaque: opaque})
	return out
}

// canonical returns the canonical encoding of one conversation item under dialect d: what the
// model sees, not how the client serialised it (see the package doc for the rules). Two items
// the model cannot tell apart encode to the same bytes. It fails only on a bad dialect or bytes
// that are not one valid JSON value within jsonx.MaxDepth. The result is a view of t.out, valid
// until the next call.
func (t *tree) canonical(d dialect.Name, item []byte) ([]byte, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("%w %q", ErrDialect, d)
	}
	if err := jsonx.Valid(item); err != nil {
		return nil, fmt.Errorf("memo: item: %w", err)
	}
	t.parse(item)
	t.normalise(d)
	return t.write(d), nil
}
