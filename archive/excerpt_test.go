package archive

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCut(t *testing.T) {
	long := strings.Repeat("alpha beta gamma ", 40) + "NEEDLE" + strings.Repeat(" delta épsilon zeta", 40)
	ms := strings.Index(long, "NEEDLE")
	cases := []struct {
		name     string
		text     string
		ms, me   int
		max      int
		contains string
		whole    bool
	}{
		{"fits whole", "short text", 0, 5, 100, "short text", true},
		{"centred", long, ms, ms + 6, 80, "NEEDLE", false},
		{"at start", long, 0, 5, 60, "alpha", false},
		{"at end", long, len(long) - 4, len(long), 60, "zeta", false},
		{"tiny budget", long, 0, 5, 8, "alpha", false},
		{"multibyte", strings.Repeat("é", 100), 100, 102, 21, "é", false},
	}
	for _, tc := range cases {
		got := cut(tc.text, tc.ms, tc.me, tc.max)
		if len(got) > tc.max {
			t.Errorf("%s: %d bytes > %d", tc.name, len(got), tc.max)
		}
		if !utf8.ValidString(got) {
			t.Errorf("%s: invalid UTF-8 %q", tc.name, got)
		}
		if !strings.Contains(got, tc.contains) {
			t.Errorf("%s: %q lacks %q", tc.name, got, tc.contains)
		}
		if (got == tc.text) != tc.whole {
			t.Errorf("%s: whole=%v, got %q", tc.name, !tc.whole, got)
		}
	}
}

func TestBestExcerpt(t *testing.T) {
	items := []json.RawMessage{
		msg("user", "nothing relevant"),
		msg("user", "timeout only"),
		msg("assistant", "the parseConfig timeout again"),
		msg("user", "parseConfig timeout twice, later"),
	}
	idx, ex := bestExcerpt(parseQuery("parseConfig timeout"), items, 800)
	if idx != 2 || ex != "the parseConfig timeout again\nassistant" {
		t.Errorf("best = %d %q", idx, ex)
	}
	idx, ex = bestExcerpt(parseQuery("config"), items, 800) // through a part
	if idx != 2 || !strings.Contains(ex, "parseConfig") {
		t.Errorf("best by part = %d %q", idx, ex)
	}
	if idx, ex := bestExcerpt(parseQuery("x"), nil, 800); idx != 0 || ex != "" {
		t.Errorf("no items = %d %q", idx, ex)
	}
}
