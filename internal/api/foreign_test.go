package api

import (
	"testing"

	"github.com/tidwall/gjson"
)

// TestIsForeign pins what makes a compaction item foreign: a non-empty string encrypted_content
// without compactd's cmp_ prefix. Anything claiming compactd's format is compactd's to open (and
// to refuse with a 400); anything that is not a usable string is not valid-looking.
func TestIsForeign(t *testing.T) {
	cases := []struct {
		name string
		item string
		want bool
	}{
		{"OpenAI's Fernet token", `{"encrypted_content":"gAAAAABpQ0ZPRUlH"}`, true},
		{"Anthropic's opaque blob", `{"encrypted_content":"EqQBCkYIBxgCKkB"}`, true},
		{"prefix in another case", `{"encrypted_content":"CMP_abc.def"}`, true},
		{"prefix not at the start", `{"encrypted_content":" cmp_abc.def"}`, true},
		{"compactd's", `{"encrypted_content":"cmp_0123456789abcdef.sealed"}`, false},
		{"compactd's, truncated", `{"encrypted_content":"cmp_0123"}`, false},
		{"just the prefix", `{"encrypted_content":"cmp_"}`, false},
		{"escaped prefix", `{"encrypted_content":"\u0063mp_abc.def"}`, false},
		{"empty", `{"encrypted_content":""}`, false},
		{"null", `{"encrypted_content":null}`, false},
		{"a number", `{"encrypted_content":7}`, false},
		{"an object", `{"encrypted_content":{"a":"gAAAA"}}`, false},
		{"absent", `{"id":"cmp_x"}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsForeign(gjson.Get(tc.item, "encrypted_content")); got != tc.want {
				t.Errorf("IsForeign(%s) = %v, want %v", tc.item, got, tc.want)
			}
		})
	}
}
