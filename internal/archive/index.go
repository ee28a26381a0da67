package archive

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"hash"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/jsonx"
)

// maxTokenBytes drops longer runs (base64, minified blobs): they are noise in a word index and
// would bloat every document they appear in.
const maxTokenBytes = 256

// maxQueryWords bounds the size of the MATCH / tsquery expression.
const maxQueryWords = 32

// isConnector reports the punctuation kept inside tokens so identifiers, paths, URLs, versions and
// addresses stay whole ("src/main.go", "ERR_TIMEOUT", "127.0.0.1:8080").
func isConnector(r rune) bool {
	return r == '_' || r == '.' || r == '/' || r == '-' || r == ':'
}

func isWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || isConnector(r)
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r)
}

// scanTokens calls fn for every token of s in order: a maximal run of letters, digits and
// connectors with connectors trimmed from both ends, in its original case, with its byte span.
func scanTokens(s string, fn func(tok string, start, end int)) {
	start := -1
	emit := func(end int) {
		tok := strings.TrimFunc(s[start:end], isConnector)
		if tok == "" || len(tok) > maxTokenBytes {
			return
		}
		off := start + strings.Index(s[start:end], tok)
		fn(tok, off, off+len(tok))
	}
	for i, r := range s {
		if isWordRune(r) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			emit(i)
			start = -1
		}
	}
	if start >= 0 {
		emit(len(s))
	}
}

