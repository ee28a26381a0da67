package compact

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/stackcheck"
)

// deepValue returns a JSON value nested 2n levels deep ({"t":"w0","c":[{"t":"w1","c":[…]}]}) with
// one string per object, and flatValue the same strings in the same order, one level deep. Every
// walk that extracts text must see the same strings in both.
func deepValue(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(`{"t":"w` + strconv.Itoa(i) + `","c":[`)
	}
	b.WriteString(`{"t":"end"}`)
	for range n {
		b.WriteString(`]}`)
	}
	return b.String()
}

func flatValue(n int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		b.WriteString(`{"t":"w` + strconv.Itoa(i) + `"},`)
	}
	b.WriteString(`{"t":"end"}]`)
	return b.String()
}

// fakeCounter counts a string's bytes instead of its BPE tokens: the walk, not the tokenizer, is
// under test, and byte counts make deep and flat totals directly comparable.
func fakeCounter() *Counter {
	c := NewCounter(CounterOptions{})
	c.bpe = func(s string) int { return len(s) }
	return c
}

// TestWalksLinearInNesting feeds every per-item walk of a compaction a value nested 200k levels
// deep (built directly, bypassing the front door's depth check) and requires it to finish under
// stackcheck.Cap with heap allocations bounded by a small multiple of the item's size; where the walk
// extracts text, its result must equal that of the flat value holding the same strings. Before the
// walks were iterative, token counting recursed once per level through gjson.ForEach (which
// re-scans the rest of the value at every level) and overflowed the cap.
func TestWalksLinearInNesting(t *testing.T) {
	const n = 100_000
	deep, flat := deepValue(n), flatValue(n)
	wrap := map[string]func(v string) string{
		"tool output": func(v string) string {
			return `{"type":"function_call_output","call_id":"c1","output":` + v + `}`
		},
		"message content": func(v string) string {
			return `{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"},` + v + `]}`
		},
		"unknown item": func(v string) string { return `{"type":"x_unknown","id":"x1","data":` + v + `}` },
	}
	walks := []struct {
		name string
		run  func(raw string) any
		same bool // deep and flat must give the same result
	}{
		{"exact item count", func(raw string) any { return fakeCounter().exact(kindItem, raw) }, true},
		{"exact tools count", func(raw string) any { return fakeCounter().exact(kindTools, raw) }, true},
		{"estimate", func(raw string) any { return estimate(kindItem, raw) }, true},
		{"strings visited", func(raw string) any {
			var out []string
			walkStrings(raw, true, func(s string) { out = append(out, s) }, func(int) {})
			return out
		}, true},
		{"ledger", func(raw string) any { return Ledger([]api.Item{item(raw)}, []int{0}, 1<<20) }, false},
		{"transcript", func(raw string) any { return RenderEntry(item(raw)) }, false},
	}
	for wname, w := range wrap {
		deepItem, flatItem := w(deep), w(flat)
		for _, tc := range walks {
			t.Run(wname+"/"+tc.name, func(t *testing.T) {
				var got any
				alloc := stackcheck.Run(func() { got = tc.run(deepItem) })
				if limit := uint64(8*len(deepItem) + 1<<20); alloc > limit {
					t.Errorf("allocated %d bytes for a %d-byte item, want at most %d", alloc, len(deepItem), limit)
				}
				if tc.same {
					if want := tc.run(flatItem); !reflect.DeepEqual(got, want) {
						t.Errorf("deep and flat values differ: %.200v vs %.200v", got, want)
					}
				}
			})
		}
	}
}

// TestStringEmbeddedDeepJSON sends a tool output, tool arguments and a patch input that are
// strings holding 6 MB of "[" (JSON inside a JSON string, which the front door's depth check does
// not look into) through the ledger and the transcript. The ledger used to hand such an output to
// gjson.Valid, which recurses once per bracket: a fatal stack overflow, not a recoverable panic.
func TestStringEmbeddedDeepJSON(t *testing.T) {
	brackets := strings.Repeat("[", 6<<20)
	cases := []struct{ name, raw string }{
		{"output object", callOutput("c1", `{"output":`+brackets)},
		{"output array", callOutput("c1", brackets)},
		{"output in parts", `{"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":` + jsonStr(`{"a":`+brackets) + `}]}`},
		{"arguments", `{"type":"function_call","call_id":"c1","name":"shell","arguments":` + jsonStr(`{"command":`+brackets) + `}`},
		{"arguments closed", `{"type":"function_call","call_id":"c1","name":"exec_command","arguments":` + jsonStr(`{"cmd":"ls","x":`+brackets+strings.Repeat("]", 6<<20)+`}`) + `}`},
		{"patch input", patchCall("c1", brackets)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			it := item(tc.raw)
			var ledger, entry string
			stackcheck.Run(func() {
				ledger = Ledger([]api.Item{it}, []int{0}, 1<<20)
				entry = RenderEntry(it)
			})
			if strings.Contains(ledger, "[[[[") {
				t.Errorf("ledger recorded the bracket run as a fact: %.200q", ledger)
			}
			if !strings.HasPrefix(entry, "[tool ") {
				t.Errorf("transcript entry = %.80q, want a tool line", entry)
			}
		})
	}
}
