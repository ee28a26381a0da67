package english

import "testing"

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n      int
		noun   string
		plural []string
		want   string
	}{
		{0, "segment", nil, "0 segments"},
		{1, "segment", nil, "1 segment"},
		{2, "session", nil, "2 sessions"},
		{1, "compaction", nil, "1 compaction"},
		{3, "entry", []string{"entries"}, "3 entries"},
		{1, "entry", []string{"entries"}, "1 entry"},
	} {
		if got := Count(tc.n, tc.noun, tc.plural...); got != tc.want {
			t.Errorf("Count(%d, %q) = %q, want %q", tc.n, tc.noun, got, tc.want)
		}
	}
}
