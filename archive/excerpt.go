package archive

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ellipsis marks a cut; its bytes count against ExcerptBytes.
const ellipsis = "…"

// snapSlack is how far a cut may move to land on whitespace instead of mid-word.
const snapSlack = 24

// bestExcerpt picks the item holding the most query words (the first on a tie) and cuts an
// excerpt of at most maxBytes around the first match in it. Item granularity comes first: an item
// that fits is returned whole, so the model sees complete messages whenever it can.
func bestExcerpt(q []queryWord, items []json.RawMessage, maxBytes int) (int, string) {
	best, bestN, bestText := 0, -1, ""
	for i, it := range items {
		text := itemText(it)
		set := make(map[string]struct{}, 64)
		terms(text, set)
		n := countMatches(q, func(t string) bool { _, ok := set[t]; return ok })
		if n > bestN {
			best, bestN, bestText = i, n, text
		}
	}
	if bestN < 0 {
		return 0, ""
	}
	s, e := matchSpan(q, bestText)
	return best, cut(bestText, s, e, maxBytes)
}

// matchSpan is the byte span of the first token equal to a query word, else of the first token
// sharing a part with one, else [0,0).
func matchSpan(q []queryWord, text string) (int, int) {
	fs, fe, ps, pe := -1, -1, -1, -1
	scanTokens(text, func(tok string, start, end int) {
		if fs >= 0 {
			return
		}
		lt := strings.ToLower(tok)
		for _, w := range q {
			if w.full == lt {
				fs, fe = start, end
				return
			}
		}
		if ps >= 0 {
			return
		}
		tp := subParts(tok)
		for _, w := range q {
			for _, p := range w.parts {
				if p == lt || containsStr(tp, p) {
					ps, pe = start, end
					return
				}
			}
			if containsStr(tp, w.full) {
				ps, pe = start, end
				return
			}
		}
	})
	switch {
	case fs >= 0:
		return fs, fe
	case ps >= 0:
		return ps, pe
	}
	return 0, 0
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
