package tokenize

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want int
	}{
		{"", 0},
		{"hello", 1},
		{"hello world", 2},
	} {
		if got := Count(tc.s); got != tc.want {
			t.Errorf("Count(%q) = %d, want %d", tc.s, got, tc.want)
		}
	}
}

func TestTruncateMiddle(t *testing.T) {
	long := "HEAD " + strings.Repeat("alpha beta gamma delta ", 400) + "THE END"
	for _, tc := range []struct {
		name      string
		s         string
		max       int
		unchanged bool
		onlyMark  bool
	}{
		{"fits", "short message", 100, true, false},
		{"exactly fits", "hello world", 2, true, false},
		{"cut", long, 50, false, false},
		{"non-ASCII cut on rune boundaries", strings.Repeat("Grüße, 世界! ", 300), 20, false, false},
		{"budget below the marker", long, 3, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := TruncateMiddle(tc.s, tc.max, nil)
			if tc.unchanged {
				if out != tc.s {
					t.Fatalf("changed a text that fits: %q", out)
				}
				return
			}
			if !utf8.ValidString(out) {
				t.Fatal("invalid UTF-8")
			}
			if !strings.Contains(out, " tokens elided]…\n") {
				t.Fatalf("no marker in %q", out)
			}
			if tc.onlyMark {
				if strings.Contains(out, "HEAD") {
					t.Errorf("kept text with no room for it: %q", out)
				}
				return
			}
			if n := Count(out); n > tc.max+2 {
				t.Errorf("%d tokens, budget %d (the marker counts; the seams may add a token or two)", n, tc.max)
			}
			if !strings.HasPrefix(out, tc.s[:4]) || !strings.HasSuffix(out, tc.s[len(tc.s)-4:]) {
				t.Errorf("head or tail lost: %q", out)
			}
			if again := TruncateMiddle(tc.s, tc.max, Count); again != out {
				t.Error("not byte-stable across calls")
			}
		})
	}
}

func TestBound(t *testing.T) {
	huge := "HEAD " + strings.Repeat("x= y ", 200_000) + " THE END"
	out := Bound(huge, 40)
	if !strings.HasPrefix(out, "HEAD ") || !strings.HasSuffix(out, " THE END") || !strings.Contains(out, " tokens elided]…\n") {
		t.Errorf("Bound lost the head, the tail or the marker: %q", out)
	}
	if n := Count(out); n > 42 {
		t.Errorf("%d tokens, budget 40", n)
	}
	if short := "fits"; Bound(short, 40) != short {
		t.Error("Bound changed a text that fits")
	}
}

func TestCutMiddle(t *testing.T) {
	bytesLen := func(s string) int { return len(s) }
	marker := func(n int) string { return "[" + strings.Repeat("x", n%7) + "]" }
	long := "HEAD " + strings.Repeat("Grüße 世界 ", 500) + " TAIL"
	for _, tc := range []struct {
		name   string
		s      string
		budget int
	}{
		{"fits", "short", 10},
		{"cut", long, 200},
		{"tiny budget", long, 12},
		{"below the marker", long, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := CutMiddle(tc.s, tc.budget, bytesLen, marker)
			if len(tc.s) <= tc.budget {
				if out != tc.s {
					t.Fatalf("changed a text that fits: %q", out)
				}
				return
			}
			if !utf8.ValidString(out) {
				t.Fatal("invalid UTF-8")
			}
			if !strings.Contains(out, "[") {
				t.Fatalf("no marker in %q", out)
			}
			if len(out) > tc.budget && len(out) > len(marker(len(tc.s))) {
				t.Errorf("%d bytes, budget %d", len(out), tc.budget)
			}
			if tc.budget >= 200 && (!strings.HasPrefix(out, "HEAD") || !strings.HasSuffix(out, "TAIL")) {
				t.Errorf("head or tail lost: %q", out)
			}
		})
	}
}
