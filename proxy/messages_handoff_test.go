package proxy

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/handoff"
)

// The Messages handoff rebuilds what a speculative compaction kept verbatim behind the summary:
// payload.Tail messages before the block's message, as many as the client still sends, then the
// rest of the block's message and every later message; the text carries the ledger.
func TestHandoffMessagesTail(t *testing.T) {
	body := `{"messages":[` +
		`{"role":"user","content":"u0"},{"role":"assistant","content":"a0"},{"role":"user","content":"u1"},` +
		`{"role":"assistant","content":[{"type":"compaction","content":"S","encrypted_content":"e"},{"type":"text","text":"a1"}]},` +
		`{"role":"user","content":"u2"}]}`
	req, err := api.ParseMessagesRequest([]byte(body))
	if err != nil || len(req.Blocks) != 1 {
		t.Fatalf("parse: %v", err)
	}
	for _, tt := range []struct {
		tail int
		want []string // the texts after the handoff message
	}{
		{0, []string{"a1", "u2"}},
		{2, []string{"a0", "u1", "a1", "u2"}},
		{9, []string{"u0", "a0", "u1", "a1", "u2"}}, // the client pruned: as many as it sent
	} {
		o := &engine.Opened{Summary: "S", Payload: &compact.Payload{Summary: "S", Ledger: "- cmd: go test", Tail: tt.tail}}
		out := handoffMessages(req.Messages, req.Blocks[0], o)
		if len(out) != 1+len(tt.want) || !out[0].Handoff || out[0].Role != "user" {
			t.Fatalf("tail %d: %d messages, want %d", tt.tail, len(out), 1+len(tt.want))
		}
		if got := gjson.GetBytes(out[0].Raw, "content.0.text").Str; got != handoff.MessagesText("S", "- cmd: go test") {
			t.Errorf("tail %d: handoff text = %q", tt.tail, got)
		}
		for i, w := range tt.want {
			m := gjson.ParseBytes(out[i+1].Raw)
			text := m.Get("content").Str + m.Get("content.#(type==\"text\").text").Str
			if text != w || strings.Contains(m.Raw, `"compaction"`) {
				t.Errorf("tail %d: messages[%d] = %s, want %q", tt.tail, i+1, m.Raw, w)
			}
		}
	}
}
