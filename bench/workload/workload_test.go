package workload

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestRequestShape(t *testing.T) {
	for _, size := range []int{2 << 10, 10 << 10, 200 << 10, 2 << 20} {
		for _, stream := range []bool{false, true} {
			body := Request(size, BodyOptions{Stream: stream, CompactThreshold: 1 << 30})
			var req struct {
				Stream            bool              `json:"stream"`
				Input             []json.RawMessage `json:"input"`
				ContextManagement []map[string]any  `json:"context_management"`
			}
			if err := json.Unmarshal(body, &req); err != nil {
				t.Fatalf("size %d: invalid JSON: %v", size, err)
			}
			if req.Stream != stream || len(req.ContextManagement) != 1 || len(req.Input) < 2 {
				t.Errorf("size %d: stream=%v cm=%v items=%d", size, req.Stream, req.ContextManagement, len(req.Input))
			}
			// Within a step's size (~12 KB) of the target, and never wildly under it.
			if len(body) < size*8/10 || len(body) > size+16<<10 {
				t.Errorf("size %d: body is %d bytes", size, len(body))
			}
		}
	}
}

func TestDeterministicAndDistinct(t *testing.T) {
	if !bytes.Equal(Request(100<<10, BodyOptions{}), Request(100<<10, BodyOptions{})) {
		t.Error("same size gave different bodies")
	}
	seen := map[string]int{}
	for i := range 200 {
		for _, it := range Step(i) {
			if !json.Valid(it) {
				t.Fatalf("step %d: invalid item %s", i, it)
			}
			if j, dup := seen[string(it)]; dup {
				t.Errorf("steps %d and %d share an item", j, i)
			}
			seen[string(it)] = i
		}
	}
	if bytes.Equal(NewItem(1), NewItem(2)) || !json.Valid(NewItem(3)) {
		t.Error("NewItem not distinct or not JSON")
	}
	if bytes.Equal(NewRound(1), NewRound(2)) || !json.Valid([]byte("["+string(NewRound(3))+"]")) {
		t.Error("NewRound not distinct or not a JSON array fragment")
	}
}

// TestAnswered: a history ending in a function_call gets that call's output; any other is kept
// as is.
func TestAnswered(t *testing.T) {
	for _, tc := range []struct {
		name  string
		items [][]byte
		added bool
	}{
		{"ends in a call", Step(1), true},
		{"ends in an output", append(Step(1), Step(2)...), false},
		{"ends in a message", Step(0), false},
		{"empty", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Answered(tc.items)
			if added := len(got) == len(tc.items)+1; added != tc.added {
				t.Fatalf("%d items from %d, added=%v want %v", len(got), len(tc.items), added, tc.added)
			}
			if tc.added {
				if !bytes.Contains(got[len(got)-1], []byte(`"type":"function_call_output"`)) ||
					!bytes.Contains(got[len(got)-1], []byte(`"call_id":"call_00000001"`)) {
					t.Errorf("added %s", got[len(got)-1])
				}
			}
		})
	}
}

// The Messages and Chat Completions bodies are valid JSON of about the size asked for, with many
// messages (a session, not one huge string).
func TestOtherDialects(t *testing.T) {
	for _, size := range []int{64 << 10, 2 << 20} {
		for name, body := range map[string][]byte{"messages": MessagesRequest(size), "count_tokens": CountTokensRequest(size), "chat": ChatRequest(size)} {
			var req struct {
				Messages  []json.RawMessage `json:"messages"`
				MaxTokens int               `json:"max_tokens"`
			}
			if err := json.Unmarshal(body, &req); err != nil {
				t.Fatalf("%s %d: invalid JSON: %v", name, size, err)
			}
			if len(body) < size*9/10 || len(body) > size+32<<10 || len(req.Messages) < size/(16<<10) {
				t.Errorf("%s %d: %d bytes, %d messages", name, size, len(body), len(req.Messages))
			}
			if (name == "messages") != (req.MaxTokens > 0) {
				t.Errorf("%s: max_tokens %d", name, req.MaxTokens)
			}
		}
	}
}
