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
