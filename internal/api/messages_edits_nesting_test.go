package api

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestContextEditsLinearInNesting applies both context edits to messages whose tool inputs,
// tool results and thinking blocks hold values nested 100k levels deep, built directly (the
// front door would refuse such a body). The edits only read and splice top-level members of each
// block (gjson.Get and sjson skip sub-values by counting brackets, without recursing), so they
// must run under a 16 MB stack cap — a walk recursing per level would kill the test binary with
// "goroutine stack exceeds 16777216-byte limit" — with heap allocations a small multiple of the
// input, and still clear what they should.
func TestContextEditsLinearInNesting(t *testing.T) {
	const depth = 100_000
	deep := strings.Repeat(`{"a":[`, depth) + `"x"` + strings.Repeat(`]}`, depth)
	block := func(raw string) Block { return Block{Raw: []byte(raw), Type: gjson.Get(raw, "type").Str} }
	msg := func(role string, blocks ...Block) Message {
		raws := make([][]byte, len(blocks))
		for i, b := range blocks {
			raws[i] = b.Raw
		}
		return Message{Raw: AnthropicMessage(role, raws), Role: role, Blocks: blocks}
	}
	var msgs []Message
	for _, id := range []string{"t1", "t2"} {
		msgs = append(msgs,
			msg("assistant",
				block(`{"type":"thinking","thinking":"hmm","signature":"c2ln","extra":`+deep+`}`),
				block(`{"type":"tool_use","id":"`+id+`","name":"Bash","input":{"deep":`+deep+`}}`)),
			msg("user", block(`{"type":"tool_result","tool_use_id":"`+id+`","content":`+deep+`}`)))
	}
	size := 0
	for _, m := range msgs {
		size += len(m.Raw)
	}
	count := func(b []byte) int { return len(b) }
	cases := []struct {
		name  string
		apply func() ([]Message, *AppliedEdit)
		check func(t *testing.T, out []Message)
	}{
		{"clear tool uses", func() ([]Message, *AppliedEdit) {
			e := &ClearToolUsesEdit{TriggerToolUses: 1, Keep: 1, ClearInputs: true}
			return e.Apply(msgs, 0, count)
		}, func(t *testing.T, out []Message) {
			if c := gjson.GetBytes(out[1].Blocks[0].Raw, "content").Str; c != ClearedToolResult {
				t.Errorf("oldest tool result not cleared: %.60q", c)
			}
			if in := gjson.GetBytes(out[0].Blocks[1].Raw, "input").Raw; in != "{}" {
				t.Errorf("oldest tool input not cleared: %.60q", in)
			}
		}},
		{"clear thinking", func() ([]Message, *AppliedEdit) {
			e := &ClearThinkingEdit{KeepTurns: 1}
			return e.Apply(msgs, count)
		}, func(t *testing.T, out []Message) {
			if len(out[0].Blocks) != 1 || out[0].Blocks[0].Type != "tool_use" {
				t.Errorf("oldest thinking block not cleared: %d blocks", len(out[0].Blocks))
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out []Message
			var ae *AppliedEdit
			old := debug.SetMaxStack(16 << 20)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			done := make(chan struct{})
			go func() { defer close(done); out, ae = tc.apply() }()
			<-done
			runtime.ReadMemStats(&after)
			debug.SetMaxStack(old)
			if alloc, limit := after.TotalAlloc-before.TotalAlloc, uint64(8*size+1<<20); alloc > limit {
				t.Errorf("allocated %d bytes for %d bytes of messages, want at most %d", alloc, size, limit)
			}
			if ae == nil {
				t.Fatal("edit not applied")
			}
			tc.check(t, out)
		})
	}
}
