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

// Excerpt choice. The search ranks segments; within the winning segment, bestExcerpt decides which
// item the model sees and where the window sits. Recall questions in a coding session name one
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
				m.part[i]++
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

// bestExcerpt picks the item that best matches q (see the rules above) and cuts an excerpt of at
// most maxBytes around its focus. Item granularity comes first: an item that fits is returned
// whole, so the model sees complete messages whenever it can.
func bestExcerpt(q []queryWord, items []json.RawMessage, maxBytes int) (int, string) {
	if len(items) == 0 {
		return 0, ""
	}
	m := newMatcher(contentWords(q))
	best, bestText := 0, ""
	bestM := itemMatch{score: -1}
	for i, it := range items {
		text := itemText(it)
		r := m.match(text)
		if r.score > bestM.score || r.score == bestM.score && r.reps > bestM.reps {
			best, bestM, bestText = i, r, text
		}
	}
	return best, cut(bestText, bestM.ms, bestM.me, maxBytes)
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
