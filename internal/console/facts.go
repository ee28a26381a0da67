package console

import (
	"encoding/json"
	"strings"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
)

// The facts check: the hard facts compactd's ledger extractor finds in what a compaction
// replaced (decisions, errors, commands, files, signatures, values), each marked with where
// the model can still find it — the summary kept it, the facts ledger carries it, or neither
// (the ledger's budget left it out: lost).

type fact struct {
	Category, Text string
	Found          string
}

const (
	foundSummary = "summary"
	foundLedger  = "ledger"
	foundLost    = "lost"
	// maxFacts bounds the facts shown; maxFactInput bounds the replaced bytes scanned.
	maxFacts     = 200
	maxFactInput = 8 << 20
)

func factsCheck(raw []json.RawMessage, summary, ledger string) []fact {
	items := make([]api.Item, 0, len(raw))
	idx := make([]int, 0, len(raw))
	n := 0
	for _, r := range raw {
		if n += len(r); n > maxFactInput {
			break
		}
		idx = append(idx, len(items))
		items = append(items, api.Item{Raw: r})
	}
	// Every fact, the summary's included: none is left out as already summarised.
	all := compact.Ledger(items, idx, 1<<20)
	sum, led := normFact(summary), strings.ToLower(ledger)
	var out []fact
	cat := ""
	for _, l := range strings.Split(all, "\n") {
		switch {
		case strings.HasPrefix(l, "### "):
			cat = strings.TrimPrefix(l, "### ")
		case strings.HasPrefix(l, "- ") && cat != "":
			text := strings.TrimPrefix(l, "- ")
			f := fact{Category: cat, Text: text, Found: foundLost}
			switch {
			case strings.Contains(sum, normFact(text)):
				f.Found = foundSummary
			case strings.Contains(led, strings.ToLower(text)):
				f.Found = foundLedger
			}
			out = append(out, f)
			if len(out) == maxFacts {
				return out
			}
		}
	}
	return out
}

// normFact lowercases, drops Markdown code marks and collapses whitespace.
func normFact(s string) string {
	return strings.Join(strings.Fields(strings.ToLower(strings.ReplaceAll(s, "`", ""))), " ")
}

// splitGap separates a ledger's gap-check findings from the rest.
func splitGap(ledger string) (rest, gap string) {
	head := "### " + compact.GapCheckTitle + "\n"
	i := strings.Index(ledger, head)
	if i < 0 {
		return ledger, ""
	}
	body := ledger[i+len(head):]
	j := strings.Index(body, "\n### ")
	if j < 0 {
		return strings.TrimRight(ledger[:i], "\n"), strings.TrimSpace(body)
	}
	return strings.TrimRight(ledger[:i], "\n") + "\n" + body[j+1:], strings.TrimSpace(body[:j])
}

// renderItem is one archived item as text: compactd's own rendering of items for the
// summariser (role, tool calls and outputs), or the raw JSON when it has none.
func renderItem(raw json.RawMessage) string {
	if s := compact.RenderEntry(api.Item{Raw: raw}); strings.TrimSpace(s) != "" {
		return s
	}
	return string(raw)
}
