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
