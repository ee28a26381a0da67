package archive

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ellipsis marks a cut; its bytes count against ExcerptBytes.
const ellipsis = "…"

// snapSlack is how far a cut may move to land on whitespace instead of mid-word.
const snapSlack = 24

// Excerpt choice. The search ranks segments; within each, segmentExcerpts decides which items
// the model sees and where each window sits. Recall questions in a coding session name one
// identifier, key or path among a few common words ("return type of syncSegmentReplica"), so:
//
//   - function words ("why", "of", "the") are dropped: they match everywhere and say nothing;
//   - a query word found as a whole token is worth twice one found only through its parts: the
//     code listing that defines syncSegmentReplica beats one that merely says "sync", "segment"
//     and "replica" in different places;
//   - ties go to the item repeating the query words most (the output listing an identifier beats
//     the command that names it once), then to the earliest item;
//   - the window centres on the longest query word found as a whole token, which is the
//     identifier rather than "return" or "type" near the top of a file.
//
// Only the query and the item text are looked at: nothing knows what the caller hopes to find.

// Match weights per query word.
const (
	wholeWeight = 2 // the word itself is a token of the item
	partWeight  = 1 // the word is only a camelCase/path part of a token, or all its parts are present
)

// stopWords are the function words of a question. They are dropped for excerpt choice only; the
// search still uses every word.
var stopWords = map[string]bool{
	"a": true, "an": true, "the": true, "of": true, "in": true, "on": true, "to": true, "is": true,
	"are": true, "was": true, "be": true, "for": true, "with": true, "and": true, "or": true,
	"it": true, "this": true, "that": true, "why": true, "what": true, "how": true, "which": true,
	"where": true, "when": true, "do": true, "does": true, "did": true,
}

