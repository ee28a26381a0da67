package summarizer

import (
	"strconv"

	"github.com/compactd/compactd/internal/tokenize"
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

// TruncateMiddle shortens s to at most budget tokens (as count counts them; nil: EstimateTokens)
// by cutting out its middle and putting a marker that says how much was elided in its place:
// tokenize.CutMiddle. The head and the tail are kept because both carry the information that
// matters in agent transcripts: the command or file name at the start of a tool output, the
// error or result at its end.
func TruncateMiddle(s string, budget int, count func(string) int) string {
	if count == nil {
		count = EstimateTokens
	}
	return tokenize.CutMiddle(s, budget, count, elisionMarker)
}

// elisionMarker tells the summariser (and, through it, the agent) that content is missing, so
// the gap is not mistaken for the whole of the entry.
func elisionMarker(chars int) string {
	return "\n[… " + strconv.Itoa(chars) + " characters elided …]\n"
}
