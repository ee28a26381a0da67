package summarizer

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// transcript returns a Codex-shaped transcript: n turns of a user request, a tool call, its
// output and an assistant reply; every fifth user message is a long paste with multi-byte text.
func transcript(n int) []string {
	var out []string
	for i := range n {
		u := fmt.Sprintf("[user] request %d: fix the flaky test in pkg%d", i, i)
		if i%5 == 2 {
			u += "\n" + strings.Repeat(fmt.Sprintf("log line %d — ünïcødé ✓\n", i), 200)
		}
		out = append(out, u,
			fmt.Sprintf("[tool call] shell(go test ./pkg%d)", i),
			fmt.Sprintf("[tool output call_%d] FAIL TestThing%d", i, i),
			fmt.Sprintf("[assistant] done with request %d", i))
	}
	return out
}

func userEntries(entries []string) []string {
	var u []string
	for _, e := range entries {
		if strings.HasPrefix(e, "[user] ") {
			u = append(u, e)
		}
	}
	return u
}

func TestExtractiveUnderBudget(t *testing.T) {
	tests := []struct {
		name     string
		entries  []string
		maxBytes int
		want     []string // substrings, in order
		absent   []string
	}{
		{
			name:     "all user messages and the last assistant message",
			entries:  transcript(6),
			maxBytes: 0,
			want:     append(append([]string{ExtractiveHeading}, userEntries(transcript(6))...), "[assistant] done with request 5"),
			absent:   []string{"[tool call]", "[tool output", "done with request 4", "characters elided"},
		},
		{
			name:     "large budget changes nothing",
			entries:  transcript(3),
			maxBytes: 1 << 20,
			want:     userEntries(transcript(3)),
			absent:   []string{"characters elided", "omitted]"},
		},
		{
			name:    "label must be whole",
			entries: []string{"[user] a", "[username] b", "[assistant]\nmulti-line\nreply", "[assistantx] no"},
			want:    []string{"[user] a", "[assistant]\nmulti-line\nreply"},
			absent:  []string{"[username]", "[assistantx]"},
		},
		{
			name:    "no user messages",
			entries: []string{"[tool output x] y", "[assistant] only me"},
			want:    []string{ExtractiveHeading, "### Your last message\n\n[assistant] only me"},
			absent:  []string{"### User messages"},
		},
		{
			name:    "nothing at all",
			entries: nil,
			want:    []string{ExtractiveHeading},
			absent:  []string{"###"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Extractive(tt.entries, tt.maxBytes)
			if !strings.HasPrefix(got, ExtractiveHeading) {
				t.Errorf("missing heading")
			}
			rest := got
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("missing (or out of order) %q in\n%s", w, got)
				}
				rest = rest[i+len(w):]
			}
			for _, a := range tt.absent {
				if strings.Contains(got, a) {
					t.Errorf("unexpected %q", a)
				}
			}
		})
	}
}

func TestExtractiveDeterministic(t *testing.T) {
	for _, maxBytes := range []int{0, 900, 4000, 20000} {
		a := Extractive(transcript(30), maxBytes)
		b := Extractive(transcript(30), maxBytes)
		if a != b {
			t.Errorf("maxBytes %d: two runs differ", maxBytes)
		}
	}
}

func TestExtractiveBudget(t *testing.T) {
	entries := transcript(25)
	users := userEntries(entries)
	full := Extractive(entries, 0)
	for maxBytes := len(ExtractiveHeading); maxBytes <= len(full)+10; maxBytes += 97 {
		got := Extractive(entries, maxBytes)
		if len(got) > maxBytes {
			t.Fatalf("maxBytes %d: got %d bytes", maxBytes, len(got))
		}
		if !utf8.ValidString(got) {
			t.Fatalf("maxBytes %d: invalid UTF-8", maxBytes)
		}
		if !strings.HasPrefix(got, ExtractiveHeading) {
			t.Fatalf("maxBytes %d: heading missing", maxBytes)
		}
		// Whatever is kept of the users' messages, the newest are the ones kept whole: once one
		// is missing or cut, no older one is whole, unless it is short enough to fit its floor.
		cut := false
		for i := len(users) - 1; i >= 0; i-- {
			whole := strings.Contains(got, users[i]+"\n\n") || strings.HasSuffix(got, users[i])
			if whole && cut && len(users[i]) > minExtractiveEntry {
				t.Fatalf("maxBytes %d: user message %d kept whole after a newer one was cut", maxBytes, i)
			}
			if !whole {
				cut = true
			}
		}
		if maxBytes >= len(full) && got != full {
			t.Fatalf("maxBytes %d >= full length: output changed", maxBytes)
		}
	}
}

func TestExtractiveOverBudget(t *testing.T) {
	entries := transcript(10)
	users := userEntries(entries)
	newest := users[len(users)-1]
	tests := []struct {
		name     string
		maxBytes int
		check    func(t *testing.T, got string)
	}{
		{"long pastes truncated, every user message kept", 1800, func(t *testing.T, got string) {
			for i, u := range users {
				head := u[:strings.IndexByte(u+"\n", '\n')]
				if !strings.Contains(got, head) {
					t.Errorf("user message %d lost", i)
				}
			}
			if !strings.Contains(got, "characters elided") || !strings.Contains(got, newest) {
				t.Errorf("want truncated pastes and the newest whole:\n%s", got)
			}
			if !strings.HasSuffix(got, "### Your last message\n\n[assistant] done with request 9") {
				t.Errorf("short last assistant message not kept whole:\n%s", got)
			}
		}},
		{"oldest dropped with a note when even the floors do not fit", len(ExtractiveHeading) + 400, func(t *testing.T, got string) {
			if !strings.Contains(got, "earlier user messages omitted]") {
				t.Errorf("no omission note:\n%s", got)
			}
			if !strings.Contains(got, newest) {
				t.Errorf("newest user message not kept:\n%s", got)
			}
		}},
		{"heading alone when nothing else fits", len(ExtractiveHeading) + 10, func(t *testing.T, got string) {
			if got != ExtractiveHeading {
				t.Errorf("got %q", got)
			}
		}},
		{"never shorter than the heading", 10, func(t *testing.T, got string) {
			if got != ExtractiveHeading {
				t.Errorf("got %q", got)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Extractive(entries, tt.maxBytes)
			if len(got) > max(tt.maxBytes, len(ExtractiveHeading)) {
				t.Errorf("%d bytes over a budget of %d", len(got), tt.maxBytes)
			}
			tt.check(t, got)
		})
	}
}

func BenchmarkExtractive(b *testing.B) {
	entries := transcript(200)
	b.ReportAllocs()
	for b.Loop() {
		_ = Extractive(entries, 16<<10)
	}
}
