package handoff

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestTextIsDeterministicAndPrefixed(t *testing.T) {
	tests := []struct{ summary, ledger string }{
		{"did X", ""},
		{"did <b>Y</b> & \"z\"", "- path: src/a.go"},
		{"", ""},
	}
	for _, tt := range tests {
		a, b := Text(tt.summary, tt.ledger), Text(tt.summary, tt.ledger)
		if a != b {
			t.Fatalf("Text not deterministic")
		}
		if !strings.HasPrefix(a, Prefix+tt.summary+Suffix) {
			t.Errorf("Text(%q) = %q", tt.summary, a)
		}
		if (tt.ledger != "") != strings.Contains(a, tt.ledger+"\n</facts>") {
			t.Errorf("ledger rendering wrong: %q", a)
		}
		var m struct {
			Role    string
			Content []struct{ Text string }
		}
		if err := json.Unmarshal(ResponsesMessage(tt.summary, tt.ledger), &m); err != nil || m.Role != "user" || m.Content[0].Text != a {
			t.Errorf("ResponsesMessage wrong: %v %+v", err, m)
		}
	}
}

// Each dialect's handoff says what its compaction kept: Responses keeps the newest user messages
// verbatim before the summary, Messages keeps nothing before it. Both are pure functions of the
// payload, so the handoff is byte-stable turn after turn.
func TestHandoffTextPerDialect(t *testing.T) {
	for _, tt := range []struct {
		name   string
		render func(summary, ledger string) string
		prefix string
		above  bool // claims messages were kept verbatim above
	}{
		{"responses", Text, Prefix, true},
		{"messages", MessagesText, MessagesPrefix, false},
	} {
		a, b := tt.render("did X", "- path: a.go"), tt.render("did X", "- path: a.go")
		if a != b || !strings.HasPrefix(a, tt.prefix+"did X"+Suffix+LedgerHeading) {
			t.Errorf("%s: handoff = %q", tt.name, a)
		}
		if strings.Contains(a, "kept verbatim above") != tt.above {
			t.Errorf("%s: says recent messages are kept verbatim above = %v, want %v", tt.name, !tt.above, tt.above)
		}
	}
}

// Original keeps history and drops readings of it: compactd's handoffs, summaries holding its
// ledger, agents' own continuation summaries, and a quoted recall result (the words before it
// stay).
func TestOriginal(t *testing.T) {
	cases := []struct {
		name, text, want string
	}{
		{"plain history", "rg found internal/x.go:12", "rg found internal/x.go:12"},
		{"Responses handoff", Text("the work so far", ""), ""},
		{"Messages handoff, leading space", "\n  " + MessagesText("the work so far", ""), ""},
		{"a summary holding compactd's ledger", "Summary:\n<summary>\nwork\n" + FactsHeading + "\n### Values\n- `a: 1`\n</summary>", ""},
		{"the heading inside a line is not a ledger", "see the " + FactsHeading + " section", "see the " + FactsHeading + " section"},
		{"Codex's continuation summary", "Another language model started to solve this problem and produced a summary of its thinking process. You also have access to the state of the tools…\nwe fixed the parser", ""},
		{"Claude Code's continuation summary", "This session is being continued from a previous conversation that ran out of context. The summary below covers the earlier portion of the conversation.\n\nSummary:\n1. Primary Request", ""},
		{"a quoted recall result", "The answer is 42. " + RecallHeader + " matching \"x\":\n[1] …", "The answer is 42. "},
		{"a user who merely mentions the agents", "Claude said: this session is being continued", "Claude said: this session is being continued"},
	}
	for _, tc := range cases {
		if got := Original(tc.text); got != tc.want {
			t.Errorf("%s: Original = %q, want %q", tc.name, got, tc.want)
		}
	}
}
