package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/memo"
)

// Messages-like units (one per message) for speculation: a conversation whose newest user
// message is a tool_result.
func messagesUnits(msgs []api.Message) ([]api.Item, func(int) []api.Item) {
	return api.CountItems(msgs), func(n int) []api.Item { return api.MessageItems(msgs[:n]) }
}

func textMsg(role, text string) api.Message {
	return api.NewMessage(role, []api.Block{{Raw: api.TextBlock(text), Type: api.BlockText}})
}

// The speculative prefix, on every dialect, ends at a cut that keeps a tool call with its result:
// a Messages turn whose newest user message is a tool_result speculates on everything before the
// assistant's tool_use, and the crossing turn keeps that tool_use and its result verbatim.
func TestSpeculationNeverCutsAToolPair(t *testing.T) {
	useA := api.NewMessage("assistant", []api.Block{{Raw: []byte(`{"type":"tool_use","id":"toolu_A","name":"Read","input":{"file_path":"a"}}`), Type: "tool_use"}})
	resA := api.NewMessage("user", []api.Block{{Raw: []byte(`{"type":"tool_result","tool_use_id":"toolu_A","content":"listen_port: 7431"}`), Type: "tool_result"}})
	below := []api.Message{textMsg("user", words(3000)), textMsg("assistant", words(3000)), textMsg("user", words(300)), useA, resA}
	crossing := append(append([]api.Message(nil), below...), textMsg("assistant", words(200)), textMsg("user", words(200)))

	sum := &countingSum{}
	e, obs := testEngine(t, sum, func(c *Config) { c.Speculative = SpeculativeConfig{Fraction: 0.5} })
	d := Dialect{Name: dialect.Messages, SealKind: "anthropic.compaction", Handoff: handoff.MessagesText, Memo: true}
	u, p := messagesUnits(below)
	e.Speculate(SpecRequest{Dialect: d, Model: "m", Units: u, Prefix: p, Total: 9000, Limit: 10000})

	u, p = messagesUnits(crossing)
	c, err := e.Compact(context.Background(), Request{
		Dialect: d, Model: "m", Items: api.MessageItems(crossing), Units: u, Prefix: p, TokensBefore: 12000, Speculate: true,
		Finish: func(c *Compaction) (int, int) { return 1000, len(crossing) - c.Tail },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(obs.spec, " "), "hit") {
		t.Fatalf("the crossing turn did not use the speculative summary: %v", obs.spec)
	}
	tail := crossing[len(crossing)-c.Tail:]
	if c.Tail != 4 || tail[0].Role != "assistant" || tail[1].Blocks[0].Type != "tool_result" {
		t.Fatalf("kept tail of %d messages starts with %s: want the tool_use and its result kept together", c.Tail, tail[0].Role)
	}
	if !compact.SafeCuts(u)[len(crossing)-c.Tail] {
		t.Error("the cut is not a safe one")
	}
}

// A memo record is applied, and made, only at a cut that keeps tool calls with their results.
func TestMemoAppliesOnlyAtASafeCut(t *testing.T) {
	sum := &countingSum{}
	m := memo.NewLocal(0, time.Hour)
	e, _ := testEngine(t, sum, func(c *Config) { c.Memo = m })
	call := `{"type":"function_call","call_id":"c1","name":"a","arguments":"{}"}`
	out := `{"type":"function_call_output","call_id":"c1","output":"ok"}`
	items := []api.Item{msg("user", words(3000)), msg("assistant", words(3000)), {Raw: []byte(call), Type: "function_call"}}
	rawJSON := func(items []api.Item) []json.RawMessage { return rawItems(items) }

	// A compaction of a prefix that ends with a call (its output not sent yet) is recorded — the
	// turn cannot see the future — but the next turn, which answers the call after the cut, does
	// not get it applied: its upstream would see an output whose call is summarised away.
	mem := e.Remembered(context.Background(), responsesDialect, Scope{Tenant: "t"}, rawJSON(items))
	in := request(e, items, 64_000)
	in.Memory, in.Covers, in.Tenant = mem, len(items), "t"
	if _, err := e.Compact(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	next := append(append([]api.Item(nil), items...), api.Item{Raw: []byte(out), Type: "function_call_output"}, msg("user", "go on"))
	if got := e.Remembered(context.Background(), responsesDialect, Scope{Tenant: "t"}, rawJSON(next)); got == nil || got.Opened != nil {
		t.Fatal("a record between a call and its output was applied")
	}
	// Covering the answered call: recorded, and applied on the next turn.
	items = next[:4]
	mem = e.Remembered(context.Background(), responsesDialect, Scope{Tenant: "t"}, rawJSON(items))
	in = request(e, items, 64_000)
	in.Memory, in.Covers, in.Tenant = mem, len(items), "t"
	if _, err := e.Compact(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	if got := e.Remembered(context.Background(), responsesDialect, Scope{Tenant: "t"}, rawJSON(next)); got == nil || got.Opened == nil || got.Items != 4 {
		t.Fatal("a record at a safe cut was not applied")
	}
}