// subParts returns the lowercased parts of a compound token, split on connectors and camelCase
// ("parseConfig" → parse config, "HTTPServer" → http server, "src/main.go" → src main go), or nil
// when the token has only one part. Indexing the parts lets "config" find "parseConfig". A token
// of several pieces has each piece among its parts too ("h.retryAccountWebhook" → h
// retryaccountwebhook retry account webhook): the name a model searches for is often a piece of
// a call, a path or a qualified name.
func subParts(tok string) []string {
	var parts []string
	add := func(p string) {
		if p == "" {
			return
		}
		p = strings.ToLower(p)
		if !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	pieces := strings.FieldsFunc(tok, isConnector)
	for _, piece := range pieces {
		if len(pieces) > 1 {
			add(piece) // h.retryAccountWebhook: the method name is a term, not only its words
		}
		camelSplit(piece, add)
	}
	if len(parts) == 1 && parts[0] == strings.ToLower(tok) {
		return nil
	}
	return parts
}

// camelSplit splits at lower→Upper, digit→Upper and at the last capital of an acronym followed by
// a lowercase letter (HTTPServer → HTTP|Server).
func camelSplit(p string, fn func(string)) {
	start := 0
	var prev rune = -1
	for i, r := range p {
		if prev >= 0 && unicode.IsUpper(r) {
			boundary := unicode.IsLower(prev) || unicode.IsDigit(prev)
			if !boundary && unicode.IsUpper(prev) {
				if next, _ := utf8.DecodeRuneInString(p[i+utf8.RuneLen(r):]); unicode.IsLower(next) {
					boundary = true
				}
			}
			if boundary {
				fn(p[start:i])
				start = i
			}
		}
		prev = r
	}
	fn(p[start:])
}

// terms adds every searchable term of text (each token and its parts, lowercased) to set.
func terms(text string, set map[string]struct{}) {
	scanTokens(text, func(tok string, _, _ int) {
		set[strings.ToLower(tok)] = struct{}{}
		for _, p := range subParts(tok) {
			set[p] = struct{}{}
		}
	})
}

// itemText extracts the human-meaningful text of one raw item: every JSON string and number
// value, in document order, one per line. Keys are skipped (they are the same in every item), and
// so are structural values (type, id, call_id, status: the same few words in every item, noise in
// excerpts) and opaque payloads (reasoning encrypted_content, thinking signatures, base64 media).
// So is compactd's own writing that came back in a conversation (handoff.Original): a handoff's
// summary, a summary carrying compactd's facts ledger, a quoted recall result. They are compactd's
// reading of the history, and a search that returned them would quote compactd to itself.
func itemText(item []byte) string {
	var b strings.Builder
	walkText(bytesToString(item), func(s string) {
		if s = handoff.Original(s); s == "" {
			return
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(s)
	})
	if b.Len() == 0 && jsonx.Valid(item) != nil {
		return string(item) // not JSON (e.g. a plain-text session log line): index it as is
	}
	return b.String()
}

// ItemText is the text the archive indexes and cuts excerpts from for one raw item (see
// itemText); bench/recallbench reads segments through it so it measures what the archive sees.
func ItemText(item []byte) string { return itemText(item) }

// textSkipKeys are the members whose values itemText leaves out.
var textSkipKeys = map[string]bool{
	"encrypted_content": true, "signature": true, "type": true, "id": true, "call_id": true, "status": true,
}

// walkText calls fn for every string (decoded) and number (as written) in the first JSON value of
// js, in document order, except the values of textSkipKeys, inline data: URLs, and the data of a
// base64 source ({"type":"base64","media_type":…,"data":…}, Anthropic images and documents).
//
// It is one forward pass with an explicit stack of open objects, linear in len(js) at any depth:
// a recursive walk over gjson results re-scans the rest of the value at every level (quadratic in
// depth) and grows the goroutine stack by a frame per level. Whether an object is a base64 source
// depends on a sibling that may come after "data", so when the bytes mention base64 a first pass
// (also linear) marks those objects.
func walkText(js string, fn func(string)) {
	var base64Objs map[int]bool
	if strings.Contains(js, "base64") {
		seen := map[int]bool{} // objects whose first "type" member was met
		scanJSON(js, func(int, string) bool { return true }, func(obj int, key, lit string) {
			if key != "type" || seen[obj] {
				return
			}
			seen[obj] = true
			if lit == `"base64"` {
				if base64Objs == nil {
					base64Objs = map[int]bool{}
				}
				base64Objs[obj] = true
			}
		})
	}
	scanJSON(js,
		func(obj int, key string) bool {
			return !textSkipKeys[key] && !(key == "data" && base64Objs[obj])
		},
		func(_ int, _ string, lit string) {
			if lit[0] != '"' {
				if c := lit[0]; c == '-' || c == '+' || '0' <= c && c <= '9' {
					fn(lit) // a number, as written
				}
				return
			}
			s := unquote(lit)
			if !(strings.HasPrefix(s, "data:") && strings.Contains(s[:min(len(s), 100)], ";base64,")) {
				fn(s)
			}
		})
}

// scanJSON walks the first JSON value of js once, without recursing. For each object member it
// asks member(obj, key) whether to walk the value (false skips it by counting brackets); for each
// scalar it calls scalar(obj, key, lit), lit being a string literal with its quotes or a number
// or literal as written. obj is the byte offset of the enclosing object's '{' (-1 in an array or
// at the top), key the member's decoded key ("" in arrays). Malformed JSON ends the walk early; it
// never panics or loops.
func scanJSON(js string, member func(obj int, key string) bool, scalar func(obj int, key, lit string)) {
	var buf [32]int
	stack := buf[:0] // offsets of open objects, -1 for open arrays
	top := func() int {
		if len(stack) == 0 {
			return -1
		}
		return stack[len(stack)-1]
	}
	key, wantKey := "", false
	for i := 0; i < len(js); {
		switch js[i] {
		case ' ', '\t', '\n', '\r', ':':
			i++
		case ',':
			key, wantKey = "", top() >= 0
			i++
		case '{':
			stack = append(stack, i)
			key, wantKey = "", true
			i++
		case '[':
			stack = append(stack, -1)
			key, wantKey = "", false
			i++
		case '}', ']':
			if len(stack) == 0 {
				return
			}
			stack = stack[:len(stack)-1]
			key, wantKey = "", false
			i++
			if len(stack) == 0 {
				return // the first value is complete; gjson ignores what follows too
			}
		case '"':
			end, ok := jsonx.StringEnd(js, i)
			if !ok {
				return
			}
			lit := js[i:end]
			i = end
			if wantKey {
				wantKey = false
				key = unquote(lit)
				if !member(top(), key) {
					if i, ok = jsonx.SkipMember(js, i); !ok {
						return
					}
				}
				continue
			}
			scalar(top(), key, lit)
			if len(stack) == 0 {
				return
			}
		default:
			if wantKey {
				return // malformed: an object key must be a string
			}
			end := jsonx.ScalarEnd(js, i)
			scalar(top(), key, js[i:end])
			i = end
			if len(stack) == 0 {
				return
			}
		}
	}
}

// unquote decodes a JSON string literal (quotes included); literals without escapes are sliced.
func unquote(lit string) string {
	if len(lit) < 2 {
		return ""
	}
	if strings.IndexByte(lit, '\\') < 0 {
		return lit[1 : len(lit)-1]
	}
	return gjson.Parse(lit).Str // a string literal: gjson decodes it without recursing
}

// bytesToString views b as a string without copying; the string must not outlive b's contents.
func bytesToString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// blindIndex turns plaintext terms into keyed hash words. Each tenant gets its own HMAC key,
// derived from the archive index key, so equal words in two tenants do not hash alike.
type blindIndex struct {
	key     []byte
	mu      sync.Mutex
	tenants map[string][]byte
}

func newBlindIndex(key []byte) *blindIndex {
	return &blindIndex{key: slices.Clone(key), tenants: map[string][]byte{}}
}

func (ix *blindIndex) tenantKey(tenant string) []byte {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	k, ok := ix.tenants[tenant]
	if !ok {
		m := hmac.New(sha256.New, ix.key)
		m.Write([]byte("compactd/archive/blind-index/v1\x00"))
		m.Write([]byte(tenant))
		k = m.Sum(nil)
		if len(ix.tenants) > 4096 { // bound memory for many tenants
			clear(ix.tenants)
		}
		ix.tenants[tenant] = k
	}
	return k
}

// hasher hashes terms for one tenant; not safe for concurrent use.
type hasher struct {
	mac hash.Hash
	sum []byte
}

func (ix *blindIndex) hasher(tenant string) *hasher {
	return &hasher{mac: hmac.New(sha256.New, ix.tenantKey(tenant)), sum: make([]byte, 0, sha256.Size)}
}

const b32 = "abcdefghijklmnopqrstuvwxyz234567"

// word returns "h" + 10 base32 characters of HMAC(term): 50 bits, so collisions are negligible
// for any realistic vocabulary, and the leading letter keeps every backend's text parser from
// reading a word as a number.
func (h *hasher) word(term string) string {
	h.mac.Reset()
	h.mac.Write([]byte(term))
	h.sum = h.mac.Sum(h.sum[:0])
	v := binary.BigEndian.Uint64(h.sum)
	var out [11]byte
	out[0] = 'h'
	for i := 1; i <= 10; i++ {
		out[i] = b32[v>>59]
		v <<= 5
	}
	return string(out[:])
}

// document returns the sorted, de-duplicated hash words of items, space-separated. Sorting and
// de-duplication mean the index keeps neither word order nor repetition.
func (ix *blindIndex) document(tenant string, items []json.RawMessage) string {
	set := make(map[string]struct{}, 256)
	for _, it := range items {
		terms(itemText(it), set)
	}
	h := ix.hasher(tenant)
	words := make([]string, 0, len(set))
	for t := range set {
		words = append(words, h.word(t))
	}
	slices.Sort(words)
	words = slices.Compact(words)
	return strings.Join(words, " ")
}

// queryWord is one top-level query token: it matches a document holding the token itself, or all
// of its parts (so "src/main" finds "src/main.go" through src+main).
type queryWord struct {
	full  string
	parts []string
}

func parseQuery(text string) []queryWord {
	var out []queryWord
	scanTokens(text, func(tok string, _, _ int) {
		if len(out) >= maxQueryWords {
			return
		}
		full := strings.ToLower(tok)
		if slices.ContainsFunc(out, func(w queryWord) bool { return w.full == full }) {
			return
		}
		out = append(out, queryWord{full: full, parts: subParts(tok)})
	})
	return out
}

// hashQuery returns the query with every term replaced by its hash word.
func (ix *blindIndex) hashQuery(tenant string, q []queryWord) []queryWord {
	h := ix.hasher(tenant)
	out := make([]queryWord, len(q))
	for i, w := range q {
		out[i].full = h.word(w.full)
		for _, p := range w.parts {
			out[i].parts = append(out[i].parts, h.word(p))
		}
	}
	return out
}

// matchExpr renders hashed words as a boolean expression with the backend's operators, all words
// joined by join: (full OR (p1 AND p2)) join (…).
func matchExpr(q []queryWord, and, or, join string) string {
	var b strings.Builder
	for i, w := range q {
		if i > 0 {
			b.WriteString(join)
		}
		if len(w.parts) == 0 {
			b.WriteString(w.full)
			continue
		}
		b.WriteString("(" + w.full + or + "(")
		b.WriteString(strings.Join(w.parts, and))
		b.WriteString("))")
	}
	return b.String()
}

// matches reports whether the term set holds w (itself, or all its parts).
func (w queryWord) matches(has func(string) bool) bool {
	if has(w.full) {
		return true
	}
	if len(w.parts) == 0 {
		return false
	}
	for _, p := range w.parts {
		if !has(p) {
			return false
		}
	}
	return true
}

// countMatches counts the query words a term set holds.
func countMatches(q []queryWord, has func(string) bool) int {
	n := 0
	for _, w := range q {
		if w.matches(has) {
			n++
		}
	}
	return n
}
