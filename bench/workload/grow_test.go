package workload

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tidwall/gjson"
)

// TestGrowerAppends: each request of a conversation is the last one with items appended to the
// conversation array, every byte before them the same; sizes go from From to past To, then a new
// conversation begins; two clients never send the same conversation.
func TestGrowerAppends(t *testing.T) {
	for _, tc := range []struct {
		d     Dialect
		array string
	}{{Responses, "input"}, {Messages, "messages"}, {Chat, "messages"}} {
		g := NewGrower(tc.d, 1, GrowOptions{From: 64 << 10, To: 160 << 10})
		var prev []byte
		restarts := 0
		for k := range 60 {
			b := g.Next()
			if !json.Valid(b) {
				t.Fatalf("%v request %d is not JSON", tc.d, k)
			}
			arr := gjson.GetBytes(b, tc.array).Array()
			if prev != nil {
				pa := gjson.GetBytes(prev, tc.array).Array()
				last := pa[len(pa)-1]
				end := last.Index + len(last.Raw)
				if len(arr) > len(pa) {
					if !bytes.Equal(b[:end], prev[:end]) {
						t.Fatalf("%v request %d does not begin with request %d's items", tc.d, k, k-1)
					}
					if n := len(arr) - len(pa); n < 1 || n > 5 {
						t.Fatalf("%v request %d added %d items", tc.d, k, n)
					}
				} else {
					restarts++
					if len(b) > 64<<10+60<<10 || len(prev) < 160<<10 {
						t.Fatalf("%v restart at %d bytes (prev %d)", tc.d, len(b), len(prev))
					}
				}
			} else if len(b) < 64<<10 || len(b) > 64<<10+60<<10 {
				t.Fatalf("%v first request of %d bytes", tc.d, len(b))
			}
			prev = b
		}
		if restarts == 0 {
			t.Fatalf("%v: 60 requests never began a new conversation", tc.d)
		}
		other := NewGrower(tc.d, 2, GrowOptions{From: 64 << 10, To: 160 << 10}).Next()
		if bytes.Equal(other[:4096], NewGrower(tc.d, 1, GrowOptions{From: 64 << 10, To: 160 << 10}).Next()[:4096]) == false {
			// same instructions: the heads agree (one agent's conversations), the rest differs
			t.Fatalf("%v: two clients' conversations do not share the agent's head", tc.d)
		}
		if bytes.Equal(other, NewGrower(tc.d, 1, GrowOptions{From: 64 << 10, To: 160 << 10}).Next()) {
			t.Fatalf("%v: two clients sent the same conversation", tc.d)
		}
	}
}

// TestGrowerToolCallsAnswered: a Responses conversation never ends a request on an unanswered
// function_call (the real API refuses it), and Lead items come first.
func TestGrowerToolCallsAnswered(t *testing.T) {
	lead := []byte(`{"type":"compaction","encrypted_content":"x"}`)
	g := NewGrower(Responses, 3, GrowOptions{From: 32 << 10, To: 96 << 10, Lead: [][]byte{lead}})
	for k := range 40 {
		in := gjson.GetBytes(g.Next(), "input").Array()
		if in[0].Raw != string(lead) {
			t.Fatalf("request %d: lead item not first", k)
		}
		calls := map[string]bool{}
		for _, it := range in {
			switch it.Get("type").Str {
			case "function_call":
				calls[it.Get("call_id").Str] = true
			case "function_call_output":
				delete(calls, it.Get("call_id").Str)
			}
		}
		if len(calls) != 0 {
			t.Fatalf("request %d: unanswered calls %v", k, calls)
		}
	}
}

// TestCloneAndAdvance: a clone sends what its original would, and Advance moves a Grower as Next
// does, so every target of a side-by-side round is sent the same bodies.
func TestCloneAndAdvance(t *testing.T) {
	for _, d := range []Dialect{Responses, Messages, Chat} {
		g := NewGrower(d, 3, GrowOptions{From: 20 << 10, To: 60 << 10})
		g.Next()
		c := g.Clone()
		for i := range 30 {
			a, b := g.Next(), c.Next()
			if !bytes.Equal(a, b) {
				t.Fatalf("dialect %d: request %d of the clone differs from the original's", d, i)
			}
		}
		adv, next := g.Clone(), g.Clone()
		adv.Advance()
		next.Next()
		if !bytes.Equal(adv.Next(), next.Next()) {
			t.Fatalf("dialect %d: Advance did not move the conversation as Next does", d)
		}
	}
}
