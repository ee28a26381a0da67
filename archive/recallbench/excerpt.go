package recallbench

import (
	"context"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/archive"
)

// Excerpt strategies for the recall step.
const (
	// ExcerptArchive uses the excerpt archive.Search cuts: the item with the most query words
	// (a word also matches through all of its camelCase/path parts), cut around the first match.
	ExcerptArchive = "archive"
	// ExcerptFocused re-cuts each hit from the decrypted segment: items are ranked by query words
	// matched as whole tokens (worth twice a parts-only match; ties to the item repeating them
	// most), stop words ("why", "of", "the") dropped, and the window is centred on the
	// longest whole-token match, which in a coding session is the identifier or key the question
	// is about rather than a common word such as "return" or "type".
	ExcerptFocused = "focused"
)

// focusedExcerpt re-cuts a hit as ExcerptFocused describes.
func focusedExcerpt(ctx context.Context, store archive.Store, h archive.Hit, query string, maxBytes int) (string, error) {
	seg, err := store.Get(ctx, archive.DefaultTenant, h.SegmentID)
	if err != nil {
		return "", err
	}
	words := queryWords(query)
	best, bestScore, bestTF, bestText := -1, 0, 0, ""
	for i, raw := range seg.Items {
		text := itemText(raw)
		low := strings.ToLower(text)
		toks := tokenSet(low)
		score, tf := 0, 0
		for _, w := range words {
			switch {
			case toks[w]:
				score += 2
				tf += strings.Count(low, w)
			case strings.Contains(low, w):
				score++
			}
		}
		// ties go to the item that mentions the words most often: the output that lists an
		// identifier beats the command that merely names it
		if score > bestScore || score == bestScore && score > 0 && tf > bestTF {
			best, bestScore, bestTF, bestText = i, score, tf, text
		}
	}
	if best < 0 {
		return h.Excerpt, nil
	}
	// centre on the longest query word found as a whole token
	low := strings.ToLower(bestText)
	centre, centreLen := -1, 0
	for _, w := range words {
		if len(w) <= centreLen {
			continue
		}
		if p := tokenIndex(low, w); p >= 0 {
			centre, centreLen = p+len(w)/2, len(w)
		}
	}
	if centre < 0 {
		centre = 0
	}
	return window(bestText, centre, maxBytes), nil
}

// stopWords are the function words of a question; they match everywhere and say nothing.
var stopWords = map[string]bool{"a": true, "an": true, "the": true, "of": true, "in": true, "on": true, "to": true,
	"is": true, "was": true, "for": true, "with": true, "and": true, "or": true, "why": true, "what": true,
	"how": true, "which": true, "where": true, "when": true, "does": true, "did": true, "it": true}

func isTokRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '.' || r == '/' || r == '-' || r == ':'
}

func queryWords(q string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(strings.ToLower(q), func(r rune) bool { return !isTokRune(r) }) {
		f = strings.Trim(f, "._/-:")
		if f != "" && !stopWords[f] {
			out = append(out, f)
		}
	}
	return out
}

func tokenSet(low string) map[string]bool {
	set := map[string]bool{}
	for _, f := range strings.FieldsFunc(low, func(r rune) bool { return !isTokRune(r) }) {
		set[strings.Trim(f, "._/-:")] = true
	}
	return set
}

// tokenIndex is the byte offset of w in low as a whole token, or -1.
func tokenIndex(low, w string) int {
	for off := 0; ; {
		p := strings.Index(low[off:], w)
		if p < 0 {
			return -1
		}
		p += off
		before, _ := utf8.DecodeLastRuneInString(low[:p])
		after, _ := utf8.DecodeRuneInString(low[p+len(w):])
		if (p == 0 || !unicode.IsLetter(before) && !unicode.IsDigit(before) && before != '_') &&
			(p+len(w) == len(low) || !unicode.IsLetter(after) && !unicode.IsDigit(after) && after != '_') {
			return p
		}
		off = p + len(w)
	}
}

// window cuts at most maxBytes of text centred on byte centre, on rune boundaries.
func window(text string, centre, maxBytes int) string {
	if len(text) <= maxBytes {
		return text
	}
	start := max(0, min(centre-maxBytes/2, len(text)-maxBytes))
	end := start + maxBytes
	for start < end && !utf8.RuneStart(text[start]) {
		start++
	}
	for end > start && end < len(text) && !utf8.RuneStart(text[end]) {
		end--
	}
	return text[start:end]
}

// itemText is the searchable text of a raw item: its string and number values, one per line,
// without the structural fields (type, id, call_id, status) and ciphertext.
func itemText(raw []byte) string {
	var b strings.Builder
	var walk func(v gjson.Result)
	walk = func(v gjson.Result) {
		switch {
		case v.Type == gjson.String || v.Type == gjson.Number:
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(v.String())
		case v.IsArray():
			v.ForEach(func(_, e gjson.Result) bool { walk(e); return true })
		case v.IsObject():
			v.ForEach(func(k, e gjson.Result) bool {
				switch k.Str {
				case "type", "id", "call_id", "status", "encrypted_content":
				default:
					walk(e)
				}
				return true
			})
		}
	}
	walk(gjson.ParseBytes(raw))
	return b.String()
}
