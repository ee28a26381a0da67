package compact

import (
	"fmt"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/api"
)

// agentHistory builds a realistic agent history of about size bytes: user prompts (prose),
// assistant replies, reasoning with ciphertext, exec_command function calls and their outputs
// (source code and JSON from the calibration corpus), as Codex sends them.
func agentHistory(tb testing.TB, size int) []api.Item {
	chunks := loadCorpus(tb)
	var items []api.Item
	total := 0
	add := func(typ, role string, v map[string]any) {
		raw := mustJSON(v)
		items = append(items, api.Item{Raw: raw, Type: typ, Role: role})
		total += len(raw)
	}
	for i := 0; total < size; i++ {
		ch := chunks[(i*7919)%len(chunks)].text
		callID := fmt.Sprintf("call_%06d", i)
		switch i % 4 {
		case 0:
			add("message", "user", map[string]any{"type": "message", "role": "user", "id": "msg_u" + callID,
				"content": []any{map[string]any{"type": "input_text", "text": ch[:min(len(ch), 600)]}}})
		case 1:
			add("reasoning", "", map[string]any{"type": "reasoning", "id": "rs_" + callID,
				"summary":           []any{map[string]any{"type": "summary_text", "text": "**Inspecting the code** I'll read the file first."}},
				"encrypted_content": "gAAAAAB" + strings.Repeat("Zm9v", 300)})
			add("function_call", "", map[string]any{"type": "function_call", "id": "fc_" + callID, "call_id": callID,
				"name": "exec_command", "arguments": fmt.Sprintf(`{"cmd":"sed -n 1,200p src/file%d.go","workdir":"/home/dev/project"}`, i)})
		case 2:
			add("function_call_output", "", map[string]any{"type": "function_call_output", "call_id": callID, "output": ch})
		case 3:
			add("message", "assistant", map[string]any{"type": "message", "role": "assistant", "id": "msg_a" + callID, "status": "completed",
				"content": []any{map[string]any{"type": "output_text", "text": "I changed the handler so errors carry positions; tests pass.", "annotations": []any{}}}})
		}
	}
	return items
}

var historySizes = []struct {
	name string
	size int
}{{"10KB", 10 << 10}, {"1MB", 1 << 20}, {"4MB", 4 << 20}}

func historyBytes(items []api.Item) int64 {
	n := 0
	for _, it := range items {
		n += len(it.Raw)
	}
	return int64(n)
}

// BenchmarkCount compares an exact count with an empty cache (what the first turn of a session
// would cost without estimates), the estimate of an uncached history, and a fully cached turn.
func BenchmarkCount(b *testing.B) {
	for _, hs := range historySizes {
		items := agentHistory(b, hs.size)
		b.Run(hs.name+"/cold-exact", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(historyBytes(items))
			for b.Loop() {
				c := NewCounter(CounterOptions{})
				for _, it := range items {
					c.Item(it.Raw)
				}
			}
		})
		b.Run(hs.name+"/cold-estimate", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(historyBytes(items))
			c := NewCounter(CounterOptions{})
			for b.Loop() {
				c.Request(nil, items, nil, 0)
			}
		})
		b.Run(hs.name+"/cached", func(b *testing.B) {
			c := NewCounter(CounterOptions{})
			for _, it := range items {
				c.Item(it.Raw)
			}
			b.ReportAllocs()
			b.SetBytes(historyBytes(items))
			for b.Loop() {
				if _, exact := c.Request(nil, items, nil, 1); !exact {
					b.Fatal("cached history not exact")
				}
			}
		})
	}
}

// BenchmarkTurnAddsOneItem is the steady state of an agent session: a cached 1 MB history plus
// one new tool output, counted exactly because the total sits at the threshold.
func BenchmarkTurnAddsOneItem(b *testing.B) {
	items := agentHistory(b, 1<<20)
	c := NewCounter(CounterOptions{})
	total := 0
	for _, it := range items {
		total += c.Item(it.Raw)
	}
	turn := append(items[:len(items):len(items)], api.Item{})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		turn[len(turn)-1] = api.Item{Type: "function_call_output", Raw: mustJSON(map[string]any{
			"type": "function_call_output", "call_id": fmt.Sprintf("call_new%d", i),
			"output": fmt.Sprintf("ok  \tgithub.com/compactd/compactd/compact\t%d.%03ds\n", i%10, i%1000)})}
		if _, exact := c.Request(nil, turn, nil, total); !exact {
			b.Fatal("near-threshold turn not exact")
		}
	}
}

func BenchmarkEstimateItem(b *testing.B) {
	items := agentHistory(b, 256<<10)
	c := NewCounter(CounterOptions{})
	b.ReportAllocs()
	b.SetBytes(historyBytes(items))
	for b.Loop() {
		for _, it := range items {
			c.Estimate(it.Raw)
		}
	}
}
