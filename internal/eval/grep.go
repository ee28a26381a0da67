package eval

import (
	"encoding/json"
	"strings"

	"github.com/compactd/compactd/internal/fakeupstream"
)

// The grep column: the "grep over the raw log" baseline of the compaction literature ("Lost in
// Compaction"), the upper bound recall could reach. For each asked fact it is whether the fact's
// exact answer text occurs in what the model was given on the question turn (every request
// compactd sent the model while the question was answered, recall rounds included, as the tap
// recorded them) or in the raw history the client had sent compactd by then (every item of the
// session: what compactd archives). It is computed from those bytes, never from the planted
// facts: a value the session never carried, or carried only inside an opaque compaction item,
// does not count. Both are read as the fake model reads a request (fakeupstream.RequestText,
// fakeupstream.Text): strings only, ids, types and sealed payloads left out.

// rawLogText is the text of a client history (the items, messages or blocks it sent).
func rawLogText[T any](history []T) string {
	var b strings.Builder
	for _, h := range history {
		raw, err := json.Marshal(h)
		if err != nil {
			continue
		}
		b.WriteString(fakeupstream.Text(raw))
	}
	return b.String()
}

// grepFound reports whether answer occurs verbatim in the raw log or in the question turn's
// upstream requests (inContext: in the latter).
func grepFound(answer, rawLog string, turn [][]byte) (found, inContext bool) {
	if answer == "" {
		return false, false
	}
	var b strings.Builder
	for _, body := range turn {
		b.WriteString(fakeupstream.RequestText(body))
	}
	inContext = strings.Contains(b.String(), answer)
	return inContext || strings.Contains(rawLog, answer), inContext
}

// grepped fills a's Grep and InContext.
func (a Asked) grepped(rawLog string, turn [][]byte) Asked {
	a.Grep, a.InContext = grepFound(a.Fact.Answer, rawLog, turn)
	return a
}
