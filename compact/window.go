package compact

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/compactd/compactd/api"
)

// DefaultRetainBudget is how many tokens of the newest user messages OpenAI keeps verbatim after
// a compaction (inferred from Codex, which mirrors that default).
const DefaultRetainBudget = 64_000

// Window says what a compaction does with each item of the input.
type Window struct {
	// Instructions are the indexes of system/developer messages: re-sent by the client every
	// turn, kept verbatim and never summarised.
	Instructions []int
	// Retained are the indexes of the newest user messages kept verbatim, in original order.
	Retained []int
	// Summarise are the indexes of every conversation item (all but Instructions), in order.
	// Retained user messages are summarised too: the summariser needs them for context.
	Summarise []int
	// Truncated is the index of a retained user message that must be middle-truncated to
	// the retain budget (TruncateMiddle), or -1.
	Truncated int
}

// Partition splits items into a compaction window. It walks user messages from the newest
// backwards, keeping each whole while the running total of count fits retainBudget, and stops at
// the first that does not fit; if even the newest does not fit it is kept anyway, marked
// Truncated. A retainBudget <= 0 retains nothing. The result depends only on items, retainBudget
// and count, so the proxy can recompute the same window on a later turn.
func Partition(items []api.Item, retainBudget int, count func(api.Item) int) Window {
	w := Window{Truncated: -1}
	for i, it := range items {
		if it.IsInstruction() {
			w.Instructions = append(w.Instructions, i)
		} else {
			w.Summarise = append(w.Summarise, i)
		}
	}
	if retainBudget <= 0 {
		return w
	}
	used := 0
	var newestFirst []int
	for i := len(items) - 1; i >= 0; i-- {
		if !items[i].IsUserMessage() {
			continue
		}
		n := count(items[i])
		if used+n > retainBudget {
			if len(newestFirst) == 0 {
				newestFirst = append(newestFirst, i)
				w.Truncated = i
			}
			break
		}
		used += n
		newestFirst = append(newestFirst, i)
	}
	for j := len(newestFirst) - 1; j >= 0; j-- {
		w.Retained = append(w.Retained, newestFirst[j])
	}
	return w
}

// elisionMarker marks the cut made by TruncateMiddle; it is fixed text so the model learns to
// read it and the truncated message stays byte-stable turn after turn.
func elisionMarker(n int) string { return "\n…[" + strconv.Itoa(n) + " tokens elided]…\n" }

// TruncateMiddle shortens s to about maxTokens tokens by keeping its head and tail and replacing
// the middle with a marker naming how many tokens were cut. The beginning of a message usually
// states the task and the end the latest ask, so both matter more than the middle. Cuts fall on
// token boundaries moved to UTF-8 boundaries; re-tokenising the joined text can differ from the
// budget by a token or two at the seams. If maxTokens cannot hold even the marker, the result is
// the marker alone. s is returned unchanged when it already fits.
func TruncateMiddle(s string, maxTokens int, c *Counter) string {
	if c.Text(s) <= maxTokens {
		return s
	}
	_, toks, err := o200k().Encode(s)
	if err != nil || len(toks) <= maxTokens {
		return s
	}
	// the marker's digits depend on the cut, which depends on the marker: size it for the
	// largest possible cut, which never has fewer digits than the real one
	markerTokens := c.Text(elisionMarker(len(toks)))
	keep := maxTokens - markerTokens
	if keep <= 0 {
		return elisionMarker(len(toks))
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
	b.WriteString(elisionMarker(len(toks) - headN - tailN))
	b.WriteString(s[tailStart:])
	return b.String()
}
