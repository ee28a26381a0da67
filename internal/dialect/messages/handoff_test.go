package messages

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/turn"
)

// The handoff rebuilds what a speculative compaction kept verbatim behind the summary:
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

// A compaction keeps the summarised messages' role:"system" messages and tool directives
// verbatim behind the handoff, in their order (a directive's place decides which tools the model
// has); when the block's message is a user message, its rest then follows as its own message
// rather than inside the handoff, after the directives it comes after.
func TestHandoffKeepsToolDirectives(t *testing.T) {
	add := `{"type":"tool_addition","tool":{"type":"tool_definition","definition":{"name":"grep","input_schema":{"type":"object"}}}}`
	drop := `{"type":"tool_removal","tool":{"type":"tool_reference","name":"grep"}}`
	readd := `{"type":"tool_addition","tool":{"type":"tool_reference","name":"grep"}}`
	sys := `{"role":"system","content":[` + drop + `]}`
	for _, tt := range []struct {
		name, blockMsg string
		want           []string // the messages after the handoff
	}{
		{"block in an assistant message", `{"role":"assistant","content":[{"type":"compaction","content":"S","encrypted_content":"e"},{"type":"text","text":"a1"}]}`,
			[]string{`{"role":"user","content":[` + add + `]}`, sys, `{"role":"user","content":[` + readd + `]}`, `{"role":"assistant","content":[{"type":"text","text":"a1"}]}`, `{"role":"user","content":"u2"}`}},
		{"block in a user message", `{"role":"user","content":[{"type":"compaction","content":"S","encrypted_content":"e"},{"type":"text","text":"q"}]}`,
			[]string{`{"role":"user","content":[` + add + `]}`, sys, `{"role":"user","content":[` + readd + `]}`, `{"role":"user","content":[{"type":"text","text":"q"}]}`, `{"role":"user","content":"u2"}`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"messages":[{"role":"user","content":[{"type":"text","text":"u0"},` + add + `]},` + sys + `,{"role":"assistant","content":"a0"},` +
				`{"role":"user","content":[{"type":"text","text":"u1"},` + readd + `]},` + tt.blockMsg + `,{"role":"user","content":"u2"}]}`
			req, err := api.ParseMessagesRequest([]byte(body))
			if err != nil || len(req.Blocks) != 1 {
				t.Fatalf("parse: %v", err)
			}
			o := &engine.Opened{Summary: "S", Payload: &compact.Payload{Summary: "S"}}
			out := handoffMessages(req.Messages, req.Blocks[0], o)
			if len(out) != 1+len(tt.want) || gjson.GetBytes(out[0].Raw, "content.#").Int() != 1 {
				t.Fatalf("%d messages, want %d; handoff %s", len(out), 1+len(tt.want), out[0].Raw)
			}
			for i, w := range tt.want {
				var got bytes.Buffer
				if err := json.Compact(&got, out[i+1].Raw); err != nil || got.String() != w {
					t.Errorf("messages[%d] = %s\nwant %s", i+1, out[i+1].Raw, w)
				}
			}
			// The memo's rendering of the same compaction (a client that carries no block)
			// keeps the same context in the same place.
			memo := memoHandoffMessages(req.Messages, 4, o)
			for i, w := range tt.want[:3] {
				var got bytes.Buffer
				if err := json.Compact(&got, memo[i+1].Raw); err != nil || got.String() != w {
					t.Errorf("memo messages[%d] = %s\nwant %s", i+1, memo[i+1].Raw, w)
				}
			}
		})
	}
}

// FuzzMessagesHandoff renders the handoff for the last compaction block of a fuzzed body: the
// first message is the user handoff carrying exactly handoff.MessagesText, no compaction block
// is left, every message is valid JSON, and the messages after the block's message follow
// unchanged (minus compaction blocks).
func FuzzMessagesHandoff(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":"old"},{"role":"assistant","content":[{"type":"compaction","content":"s","encrypted_content":"e"},{"type":"text","text":"after"}]},{"role":"user","content":"new"}]}`), "the summary")
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"compaction","content":"s"},{"type":"compaction","content":null},{"type":"text","text":"q"}]}]}`), "")
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"compaction"}]},{"role":"assistant","content":[{"type":"compaction"}]}]}`), "</summary>")
	f.Fuzz(func(t *testing.T, body []byte, summary string) {
		req, err := api.ParseMessagesRequest(body)
		if err != nil || len(req.Blocks) == 0 {
			return
		}
		ref := req.Blocks[len(req.Blocks)-1]
		out := handoffMessages(req.Messages, ref, &engine.Opened{Summary: summary, Payload: &compact.Payload{Summary: summary}})
		if len(out) == 0 || out[0].Role != "user" || !out[0].Handoff {
			t.Fatalf("first message is not the user handoff: %+v", out)
		}
		if utf8.ValidString(summary) && gjson.GetBytes(out[0].Raw, "content.0.text").Str != handoff.MessagesText(summary, "") {
			t.Fatalf("handoff text differs from handoff.MessagesText")
		}
		for i, m := range out {
			if !json.Valid(m.Raw) {
				t.Fatalf("message %d is not JSON: %q", i, m.Raw)
			}
			for _, b := range m.Blocks {
				if b.Type == api.BlockCompaction {
					t.Fatalf("message %d still holds a compaction block", i)
				}
			}
			for _, b := range gjson.GetBytes(m.Raw, "content").Array() {
				if b.Get("type").Str == api.BlockCompaction {
					t.Fatalf("message %d raw still holds a compaction block: %q", i, m.Raw)
				}
			}
		}
		later := stripCompaction(req.Messages, ref.Message+1)
		if len(out) < len(later) {
			t.Fatalf("lost messages after the block")
		}
		for i, m := range later {
			if !bytes.Equal(out[len(out)-len(later)+i].Raw, m.Raw) {
				t.Fatalf("message after the block changed")
			}
		}
	})
}

