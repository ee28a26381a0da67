package fakeupstream

import (
	"regexp"
	"strconv"
	"strings"
)

// SummaryPrefix starts every default summary, so a test can spot a summary wherever it travels
// (inside a sealed compaction item, behind the handoff prompt, in a later transcript).
const SummaryPrefix = "FAKE-SUMMARY: "

// entryMarker is the start of a transcript entry: a label in brackets at the start of a line, as
// compact.RenderEntry writes them: "[user] fix the build", "[tool call] shell(…)",
// "[tool output call_1] …".
var entryMarker = regexp.MustCompile(`(?m)^\[([A-Za-z_][A-Za-z0-9_ .\-]*)\][ \t]*`)

// DefaultSummary is the summariser's answer when Options.Summaries is nil:
//
//	FAKE-SUMMARY: 2 user entries
//	user: "first 80 characters of the first [user] entry"
//	user: "first 80 characters of the second"
//	Entries: 5.
//
// An entry is a line starting with "[role]" and runs to the next such line; Entries counts all
// of them, whatever the role. Quotes have newlines folded to spaces. The output deliberately holds
// no "[user]" marker, so a summary that is itself summarised later is not counted as an entry.
func DefaultSummary(transcript string) string {
	locs := entryMarker.FindAllStringSubmatchIndex(transcript, -1)
	var users []string
	for i, loc := range locs {
		end := len(transcript)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		if transcript[loc[2]:loc[3]] != "user" {
			continue
		}
		text := strings.TrimSpace(transcript[loc[1]:end])
		text = strings.Join(strings.Fields(firstRunes(text, 80)), " ")
		users = append(users, "user: "+strconv.Quote(text))
	}
	var b strings.Builder
	b.WriteString(SummaryPrefix)
	b.WriteString(strconv.Itoa(len(users)))
	if len(users) == 1 {
		b.WriteString(" user entry\n")
	} else {
		b.WriteString(" user entries\n")
	}
	for _, u := range users {
		b.WriteString(u)
		b.WriteByte('\n')
	}
	b.WriteString("Entries: ")
	b.WriteString(strconv.Itoa(len(locs)))
	b.WriteString(".")
	return b.String()
}
