package responses

import (
	"reflect"
	"testing"

	"github.com/compactd/compactd/internal/api"
)

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
	if got := foreignIndexes(items); !reflect.DeepEqual(got, []int{2, 4}) {
		t.Errorf("foreignIndexes = %v, want [2 4]", got)
	}
}
