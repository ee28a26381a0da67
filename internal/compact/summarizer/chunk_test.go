package summarizer

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func words(prefix string, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = prefix + strconv.Itoa(i)
	}
	return strings.Join(w, " ")
}

var elidedRe = regexp.MustCompile(`\n\[… (\d+) characters elided …\]\n`)

func TestChunk(t *testing.T) {
	giant := words("g", 100)
	cases := []struct {
		name    string
		entries []string
		budget  int
		count   func(string) int
		sizes   []int // entries per chunk
		cut     []int // indexes (in the flattened output) of entries that must be truncated
	}{
		{"empty", nil, 10, wordCount, nil, nil},
		{"all fit", []string{"a b", "c d", "e"}, 10, wordCount, []int{3}, nil},
		{"exact fit", []string{"a b", "c d"}, 4, wordCount, []int{2}, nil},
		{"packed in order", []string{"a b c", "d e f", "g h i", "j k l", "m n o"}, 7, wordCount, []int{2, 2, 1}, nil},
		{"separator counted", []string{strings.Repeat("x", 16), strings.Repeat("y", 16)}, 8, EstimateTokens, []int{1, 1}, nil},
		{"giant entry truncated alone", []string{"a b", giant, "c d"}, 20, wordCount, []int{1, 1, 1}, []int{1}},
		{"giant first, small one fills the rest", []string{giant, "a", "b"}, 20, wordCount, []int{2, 1}, []int{0}},
		{"zero budget", []string{"a", "b"}, 0, wordCount, []int{1, 1}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Chunk(tc.entries, tc.budget, tc.count)
			var sizes []int
			var flat []string
			sep := tc.count(entrySeparator)
			for i, ch := range got {
				sizes = append(sizes, len(ch))
				used := 0
				for j, e := range ch {
					used += tc.count(e)
					if j > 0 {
						used += sep
					}
				}
				if used > max(tc.budget, 1) && !(len(ch) == 1 && elidedRe.MatchString(ch[0])) {
					t.Errorf("chunk %d uses %d tokens, budget %d", i, used, tc.budget)
				}
				flat = append(flat, ch...)
			}
			if !equalInts(sizes, tc.sizes) {
				t.Errorf("chunk sizes = %v, want %v", sizes, tc.sizes)
			}
			if len(flat) != len(tc.entries) {
				t.Fatalf("got %d entries back, want %d", len(flat), len(tc.entries))
			}
			cut := map[int]bool{}
			for _, i := range tc.cut {
				cut[i] = true
			}
			for i, e := range flat {
				if cut[i] {
					if !elidedRe.MatchString(e) || tc.count(e) > tc.budget {
						t.Errorf("entry %d = %q: want truncated to %d tokens with a marker", i, e, tc.budget)
					}
					continue
				}
				if e != tc.entries[i] {
					t.Errorf("entry %d = %q, want %q (order or content changed)", i, e, tc.entries[i])
				}
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTruncateMiddle(t *testing.T) {
	long := "$ go test ./...\n" + strings.Repeat("ok  line of output\n", 2000) + "FAIL: TestX: want 4, got 3\n"
	cases := []struct {
		name   string
		s      string
		budget int
		count  func(string) int
	}{
		{"fits", "short entry", 100, EstimateTokens},
		{"tool output", long, 200, EstimateTokens},
		{"exact counter", long, 150, wordCount},
		{"multibyte", strings.Repeat("日本語のテキスト。", 500), 100, EstimateTokens},
		{"emoji", strings.Repeat("🙂 ", 1000), 60, EstimateTokens},
		{"budget below marker", long, 3, EstimateTokens},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := TruncateMiddle(tc.s, tc.budget, tc.count)
			if tc.count(tc.s) <= tc.budget {
				if got != tc.s {
					t.Errorf("entry that fits was changed")
				}
				return
			}
			if !utf8.ValidString(got) {
				t.Fatalf("result is not valid UTF-8")
			}
			loc := elidedRe.FindStringSubmatchIndex(got)
			if loc == nil {
				t.Fatalf("no elision marker in %q", got)
			}
			head, tail := got[:loc[0]], got[loc[1]:]
			if !strings.HasPrefix(tc.s, head) || !strings.HasSuffix(tc.s, tail) {
				t.Errorf("head/tail are not the original's")
			}
			elided, _ := strconv.Atoi(got[loc[2]:loc[3]])
			if want := utf8.RuneCountInString(tc.s) - utf8.RuneCountInString(head) - utf8.RuneCountInString(tail); elided != want {
				t.Errorf("marker says %d characters elided, actually %d", elided, want)
			}
			markerOnly := head == "" && tail == ""
			if n := tc.count(got); n > tc.budget && !markerOnly {
				t.Errorf("result has %d tokens, budget %d", n, tc.budget)
			}
			// Unless the budget cannot even hold the marker, most of it should be used.
			if !markerOnly && tc.count(got) < tc.budget*3/4 {
				t.Errorf("result uses %d of %d tokens: cut too much", tc.count(got), tc.budget)
			}
			if tc.name == "tool output" && (!strings.HasPrefix(got, "$ go test") || !strings.HasSuffix(got, "want 4, got 3\n")) {
				t.Errorf("command or final error lost")
			}
		})
	}
}

func TestCleanSummary(t *testing.T) {
	cases := []struct{ in, want string }{
		{"  ## Goal\nx\n", "## Goal\nx"},
		{"<think>plan</think>\n## Goal", "## Goal"},
		{"<think>never closed", ""},
		{"## Goal\n<think> inside is kept </think>", "## Goal\n<think> inside is kept </think>"},
		{"\n\n", ""},
	}
	for _, tc := range cases {
		if got := cleanSummary(tc.in); got != tc.want {
			t.Errorf("cleanSummary(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func BenchmarkChunk(b *testing.B) {
	entries := make([]string, 2000)
	for i := range entries {
		entries[i] = "[tool output] " + strings.Repeat("some output line\n", 60)
	}
	b.ReportAllocs()
	for b.Loop() {
		Chunk(entries, 100000, EstimateTokens)
	}
}

func BenchmarkTruncateMiddle(b *testing.B) {
	s := strings.Repeat("a line of a very large tool output\n", 30000) // ~1 MB
	b.SetBytes(int64(len(s)))
	b.ReportAllocs()
	for b.Loop() {
		TruncateMiddle(s, 20000, EstimateTokens)
	}
}
