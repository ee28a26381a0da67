package proxy

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/compactd/compactd/internal/fixtures"
)

func TestClientTurnFromCodexHeaders(t *testing.T) {
	raw := fixtures.Codex("remote_v2_compaction_request.json")
	var capture struct{ Headers map[string]string }
	if err := json.Unmarshal(raw, &capture); err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	for k, v := range capture.Headers {
		h.Set(k, v)
	}
	got := clientTurnFrom(h)
	want := clientTurn{Session: "01a22679-79f0-7c11-bef8-f2764cce1ad3", Kind: "compaction", Phase: "pre_turn", Reason: "context_limit", Trigger: "auto"}
	if got != want {
		t.Errorf("clientTurnFrom = %+v, want %+v", got, want)
	}
}
