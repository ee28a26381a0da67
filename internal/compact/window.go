package compact

import (
	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/tokenize"
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

// TruncateMiddle shortens s to about maxTokens tokens by keeping its head and tail and replacing
// the middle with a marker naming how many tokens were cut: tokenize.TruncateMiddle, counting
// with c's cache. s is returned unchanged when it already fits.
func TruncateMiddle(s string, maxTokens int, c *Counter) string {
	return tokenize.TruncateMiddle(s, maxTokens, c.Text)
}
