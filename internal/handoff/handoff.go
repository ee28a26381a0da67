// Package handoff turns a compaction summary back into context a model can continue from, and
// (in session*.go) turns agent session logs into resume prompts.
//
// The handoff text is a fixed prefix followed by the summary. The prefix is a constant and the
// rendering has no variable parts before the summary, so on every turn after a compaction the
// upstream sees the same bytes up to the summary and its prompt cache keeps hitting.
package handoff

import (
	"strings"

	"github.com/compactd/compactd/internal/api"
)

// Prefix is put in front of every summary compactd hands to an upstream model. Changing it
// invalidates every upstream prompt cache that holds a compacted conversation: do so deliberately.
const Prefix = "Another language model worked on this conversation before you, and its earlier part " +
	"was compacted to save context. Below is a summary of that earlier part: the goal, the progress " +
	"and decisions so far, the constraints, the open work, and the exact values needed to continue. " +
	"The user's most recent messages are kept verbatim above. Treat the summary as your own memory of " +
	"the work, avoid repeating what it says is done, and continue from where it leaves off.\n\n" +
	"<summary>\n"

// MessagesPrefix is Prefix for the Anthropic Messages API. There a compaction keeps nothing of
// the conversation before the summary verbatim (Anthropic's compaction semantics: system and
// tools live outside messages and stay), so Prefix's "kept verbatim above" would be false; what
// does follow the summary (the messages after the compaction, or those a speculative compaction
// kept behind it) is verbatim. Like Prefix it is a constant, so the handoff is byte-stable turn
// after turn; changing it invalidates the prompt caches of compacted Messages conversations.
const MessagesPrefix = "Another language model worked on this conversation before you, and its earlier part " +
	"was compacted to save context. Below is a summary of that earlier part: the goal, the progress " +
	"and decisions so far, the constraints, the open work, and the exact values needed to continue. " +
	"Nothing of the earlier part is kept verbatim: this summary stands for all of it. The messages " +
	"after this one, if any, are verbatim. Treat the summary as your own memory of the work, avoid " +
	"repeating what it says is done, and continue from where it leaves off.\n\n" +
	"<summary>\n"

// Suffix closes the summary block.
const Suffix = "\n</summary>"

// LedgerHeading introduces the facts ledger, when the payload carries one.
const LedgerHeading = "\n\n<facts>\nExact facts from the compacted part, kept verbatim:\n"

// Text renders the Responses handoff text for a summary and an optional facts ledger. It is
// deterministic.
func Text(summary, ledger string) string { return render(Prefix, summary, ledger) }

// MessagesText renders the Messages handoff text (MessagesPrefix). It is deterministic.
func MessagesText(summary, ledger string) string { return render(MessagesPrefix, summary, ledger) }

func render(prefix, summary, ledger string) string {
	n := len(prefix) + len(summary) + len(Suffix)
	if ledger != "" {
		n += len(LedgerHeading) + len(ledger) + len("\n</facts>")
	}
	b := make([]byte, 0, n)
	b = append(b, prefix...)
	b = append(b, summary...)
	b = append(b, Suffix...)
	if ledger != "" {
		b = append(b, LedgerHeading...)
		b = append(b, ledger...)
		b = append(b, "\n</facts>"...)
	}
	return string(b)
}

// ResponsesMessage renders the handoff as a Responses input message from the user, the form
// OpenAI's own compaction hands to the model.
func ResponsesMessage(summary, ledger string) []byte {
	return api.UserMessage(Text(summary, ledger))
}

// RecallHeader opens every result of compactd's recall tool (proxy/recall.go). A model that
// quotes a result puts it in the conversation, where the next compaction archives it; the
// archive recognises it by this header and never hands it back as history.
const RecallHeader = "Verbatim excerpts from this conversation's archived history"

// FactsHeading opens every facts ledger compactd renders (compact.Ledger), wherever it travels:
// inside a handoff, or inside the summary an agent's own compaction got from compactd.
const FactsHeading = "## Facts ledger"

// Original returns what of a conversation text is history rather than a reading of it: "" for a
// handoff (a summary behind Prefix or MessagesPrefix), for a summary that carries compactd's facts
// ledger (an agent's compaction that compactd answered, pasted back by the agent), and for the
// summary an agent carries into its conversation after its own compaction (agentSummaryPrefixes),
// and the text before the first quoted recall result otherwise. Recall searches and the facts
// ledger read only this: a summary or an excerpt is a model's reading of the history, not the
// history, and taking it for the history would quote compactd to itself.
func Original(text string) string {
	t := strings.TrimLeft(text, " \t\r\n")
	if strings.HasPrefix(t, commonPrefix) {
		return ""
	}
	for _, p := range agentSummaryPrefixes {
		if strings.HasPrefix(t, p) {
			return ""
		}
	}
	if hasLine(text, FactsHeading) {
		return ""
	}
	if i := strings.Index(text, RecallHeader); i >= 0 {
		return text[:i]
	}
	return text
}

// agentSummaryPrefixes open the summary an agent puts in front of its conversation after its own
// compaction, read from the agents themselves: Codex's SUMMARY_PREFIX (captured in
// internal/fixtures/codex-0.169/local_post_compaction_turn_request.json) and Claude Code's
// continuation message (its 2.1.332 binary).
var agentSummaryPrefixes = []string{
	"Another language model started to solve this problem and produced a summary of its thinking process.",
	"This session is being continued from a previous conversation that ran out of context.",
}

// commonPrefix is where Prefix and MessagesPrefix agree: enough to know a handoff.
var commonPrefix = Prefix[:commonLen(Prefix, MessagesPrefix)]

func commonLen(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// hasLine reports whether s holds line as a whole line.
func hasLine(s, line string) bool {
	for off := 0; ; {
		i := strings.Index(s[off:], line)
		if i < 0 {
			return false
		}
		i += off
		end := i + len(line)
		if (i == 0 || s[i-1] == '\n') && (end == len(s) || s[end] == '\n' || s[end] == '\r') {
			return true
		}
		off = i + 1
	}
}
