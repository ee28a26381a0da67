package compact

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/compactd/compactd/internal/api"
)

// spy wraps c's tokenizer and counts calls, so tests can tell cache hits from BPE work.
func spy(c *Counter) *atomic.Int64 {
	var n atomic.Int64
	inner := c.bpe
	c.bpe = func(s string) int { n.Add(1); return inner(s) }
	return &n
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func userMsg(text string) api.Item {
	return api.Item{Type: "message", Role: "user", Raw: mustJSON(map[string]any{
		"type": "message", "role": "user", "id": "msg_" + fmt.Sprint(len(text)),
		"content": []any{map[string]any{"type": "input_text", "text": text}},
	})}
}

func TestTextMatchesTokenizer(t *testing.T) {
	c := NewCounter(CounterOptions{})
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40)
	for _, s := range []string{"", "hello world", "hello first turn", "func main() {\n\tfmt.Println(\"hi\")\n}\n", "日本語のテキスト", long} {
		ids, _, err := o200k().Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Text(s); got != len(ids) {
			t.Errorf("Text(%.20q) = %d, tokenizer says %d", s, got, len(ids))
		}
	}
}

func TestItemCountsTextualContentOnly(t *testing.T) {
	c := NewCounter(CounterOptions{})
	bpe := func(ss ...string) int {
		n := 0
		for _, s := range ss {
			n += bpeCount(s)
		}
		return n
	}
	cases := []struct {
		name string
		raw  string
		want int
	}{
		{"user message", `{"type":"message","id":"msg_123","role":"user","content":[{"type":"input_text","text":"hello first turn"}]}`,
			ItemOverhead + bpe("message", "user", "input_text", "hello first turn")},
		{"ids statuses and metadata skipped", `{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"MOCK-REPLY 1","annotations":[]}],"internal_chat_message_metadata_passthrough":{"turn_id":"01a2","content_item_kinds":["unknown"]}}`,
			ItemOverhead + bpe("message", "assistant", "output_text", "MOCK-REPLY 1")},
		{"reasoning ciphertext skipped", `{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Checking the file"}],"encrypted_content":"gAAAAABo` + strings.Repeat("x", 4000) + `"}`,
			ItemOverhead + bpe("reasoning", "summary_text", "Checking the file")},
		{"function call", `{"type":"function_call","id":"fc_1","call_id":"call_9","name":"exec_command","arguments":"{\"cmd\":\"ls -la\"}"}`,
			ItemOverhead + bpe("function_call", "exec_command", `{"cmd":"ls -la"}`)},
		{"inline image priced fixed", `{"type":"message","role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,` + strings.Repeat("A", 100000) + `"}]}`,
			ItemOverhead + bpe("message", "user", "input_image") + imageTokens},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.Item([]byte(tc.raw)); got != tc.want {
				t.Errorf("Item = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestToolsCountSchemaPropertyNames(t *testing.T) {
	c := NewCounter(CounterOptions{})
	tools := `[{"type":"function","name":"exec_command","description":"Run a command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}}]`
	want := 0
	for _, s := range []string{"function", "exec_command", "Run a command", "object", "cmd", "string", "cmd"} {
		want += bpeCount(s)
	}
	if got := c.Tools([]byte(tools)); got != want {
		t.Errorf("Tools = %d, want %d", got, want)
	}
}

func TestCacheHitSkipsTokenizer(t *testing.T) {
	c := NewCounter(CounterOptions{})
	calls := spy(c)
	raw := userMsg(strings.Repeat("some realistic words here ", 50)).Raw
	first := c.Item(raw)
	if calls.Load() == 0 {
		t.Fatal("cold count did not call the tokenizer")
	}
	before := calls.Load()
	for range 3 {
		if got := c.Item(raw); got != first {
			t.Fatalf("cached count %d != first %d", got, first)
		}
	}
	if calls.Load() != before {
		t.Errorf("cached Item called the tokenizer %d times", calls.Load()-before)
	}
	long := strings.Repeat("x y ", textCacheMin)
	c.Text(long)
	before = calls.Load()
	c.Text(long)
	if calls.Load() != before {
		t.Error("cached Text called the tokenizer")
	}
}

func TestCacheEvictsBeyondCapacity(t *testing.T) {
	c := NewCounter(CounterOptions{CacheEntries: cacheShards})
	calls := spy(c)
	var raws [][]byte
	for i := range 200 {
		raws = append(raws, userMsg(fmt.Sprintf("message number %d", i)).Raw)
	}
	for _, r := range raws {
		c.Item(r)
	}
	before := calls.Load()
	for _, r := range raws {
		c.Item(r)
	}
	if calls.Load() == before {
		t.Error("a 16-entry cache held 200 items")
	}
}

func TestEstimateUsesNoTokenizer(t *testing.T) {
	c := NewCounter(CounterOptions{})
	calls := spy(c)
	raw := userMsg("hello world, this is an estimate").Raw
	if e := c.Estimate(raw); e <= ItemOverhead {
		t.Errorf("Estimate = %d", e)
	}
	if calls.Load() != 0 {
		t.Error("Estimate called the tokenizer")
	}
}

func history(n int, text string) []api.Item {
	items := make([]api.Item, n)
	for i := range items {
		items[i] = userMsg(fmt.Sprintf("%d %s", i, text))
	}
	return items
}

func TestRequestThresholdDecision(t *testing.T) {
	items := history(50, strings.Repeat("Refactor the parser so that errors carry positions. ", 20))
	ref := NewCounter(CounterOptions{})
	exactTotal := 0
	for _, it := range items {
		exactTotal += ref.Item(it.Raw)
	}
	cases := []struct {
		name      string
		threshold int
		wantExact bool
	}{
		{"far above the threshold: estimate suffices", exactTotal * 3, false},
		{"far below: estimate suffices", exactTotal / 3, false},
		{"at the threshold: counted exactly", exactTotal, true},
		{"just over: counted exactly", exactTotal - 10, true},
		{"no threshold: estimate", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCounter(CounterOptions{})
			calls := spy(c)
			total, exact := c.Request(nil, items, nil, tc.threshold)
			if exact != tc.wantExact {
				t.Fatalf("exact = %v, want %v (total %d, exact total %d)", exact, tc.wantExact, total, exactTotal)
			}
			if exact && total != exactTotal {
				t.Errorf("exact total %d, want %d", total, exactTotal)
			}
			if !exact && calls.Load() != 0 {
				t.Errorf("estimated request called the tokenizer %d times", calls.Load())
			}
			// second turn: the exact counts are cached now (or still estimated without background)
			total2, exact2 := c.Request(nil, items, nil, tc.threshold)
			if exact2 != exact || total2 != total {
				t.Errorf("second turn (%d,%v) differs from first (%d,%v)", total2, exact2, total, exact)
			}
		})
	}
}

func TestRequestCountsInstructionsAndTools(t *testing.T) {
	c := NewCounter(CounterOptions{})
	instr := []byte(`"You are a coding agent.\nBe precise."`)
	tools := []byte(`[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}]`)
	items := history(2, "hi")
	want := c.Text("You are a coding agent.\nBe precise.") + c.Tools(tools) + c.Item(items[0].Raw) + c.Item(items[1].Raw)
	got, exact := c.Request(instr, items, tools, 0)
	if !exact || got != want {
		t.Errorf("Request = (%d,%v), want (%d,true)", got, exact, want)
	}
	if got, _ := c.Request([]byte("null"), nil, []byte("[]"), 0); got != 0 {
		t.Errorf("empty request counted %d", got)
	}
}

func TestBackgroundMakesNextTurnExact(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := NewCounter(CounterOptions{Background: true})
	items := history(20, strings.Repeat("background counting ", 30))
	_, exact := c.Request(nil, items, nil, 0)
	if exact {
		t.Fatal("first turn was exact before anything was cached")
	}
	// wait for the worker by polling the cache (no timing assertion: the loop ends when done)
	for done := false; !done; {
		done = true
		for _, it := range items {
			if _, ok := c.lookup(c.key(kindItem, it.Raw)); !ok {
				done = false
			}
		}
	}
	total, exact := c.Request(nil, items, nil, 0)
	want := 0
	for _, it := range items {
		want += c.Item(it.Raw)
	}
	if !exact || total != want {
		t.Errorf("second turn = (%d,%v), want (%d,true)", total, exact, want)
	}
	c.Close()
	c.Close() // idempotent
	c.Request(nil, history(3, "after close"), nil, 0)
}

func TestCounterConcurrentUse(t *testing.T) {
	defer goleak.VerifyNone(t)
	// a huge margin makes every turn count exactly, whatever the estimate says
	c := NewCounter(CounterOptions{Background: true, CacheEntries: 64, Margin: 100})
	defer c.Close()
	items := history(40, strings.Repeat("concurrent ", 20))
	want := 0
	ref := NewCounter(CounterOptions{})
	for _, it := range items {
		want += ref.Item(it.Raw)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				if total, exact := c.Request(nil, items, nil, want); !exact || total != want {
					t.Errorf("goroutine %d turn %d: (%d,%v), want (%d,true)", g, i, total, exact, want)
					return
				}
				c.Item(items[i].Raw)
				c.Estimate(items[i].Raw)
			}
		})
	}
	wg.Wait()
}
