package proxy

import (
	"reflect"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
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
			if got := isForeign(gjson.Get(tc.item, "encrypted_content")); got != tc.want {
				t.Errorf("isForeign(%s) = %v, want %v", tc.item, got, tc.want)
			}
		})
	}
}

// TestForeignItemIndexes: only compaction and compaction_summary items can be foreign; other
// items with an encrypted_content (reasoning) are the upstream's business.
func TestForeignItemIndexes(t *testing.T) {
	items := []api.Item{
		{Type: "message", Role: "user", Raw: []byte(`{"role":"user","content":"hi"}`)},
		{Type: "reasoning", Raw: []byte(`{"type":"reasoning","encrypted_content":"gAAAAAB"}`)},
		{Type: "compaction", Raw: []byte(`{"type":"compaction","encrypted_content":"gAAAAAB"}`)},
		{Type: "compaction", Raw: []byte(`{"type":"compaction","encrypted_content":"cmp_1.x"}`)},
		{Type: "compaction_summary", Raw: []byte(`{"type":"compaction_summary","encrypted_content":"gAAAAAB"}`)},
		{Type: "compaction_trigger", Raw: []byte(`{"type":"compaction_trigger"}`)},
	}
	if got := foreignItemIndexes(items); !reflect.DeepEqual(got, []int{2, 4}) {
		t.Errorf("foreignItemIndexes = %v, want [2 4]", got)
	}
}
