package summarizer

import (
	"strings"
	"testing"
)

func TestDefaultPrompt(t *testing.T) {
	if got, _, _ := strings.Cut(DefaultPrompt, "\n"); got != firstLine {
		t.Fatalf("first line = %q", got)
	}
	// What the prompt must ask for, by the wording that asks for it.
	required := []string{
		"<conversation>",
		"second person",
		"exact values",
		"no preamble",
		"Markdown",
		"## Goal", "task in progress",
		"## Constraints and preferences",
		"## Progress and decisions", "reason", "rejected",
		"## Key data", "file paths", "signatures", "commands", "succeeded or failed", "error messages", "verbatim", "configuration values", "URLs",
		"## Open work and next steps", "next step",
	}
	for _, s := range required {
		if !strings.Contains(DefaultPrompt, s) {
			t.Errorf("DefaultPrompt does not contain %q", s)
		}
	}
}

func TestInstructionsFor(t *testing.T) {
	cases := []struct {
		name        string
		custom      string
		previous    bool
		prefix      string
		wantMerging bool
	}{
		{"default", "", false, DefaultPrompt, false},
		{"default with previous", "", true, DefaultPrompt, true},
		{"custom", "Only list files.", false, "Only list files.", false},
		{"custom with previous", "Only list files.", true, "Only list files.", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := instructionsFor(tc.custom, tc.previous)
			if !strings.HasPrefix(got, tc.prefix) {
				t.Errorf("does not start with %q", tc.prefix)
			}
			if tc.custom != "" && strings.Contains(got, firstLine) {
				t.Errorf("custom instructions did not replace the default prompt")
			}
			merging := strings.Contains(got, "A previous summary exists") && strings.Contains(got, "Drop nothing from the previous summary unless")
			if merging != tc.wantMerging {
				t.Errorf("merge clause present = %v, want %v", merging, tc.wantMerging)
			}
		})
	}
}

func TestUserMessage(t *testing.T) {
	cases := []struct {
		previous string
		entries  []string
		want     string
	}{
		{"", []string{"[user] a"}, "<conversation>\n[user] a\n</conversation>"},
		{"", []string{"[user] a", "[tool output] b"}, "<conversation>\n[user] a\n\n[tool output] b\n</conversation>"},
		{"S", []string{"[user] a"}, "<previous_summary>\nS\n</previous_summary>\n\n<conversation>\n[user] a\n</conversation>"},
	}
	for _, tc := range cases {
		if got := userMessage(tc.previous, tc.entries); got != tc.want {
			t.Errorf("userMessage(%q, %q) = %q, want %q", tc.previous, tc.entries, got, tc.want)
		}
	}
}

func BenchmarkUserMessage(b *testing.B) {
	entries := make([]string, 500)
	for i := range entries {
		entries[i] = "[assistant] " + strings.Repeat("text ", 200)
	}
	b.ReportAllocs()
	for b.Loop() {
		userMessage("previous summary", entries)
	}
}
