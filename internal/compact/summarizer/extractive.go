package summarizer

import (
	"slices"
	"strconv"
	"strings"
)

// ExtractiveHeading opens every Extractive summary. It tells the model, in the second person
// the summariser's prompt also uses, that what follows is a verbatim fallback and not a
// summary, so it does not take the absence of tool output and decisions as "nothing happened".
const ExtractiveHeading = "## Extractive fallback (summariser unavailable)\n\n" +
	"The summariser was unavailable when this part of the conversation was compacted, so this is not a written summary: " +
	"it is the user's messages from that part, oldest first and copied verbatim (long ones shortened in the middle, the oldest left out if there were too many), " +
	"followed by your last message. Tool calls, tool output and your reasoning from that part are not included: " +
	"re-read files and re-run commands you need instead of relying on memory."

const (
	extractiveUsers     = "\n\n### User messages\n\n"
	extractiveAssistant = "\n\n### Your last message\n\n"
	extractiveSep       = "\n\n"
	// minExtractiveEntry is the least a kept message is shortened to: enough for the label,
	// the omission marker and a few words either side.
	minExtractiveEntry = 96
)

// Extractive builds the deterministic fallback summary of the `extractive` failure policy from
// rendered transcript entries ("[user] …", "[assistant] …", as compact.RenderEntry writes them):
// ExtractiveHeading, then every [user] entry, oldest first, then the last [assistant] entry.
// Everything else (tool calls and output, reasoning) is left out: without a model there is no
// way to tell which of it matters, and the user's own words are the best record of the task.
//
// The result is at most maxBytes long (maxBytes ≤ 0: no limit), but never shorter than
// ExtractiveHeading. When everything does not fit, the last assistant message gets at most
// a quarter of the budget, then user messages are kept whole newest first — the latest request
// is the one the agent is working on — while the older ones share what is left, each
// middle-truncated to a common per-message budget (short messages stay whole, so a pasted log
// cannot crowd out the requests around it). If even that does not fit, the oldest are dropped
// with a note saying how many. The output depends only on the arguments.
func Extractive(entries []string, maxBytes int) string {
	var users []string
	var asst string
	for _, e := range entries {
		e = strings.TrimSpace(e)
		switch {
		case hasLabel(e, "[user]"):
			users = append(users, e)
		case hasLabel(e, "[assistant]"):
			asst = e
		}
	}
	hasAsst := asst != ""
	// Measured before rendering: a transcript with pasted logs can be far over the budget.
	full := extractiveOverhead(len(users), 0, hasAsst) + len(asst)
	for _, u := range users {
		full += len(u)
	}
	if maxBytes <= 0 || full <= maxBytes {
		return renderExtractive(users, 0, asst, hasAsst)
	}

	// The assistant's message gets at most a quarter of what the sections leave, and none if
	// that quarter could not hold a useful excerpt.
	aLen := 0
	if hasAsst {
		aLen = min(len(asst), (maxBytes-extractiveOverhead(0, 0, true))/4)
		if aLen < min(len(asst), minExtractiveEntry) {
			hasAsst, aLen = false, 0
		}
	}
	floors := make([]int, len(users)+1) // floors[i]: sum of the least each of users[i:] can take
	for i := len(users) - 1; i >= 0; i-- {
		floors[i] = floors[i+1] + min(len(users[i]), minExtractiveEntry)
	}
	for drop := 0; drop <= len(users); drop++ {
		kept := users[drop:]
		budget := maxBytes - extractiveOverhead(len(kept), drop, hasAsst) - aLen
		if budget < floors[drop] {
			continue
		}
		return renderExtractive(fitMessages(kept, budget), drop, truncateMiddle(asst, aLen), hasAsst)
	}
	return ExtractiveHeading
}

// hasLabel reports whether an entry starts with the given "[role]" label.
func hasLabel(e, label string) bool {
	rest, ok := strings.CutPrefix(e, label)
	return ok && (rest == "" || rest[0] == ' ' || rest[0] == '\n')
}

// renderExtractive lays the parts out; with empty strings it measures the fixed overhead.
func renderExtractive(users []string, omitted int, asst string, hasAsst bool) string {
	var b strings.Builder
	size := extractiveOverhead(len(users), omitted, hasAsst) + len(asst)
	for _, u := range users {
		size += len(u)
	}
	b.Grow(size)
	b.WriteString(ExtractiveHeading)
	if len(users) > 0 || omitted > 0 {
		b.WriteString(extractiveUsers)
		if omitted > 0 {
			b.WriteString(omittedNote(omitted))
			if len(users) > 0 {
				b.WriteString(extractiveSep)
			}
		}
		for i, u := range users {
			if i > 0 {
				b.WriteString(extractiveSep)
			}
			b.WriteString(u)
		}
	}
	if hasAsst {
		b.WriteString(extractiveAssistant)
		b.WriteString(asst)
	}
	return b.String()
}

func omittedNote(n int) string {
	if n == 1 {
		return "[1 earlier user message omitted]"
	}
	return "[" + strconv.Itoa(n) + " earlier user messages omitted]"
}

// extractiveOverhead is the length of everything renderExtractive writes besides the messages.
func extractiveOverhead(users, omitted int, hasAsst bool) int {
	n := len(ExtractiveHeading)
	if users > 0 || omitted > 0 {
		n += len(extractiveUsers)
	}
	if users > 1 {
		n += (users - 1) * len(extractiveSep)
	}
	if omitted > 0 {
		n += len(omittedNote(omitted))
		if users > 0 {
			n += len(extractiveSep)
		}
	}
	if hasAsst {
		n += len(extractiveAssistant)
	}
	return n
}

// fitMessages fits msgs into budget bytes (which covers at least each one's floor): newest kept
// whole while the older ones can still get their floor, then the older ones middle-truncated to
// the largest common length that fits.
func fitMessages(msgs []string, budget int) []string {
	out := slices.Clone(msgs)
	floor := 0 // floor of msgs[:i]
	for _, m := range msgs {
		floor += min(len(m), minExtractiveEntry)
	}
	i := len(msgs)
	for i > 0 {
		m := msgs[i-1]
		floor -= min(len(m), minExtractiveEntry)
		if len(m)+floor > budget {
			floor += min(len(m), minExtractiveEntry)
			break
		}
		budget -= len(m)
		i--
	}
	older := msgs[:i]
	// Binary search the largest per-message length p with sum(min(len, p)) <= budget.
	lo, hi := minExtractiveEntry, 0
	for _, m := range older {
		hi = max(hi, len(m))
	}
	for lo < hi {
		p := (lo + hi + 1) / 2
		total := 0
		for _, m := range older {
			total += min(len(m), p)
		}
		if total <= budget {
			lo = p
		} else {
			hi = p - 1
		}
	}
	for j, m := range older {
		out[j] = truncateMiddle(m, lo)
	}
	return out
}

// truncateMiddle shortens s to at most n bytes with chunk.go's TruncateMiddle, counting bytes
// instead of tokens. n is always at least minExtractiveEntry, which holds the marker.
func truncateMiddle(s string, n int) string {
	return TruncateMiddle(s, n, byteLen)
}

func byteLen(s string) int { return len(s) }
