package summarizer

import (
	"strconv"
	"unicode/utf8"
)

// EstimateTokens is the default token counter: one token per four bytes, rounded up. It is the
// usual rule of thumb for English and code under BPE tokenizers; it undercounts dense
// non-English text and some code, which is why a call that still overflows the summariser's
// window is retried with smaller chunks (see Summarize) rather than failing.
func EstimateTokens(s string) int { return (len(s) + 3) / 4 }

// Chunk packs entries, in order, into chunks whose token count fits budget, counting the
// separator between entries. An entry that alone exceeds budget is middle-truncated to fit (see
// TruncateMiddle), after which it packs like any other. Empty input gives nil. A nil count means
// EstimateTokens; a budget below 1 is treated as 1.
func Chunk(entries []string, budget int, count func(string) int) [][]string {
	if count == nil {
		count = EstimateTokens
	}
	counts := make([]int, len(entries))
	for i, e := range entries {
		counts[i] = count(e)
	}
	return chunkCounted(entries, counts, budget, count)
}

// chunkCounted is Chunk with the entries' counts already known, so Summarize can size the
// whole transcript and pack it without counting every entry twice.
func chunkCounted(entries []string, counts []int, budget int, count func(string) int) [][]string {
	if len(entries) == 0 {
		return nil
	}
	if budget < 1 {
		budget = 1
	}
	sep := count(entrySeparator)
	var (
		chunks [][]string
		cur    []string
		used   int
	)
	for i, e := range entries {
		n := counts[i]
		if n > budget {
			e = TruncateMiddle(e, budget, count)
			n = count(e)
		}
		cost := n
		if len(cur) > 0 {
			cost += sep
			if used+cost > budget {
				chunks = append(chunks, cur)
				cur, used, cost = nil, 0, n
			}
		}
		cur = append(cur, e)
		used += cost
	}
	return append(chunks, cur)
}

// TruncateMiddle shortens s to at most budget tokens by cutting out its middle and putting a
// marker that says how much was elided in its place. The head and the tail are kept because
// both carry the information that matters in agent transcripts: the command or file name at the
// start of a tool output, the error or result at its end. s is returned unchanged if it fits;
// if not even the marker fits, the marker alone is returned. Cuts fall on rune boundaries.
func TruncateMiddle(s string, budget int, count func(string) int) string {
	if count == nil {
		count = EstimateTokens
	}
	total := count(s)
	if total <= budget {
		return s
	}
	// Start from the byte length the budget should hold at s's own bytes-per-token ratio, then
	// shrink in proportion to the overshoot: this needs one or two counts where a binary search
	// would need twenty, which matters when count is an exact BPE tokenizer.
	perToken := float64(len(s)) / float64(max(total, 1))
	keep := int(float64(budget-count(elisionMarker(len(s)))) * perToken)
	for range 8 {
		if keep <= 0 {
			break
		}
		t := cutMiddle(s, keep)
		n := count(t)
		if n <= budget {
			return t
		}
		keep = int(float64(keep) * float64(budget) / float64(n) * 0.97)
	}
	return cutMiddle(s, 0)
}

// cutMiddle keeps about keep bytes of s, half from the start and half from the end, with the
// elision marker between them.
func cutMiddle(s string, keep int) string {
	if keep < 0 {
		keep = 0
	}
	if keep > len(s) {
		keep = len(s)
	}
	headEnd := keep / 2
	for headEnd > 0 && !utf8.RuneStart(s[headEnd]) {
		headEnd--
	}
	tailStart := len(s) - (keep - keep/2)
	for tailStart < len(s) && !utf8.RuneStart(s[tailStart]) {
		tailStart++
	}
	if tailStart < headEnd {
		tailStart = headEnd
	}
	elided := utf8.RuneCountInString(s[headEnd:tailStart])
	return s[:headEnd] + elisionMarker(elided) + s[tailStart:]
}

// elisionMarker tells the summariser (and, through it, the agent) that content is missing, so
// the gap is not mistaken for the whole of the entry.
func elisionMarker(chars int) string {
	return "\n[… " + strconv.Itoa(chars) + " characters elided …]\n"
}
