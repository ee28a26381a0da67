// Package api holds the wire-level knowledge of the two APIs compactd serves: how to skim a
// request body for the parts that matter (item boundaries and types, compaction items, triggers,
// context_management) without decoding message contents, how to splice a rewritten input back in
// as raw JSON, and the error envelopes of each dialect.
package api

import (
	"strings"

	"github.com/tidwall/gjson"
)

// Item is one element of a Responses `input` array, kept as the exact bytes the client sent so
// that fields compactd does not know survive untouched and upstream prompt caches keep hitting.
type Item struct {
	// Raw is the item's JSON exactly as received.
	Raw []byte
	// Type is the item's "type"; a bare {"role":…,"content":…} easy message has Type "message".
	Type string
	// Role is the message role ("user", "assistant", "system", "developer") or "" for non-messages.
	Role string
	// Handoff marks the user message compactd rendered from a compaction summary. It is history
	// to be summarised again at the next compaction, never a user message to retain verbatim.
	Handoff bool
	// InMessage marks an item MessageItems rendered from a block of a Messages message: it is
	// conversation whatever its type (compact.IsContext), since in that API everything outside
	// system and tools is.
	InMessage bool
}

// IsInstruction reports whether the item is a system or developer message: client instructions
// that are re-sent every turn rather than conversation history.
func (it Item) IsInstruction() bool {
	return it.Type == "message" && (it.Role == "system" || it.Role == "developer")
}

// IsUserMessage reports whether the item is a message from the user.
func (it Item) IsUserMessage() bool { return it.Type == "message" && it.Role == "user" && !it.Handoff }

// MessageText is the concatenated text of a message item's content (a string, or the text of
// each part).
func MessageText(raw []byte) string {
	c := gjson.GetBytes(raw, "content")
	if c.Type == gjson.String {
		return c.Str
	}
	var b strings.Builder
	c.ForEach(func(_, part gjson.Result) bool {
		if t := part.Get("text"); t.Exists() {
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(t.Str)
		}
		return true
	})
	return b.String()
}
