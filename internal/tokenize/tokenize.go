// Package tokenize is compactd's one tokenizer: o200k_base, the encoding of the models compactd
// serves (tiktoken-go's algorithm over an embedded pointer-free vocabulary, codec.go), built once
// per process and shared by every package that counts or cuts
// text by tokens (compact's Counter, handoff's resume prompts), and the one middle-truncation
// helper built on it.
package tokenize

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Count returns the o200k_base token count of s. The codec fails only when its regexp times out
// on pathological input; then Count falls back to four bytes per token, rather than fail whatever
// asked over a count. Callers that have a better estimate use Codec().Count themselves.
func Count(s string) int {
	n, err := Codec().Count(s)
	if err != nil {
		return (len(s) + 3) / 4
	}
	return n
}

// Marker is the text TruncateMiddle puts in place of the n tokens it cut. It is fixed text, so a
// model learns to read it and a truncated message stays byte-stable turn after turn (which keeps
// the upstream's prompt cache warm).
func Marker(n int) string { return "\n…[" + strconv.Itoa(n) + " tokens elided]…\n" }

// TruncateMiddle shortens s to about maxTokens tokens by keeping its head and tail and replacing
// the middle with Marker. The beginning of a message usually states the task and the end the
// latest ask or the error, so both matter more than the middle. The marker counts against the
// budget. Cuts fall on token boundaries moved to UTF-8 boundaries; re-tokenising the joined text
// can differ from the budget by a token or two at the seams. If maxTokens cannot hold even the
// marker, the result is the marker alone. s is returned unchanged when it already fits.
//
// count counts text (nil: Count); pass a cached counter's method to skip re-counting text seen
// before. The cut itself always uses Codec's tokens.
func TruncateMiddle(s string, maxTokens int, count func(string) int) string {
	if count == nil {
		count = Count
	}
	if len(s) <= maxTokens || count(s) <= maxTokens { // a token is at least one byte
		return s
	}
	_, toks, err := Codec().Encode(s)
	if err != nil || len(toks) <= maxTokens {
		return s
	}
	// The marker's digits depend on the cut, which depends on the marker: size it for the
	// largest possible cut, which never has fewer digits than the real one.
	keep := maxTokens - count(Marker(len(toks)))
	if keep <= 0 {
		return Marker(len(toks))
	}
	headN := (keep + 1) / 2
	tailN := keep - headN
	headEnd := 0
	for _, t := range toks[:headN] {
		headEnd += len(t)
	}
	tailStart := len(s)
	for _, t := range toks[len(toks)-tailN:] {
		tailStart -= len(t)
	}
	for headEnd > 0 && !utf8.RuneStart(s[headEnd]) {
		headEnd--
	}
	for tailStart < len(s) && !utf8.RuneStart(s[tailStart]) {
		tailStart++
	}
	var b strings.Builder
	b.Grow(headEnd + len(s) - tailStart + 32)
	b.WriteString(s[:headEnd])
	b.WriteString(Marker(len(toks) - headN - tailN))
	b.WriteString(s[tailStart:])
	return b.String()
}

// Bound is TruncateMiddle for text that may be far larger than the budget (a multi-megabyte
// command output): past 16 bytes per budget token it first keeps only the first and last 8 bytes
// per token (on rune boundaries), so the bulk is not tokenised only to be thrown away. The
// marker then counts only the tokens cut from what was kept: a lower bound.
func Bound(s string, maxTokens int) string {
	if maxTokens > 0 && len(s) > 16*maxTokens {
		n := 8 * maxTokens
		headEnd, tailStart := n, len(s)-n
		for headEnd > 0 && !utf8.RuneStart(s[headEnd]) {
			headEnd--
		}
		for tailStart < len(s) && !utf8.RuneStart(s[tailStart]) {
			tailStart++
		}
		s = s[:headEnd] + "\n" + s[tailStart:]
	}
	return TruncateMiddle(s, maxTokens, nil)
}

// CutMiddle is middle truncation for any counter (an estimate, bytes, a tokenizer): it shortens
// s to at most budget units of count by keeping its head and tail and putting marker(n) in place
// of the n runes it cut. s is returned unchanged if it fits; if not even the marker fits, the
// marker alone is returned. Cuts fall on rune boundaries. TruncateMiddle is the o200k_base
// special case, which cuts on token boundaries in one pass.
func CutMiddle(s string, budget int, count func(string) int, marker func(runes int) string) string {
	total := count(s)
	if total <= budget {
		return s
	}
	// Start from the byte length the budget should hold at s's own bytes-per-token ratio, then
	// shrink in proportion to the overshoot: this needs one or two counts where a binary search
	// would need twenty, which matters when count is an exact BPE tokenizer.
	perToken := float64(len(s)) / float64(max(total, 1))
	keep := int(float64(budget-count(marker(len(s)))) * perToken)
	for range 8 {
		if keep <= 0 {
			break
		}
		t := cutMiddle(s, keep, marker)
		n := count(t)
		if n <= budget {
			return t
		}
		keep = int(float64(keep) * float64(budget) / float64(n) * 0.97)
	}
	return cutMiddle(s, 0, marker)
}

// cutMiddle keeps about keep bytes of s, half from the start and half from the end, with the
// elision marker between them.
func cutMiddle(s string, keep int, marker func(runes int) string) string {
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
	return s[:headEnd] + marker(elided) + s[tailStart:]
}
