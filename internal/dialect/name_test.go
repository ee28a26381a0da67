package dialect

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Name
		ok   bool
	}{
		{"responses", Responses, true},
		{"messages", Messages, true},
		{"chat", Chat, true},
		{" chat ", Chat, true},
		{"", "", false},
		{"openai", "", false},    // a provider, not a dialect
		{"anthropic", "", false}, // a provider, not a dialect
		{"Responses", "", false}, // case matters: the name is printed as it is parsed
		{"response", "", false},
		{"responses,messages", "", false},
	} {
		got, err := Parse(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("Parse(%q) = %q, %v; want %q, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "want responses, messages or chat") {
			t.Errorf("Parse(%q) error %q does not list the names it accepts", tt.in, err)
		}
	}
}

func TestAll(t *testing.T) {
	seen := map[Name]bool{}
	for _, n := range All {
		if !n.Valid() {
			t.Errorf("%q in All is not Valid", n)
		}
		if seen[n] {
			t.Errorf("%q twice in All", n)
		}
		seen[n] = true
		if got, err := Parse(string(n)); err != nil || got != n {
			t.Errorf("Parse(%q) = %q, %v: All and Parse disagree", n, got, err)
		}
	}
	if len(All) != 3 {
		t.Errorf("All = %q, want the three dialects", All)
	}
	// The spellings are wire and storage contracts: the memo seeds its hash chain and keys its
	// stored records with them, and dashboards and alerts select on them.
	for n, want := range map[Name]string{Responses: "responses", Messages: "messages", Chat: "chat"} {
		if string(n) != want {
			t.Errorf("%q: the spelling %q must not change", n, want)
		}
	}
	if Name("").Valid() || Name("openai").Valid() {
		t.Error("\"\" or \"openai\" is Valid")
	}
}
