package jsonx

import (
	"strings"
	"testing"
)

func TestScanPrimitives(t *testing.T) {
	cases := []struct {
		name, js string
		at       int
		end      int
		ok       bool
	}{
		{"string", `"a\"b" ,`, 0, 6, true},
		{"unterminated string", `"abc`, 0, 4, false},
		{"object value", `:{"a":[1,"]"]} ,`, 0, 14, true},
		{"deep value", ":" + strings.Repeat("[", 50000) + strings.Repeat("]", 50000) + ",", 0, 100001, true},
		{"truncated value", `:[1,2`, 0, 5, false},
		{"scalar", `: 12.5e3}`, 0, 8, true},
		{"missing value", `:,`, 0, 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var end int
			var ok bool
			if c.js[0] == '"' {
				end, ok = StringEnd(c.js, c.at)
			} else {
				end, ok = SkipMember(c.js, c.at)
			}
			if end != c.end || ok != c.ok {
				t.Fatalf("= %d, %v; want %d, %v", end, ok, c.end, c.ok)
			}
			// The same answer on bytes.
			if c.js[0] != '"' {
				if be, bok := SkipMember([]byte(c.js), c.at); be != end || bok != ok {
					t.Fatalf("on []byte: %d, %v", be, bok)
				}
			}
		})
	}
	if got := ScalarEnd("true]", 0); got != 4 {
		t.Errorf("ScalarEnd = %d", got)
	}
}
