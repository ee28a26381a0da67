package session

import "github.com/compactd/compactd/internal/tokenize"

// CountTokens returns the o200k_base token count of s (internal/tokenize, the process's one
// tokenizer, which falls back to four bytes per token rather than fail a handover).
func CountTokens(s string) int { return tokenize.Count(s) }

// truncateMiddle keeps the head and tail of s within budget tokens, the marker included, and
// replaces the middle with a marker saying how much was cut (tokenize.TruncateMiddle). The head
// of a message states intent and the tail usually holds the question or the error, so the middle
// is the cheapest part to lose.
func truncateMiddle(s string, budget int) string {
	if budget <= 0 {
		return s
	}
	return tokenize.TruncateMiddle(s, budget, tokenize.Count)
}