// contentWords returns q without stop words, or q itself when it holds nothing else.
func contentWords(q []queryWord) []queryWord {
	out := make([]queryWord, 0, len(q))
	for _, w := range q {
		if !stopWords[w.full] {
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		return q
	}
	return out
}

// itemMatch is how well one item's text matches the query.
type itemMatch struct {
	score int // wholeWeight per word found as a token, partWeight per word found only in parts
	reps  int // occurrences of query words as tokens or token parts
	ms    int // span of the window's centre: the first occurrence of the longest whole-token
	me    int // word, else of the first token sharing a part with a query word, else [0,0)
}

// matcher scores items against one query, reusing its scratch space across items.
type matcher struct {
	q     []queryWord
	whole []int    // per word: whole-token occurrences
	part  []int    // per word: occurrences as a part of a longer token
	seen  [][]bool // per word, per part: the part is a term of the item
	first [][2]int // per word: span of its first whole-token occurrence
}

func newMatcher(q []queryWord) *matcher {
	m := &matcher{q: q, whole: make([]int, len(q)), part: make([]int, len(q)),
		seen: make([][]bool, len(q)), first: make([][2]int, len(q))}
	for i, w := range q {
		m.seen[i] = make([]bool, len(w.parts))
	}
	return m
}

// match scans text once and scores it.
func (m *matcher) match(text string) itemMatch {
	clear(m.whole)
	clear(m.part)
	for i := range m.seen {
		clear(m.seen[i])
	}
	ps, pe := -1, -1
	scanTokens(text, func(tok string, start, end int) {
		lt := strings.ToLower(tok)
		var tp []string
		partsDone := false
		for i, w := range m.q {
			if lt == w.full {
				if m.whole[i] == 0 {
					m.first[i] = [2]int{start, end}
				}
				m.whole[i]++
			}
			// a part of tok can only equal w.full or one of w's parts if lt contains it
			if !mayShare(lt, w) {
				continue
			}
			if !partsDone {
				tp, partsDone = subParts(tok), true
			}
			shared := false
			if lt != w.full && containsStr(tp, w.full) {
				if isPiece(lt, w.full) {
					// a piece of a call or a path (h.loadIndex, cmd/loadIndex.go): the word
					// itself, as good as a token of its own
					if m.whole[i] == 0 {
						m.first[i] = [2]int{start, end}
					}
					m.whole[i]++
				} else {
					m.part[i]++
				}
				shared = true
			}
			for j, p := range w.parts {
				if p == lt || containsStr(tp, p) {
					m.seen[i][j] = true
					shared = true
				}
			}
			if shared && ps < 0 {
				ps, pe = start, end
			}
		}
	})
	var r itemMatch
	centre := -1
	for i, w := range m.q {
		r.reps += m.whole[i] + m.part[i]
		switch {
		case m.whole[i] > 0:
			r.score += wholeWeight
			if centre < 0 || len(w.full) > len(m.q[centre].full) {
				centre = i
			}
		case m.part[i] > 0 || len(w.parts) > 0 && !slices.Contains(m.seen[i], false):
			r.score += partWeight
		}
	}
	switch {
	case centre >= 0:
		r.ms, r.me = m.first[centre][0], m.first[centre][1]
	case ps >= 0:
		r.ms, r.me = ps, pe
	}
	return r
}

// isPiece reports whether word is one of the connector-separated pieces of the lowercased token lt.
func isPiece(lt, word string) bool {
	for off := 0; ; {
		i := strings.Index(lt[off:], word)
		if i < 0 {
			return false
		}
		i += off
		end := i + len(word)
		if (i == 0 || isConnector(rune(lt[i-1]))) && (end == len(lt) || isConnector(rune(lt[end]))) {
			return true
		}
		off = i + 1
	}
}

// mayShare is a cheap filter: a token can only have w or one of w's parts among its own parts if
// it contains them as substrings.
func mayShare(lt string, w queryWord) bool {
	if strings.Contains(lt, w.full) {
		return true
	}
	for _, p := range w.parts {
		if strings.Contains(lt, p) {
			return true
		}
	}
	return false
}

// better is the order of excerpts: score, then repetitions; an equal item keeps the earlier.
func better(r, than itemMatch) bool {
	return r.score > than.score || r.score == than.score && r.reps > than.reps
}

// itemExcerpt is one item of a segment that a search returns.
type itemExcerpt struct {
	index int
	text  string
}

// segmentExcerpts returns up to n excerpts of one segment for q, each at most maxBytes, best
// first: the item that best matches q (see the rules above), then the items that match as many
// query words as it does, more repetitions first. Item granularity comes first: an item that fits
// is returned whole, so the model sees complete messages whenever it can; a longer one is cut
// around its focus. A conversation often states a thing twice: the command and the
// output that answers it, a value and the user's correction of it; shown side by side in their
// order (inConversationOrder), the later one reads as what it is. An item that matches no query
// word is never returned, so neither is a segment that only compactd's own writing matched
// (itemText).
func segmentExcerpts(q []queryWord, items []json.RawMessage, maxBytes, n int) []itemExcerpt {
	if len(items) == 0 || n <= 0 {
		return nil
	}
	m := newMatcher(contentWords(q))
	type scored struct {
		index int
		text  string
		m     itemMatch
	}
	all := make([]scored, 0, len(items))
	for i, it := range items {
		text := itemText(it)
		if r := m.match(text); r.score > 0 {
			all = append(all, scored{i, text, r})
		}
	}
	if len(all) == 0 {
		return nil
	}
	slices.SortStableFunc(all, func(a, b scored) int {
		switch {
		case better(a.m, b.m):
			return -1
		case better(b.m, a.m):
			return 1
		}
		return 0
	})
	chosen := all[:1]
	for _, c := range all[1:] {
		if len(chosen) == n || c.m.score < all[0].m.score {
			break
		}
		chosen = append(chosen, c)
	}
	out := make([]itemExcerpt, len(chosen))
	for k, c := range chosen {
		out[k] = itemExcerpt{c.index, cut(c.text, c.m.ms, c.m.me, maxBytes)}
	}
	return out
}

// inConversationOrder sorts excerpts of one segment by item index.
func inConversationOrder(ex []itemExcerpt) []itemExcerpt {
	slices.SortFunc(ex, func(a, b itemExcerpt) int { return a.index - b.index })
	return ex
}

func containsStr(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// cut returns text, or a window of it of at most maxBytes centred on [ms,me), cut on rune
// boundaries (and on whitespace when one is near), with an ellipsis on each cut side.
func cut(text string, ms, me, maxBytes int) string {
	if len(text) <= maxBytes {
		return text
	}
	if maxBytes <= 2*len(ellipsis)+4 { // too small for decorations
		end := maxBytes
		for end > 0 && !utf8.RuneStart(text[end]) {
			end--
		}
		return text[:end]
	}
	w := maxBytes - 2*len(ellipsis)
	mid := (ms + me) / 2
	start := max(0, min(mid-w/2, len(text)-w))
	end := start + w
	for start > 0 && start < len(text) && !utf8.RuneStart(text[start]) {
		start++
	}
	for end < len(text) && end > start && !utf8.RuneStart(text[end]) {
		end--
	}
	if start > 0 { // snap forward to just after whitespace, never past the match
		for i := start; i < min(start+snapSlack, ms, end); i++ {
			if isSpaceByte(text[i]) {
				start = i + 1
				break
			}
		}
	}
	if end < len(text) { // snap back to whitespace, never before the match end
		for i := end - 1; i >= max(end-snapSlack, me, start); i-- {
			if isSpaceByte(text[i]) {
				end = i
				break
			}
		}
	}
	var b strings.Builder
	b.Grow(end - start + 2*len(ellipsis))
	if start > 0 {
		b.WriteString(ellipsis)
	}
	b.WriteString(text[start:end])
	if end < len(text) {
		b.WriteString(ellipsis)
	}
	return b.String()
}

func isSpaceByte(c byte) bool { return c < utf8.RuneSelf && unicode.IsSpace(rune(c)) }
