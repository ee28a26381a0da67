package proxy

import (
	"net/http"
	"runtime/debug"
	"strings"
	"testing"
)

// x-codex-turn-metadata is client JSON: clientTurnFrom must bound its depth before gjson reads
// it (gjson.Valid recursed once per level). The stack limit is lowered so that the old code dies
// on a header a server would accept, instead of needing a gigabyte of stack.
func TestClientTurnFromDeepMetadata(t *testing.T) {
	old := debug.SetMaxStack(8 << 20)
	defer debug.SetMaxStack(old)
	tests := []struct {
		name, md string
		want     clientTurn
	}{
		{"nested arrays", strings.Repeat("[", 1<<20), clientTurn{Session: "s"}},
		{"nested objects", strings.Repeat(`{"a":`, 200_000) + "1" + strings.Repeat("}", 200_000), clientTurn{Session: "s"}},
		{"ordinary", `{"request_kind":"compaction","compaction":{"phase":"pre_turn"}}`, clientTurn{Session: "s", Kind: "compaction", Phase: "pre_turn"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			h.Set("Session-Id", "s")
			h.Set("X-Codex-Turn-Metadata", tt.md)
			if got := clientTurnFrom(h); got != tt.want {
				t.Fatalf("clientTurnFrom = %+v, want %+v", got, tt.want)
			}
		})
	}
}
