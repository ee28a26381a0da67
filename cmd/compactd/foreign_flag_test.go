package main

import (
	"strings"
	"testing"
)

// TestServeForeignItems: --foreign-items (and COMPACTD_FOREIGN_ITEMS) takes drop or reject,
// defaults to drop, and anything else is a usage error before serve starts.
func TestServeForeignItems(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  string
		want string // "" = a usage error
	}{
		{nil, "", "drop"},
		{[]string{"--foreign-items", "reject"}, "", "reject"},
		{nil, "reject", "reject"},
		{[]string{"--foreign-items", "drop"}, "reject", "drop"}, // the command line wins
		{[]string{"--foreign-items", "forward"}, "", ""},
	} {
		clearCompactdEnv(t)
		if tt.env != "" {
			t.Setenv("COMPACTD_FOREIGN_ITEMS", tt.env)
		}
		c, _, err := parseServeFlags(tt.args)
		switch {
		case tt.want == "":
			if err == nil || !strings.Contains(err.Error(), "--foreign-items") {
				t.Errorf("%v: err = %v, want a usage error naming the flag", tt.args, err)
			}
		case err != nil:
			t.Errorf("%v env %q: %v", tt.args, tt.env, err)
		case c.foreignItems != tt.want:
			t.Errorf("%v env %q: foreign-items %q, want %q", tt.args, tt.env, c.foreignItems, tt.want)
		}
	}
}