// The memo's record of a compaction and the block the client carries back render the same
// upstream messages, byte for byte: a transparent client and a compacting one keep the same
// prompt cache. Pinned for a block alone in the assistant's answer (what Anthropic's clients
// append), with system messages and a speculative tail kept behind the handoff.
func TestRememberMatchesCarriedBlock(t *testing.T) {
	env, _ := newEnv(t)
	sys := `{"role":"system","content":"deferred tools: Read, Bash"}`
	summarised := append([]string{sys}, history(3)...)
	block, c := sealedBlock(t, env, summarised)
	o, f := env.Open("x", c.EncryptedContent, "", "")
	if f != nil {
		t.Fatal(f)
	}
	for _, tail := range []int{0, 2} {
		o.Payload.Tail = tail
		answer := msg("assistant", "done")
		later := []string{answer, msg("user", "next")}
		// The carried block: the compacting turn's answer, the block first in it.
		carried := append(append([]string(nil), summarised...), `{"role":"assistant","content":[`+string(block)+`,{"type":"text","text":"done"}]}`, msg("user", "next"))
		// The transparent client: its whole history, the memo covering what was summarised.
		plain := append(append([]string(nil), summarised...), later...)

		env.Front = openAs{env.Front, o}
		ct := parse(t, Adapter{}, env, body(carried))
		pt := parse(t, Adapter{}, env, body(plain))
		pt.Remember(env, &engine.Memory{Opened: o, Items: len(summarised)})
		if pt.Prev() != o || !pt.Changed(env) {
			t.Fatal("Remember did not put the compaction in force")
		}
		got, want := msgsOf(t, pt.Body(env)), msgsOf(t, ct.Body(env))
		if got != want {
			t.Errorf("tail %d: the memo's handoff differs from the carried block's:\n memo %s\nblock %s", tail, got, want)
		}
		if !strings.Contains(got, sys) || !strings.HasPrefix(got, `[{"role":"user","content":[`+string(api.TextBlock(handoff.MessagesText(testSummary, "")))+`]}`) {
			t.Errorf("tail %d: %s", tail, got)
		}
	}
}

// msgsOf is the raw messages array of a body.
func msgsOf(t *testing.T, body []byte) string {
	t.Helper()
	m := gjson.GetBytes(body, "messages")
	if !m.IsArray() {
		t.Fatalf("no messages in %s", body)
	}
	return m.Raw
}

// openAs is a front whose Open opens everything as o.
type openAs struct {
	turn.Front
	o *engine.Opened
}

func (f openAs) Open(string, string, string, string) (*engine.Opened, *fault.Fault) { return f.o, nil }
