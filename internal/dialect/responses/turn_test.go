package responses

import (
	"bytes"
	"errors"
	"testing"

	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/turn/turntest"
)

// TestFailedCompactionLeavesTheTurn: a compaction that fails after its Finish rendered the
// compacted conversation (here: it is not smaller than the turn) must leave the turn's
// conversation as the client sent it, or the upstream would get a compaction the client never
// receives.
func TestFailedCompactionLeavesTheTurn(t *testing.T) {
	h := turntest.NewHarness(t, Adapter{})
	// context_management (which compactd takes out) makes the body a rebuild, so the items the
	// upstream gets are the turn's own.
	b := bytes.Replace(body(history()), []byte(`"store":false`), []byte(`"store":false,"context_management":[{"type":"compaction","compact_threshold":50000}]`), 1)
	tr, f := Adapter{}.Parse(h.Env, b)
	if f != nil {
		t.Fatal(f)
	}
	before := append([]byte(nil), tr.Body(h.Env)...)
	req := tr.Compaction(h.Env, 1, false) // one token before: nothing can be smaller
	req.Dialect, req.Tenant = Adapter{}.Engine(), turntest.Tenant
	if _, err := h.Engine.Compact(h.Env.Ctx, req); !errors.Is(err, engine.ErrNotSmaller) {
		t.Fatalf("Compact: %v, want ErrNotSmaller", err)
	}
	if got := tr.Body(h.Env); !bytes.Equal(got, before) {
		t.Errorf("after a failed compaction the upstream would get\n%s\nwant the client's body", got)
	}
}
