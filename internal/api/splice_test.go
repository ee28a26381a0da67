package api

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/fixtures"
)

// The splice is the same body as the copy Rebuild used to write (but for whitespace: it keeps
// the client's between the items that stay), in pieces: for every way a turn
// rebuilds input (items kept, dropped, replaced, a handoff put in front, context_management
// dropped, the recall tool added), RebuildSplice's pieces join to rebuild's bytes, and what stays
// of the client's body is pieces of it, not copies.

// spliceCases are the ways a turn rebuilds input: from the request's items, items to send.
var spliceCases = []struct {
	name  string
	items func(r *ResponsesRequest) [][]byte
}{
	{"unchanged", func(r *ResponsesRequest) [][]byte { return raws(r.Items) }},
	{"handoff in front of the rest", func(r *ResponsesRequest) [][]byte {
		return append([][]byte{UserMessage("handoff summary")}, raws(r.Items[min(1, len(r.Items)):])...)
	}},
	{"window, handoff, then the items after the second", func(r *ResponsesRequest) [][]byte {
		out := [][]byte{UserMessage("kept window item"), UserMessage("handoff")}
		return append(out, raws(r.Items[min(2, len(r.Items)):])...)
	}},
	{"last item dropped", func(r *ResponsesRequest) [][]byte { return raws(r.Items[:max(len(r.Items)-1, 0)]) }},
	{"every other item", func(r *ResponsesRequest) [][]byte {
		var out [][]byte
		for i, it := range r.Items {
			if i%2 == 0 {
				out = append(out, it.Raw)
			}
		}
		return out
	}},
	{"reversed", func(r *ResponsesRequest) [][]byte {
		out := raws(r.Items)
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
		return out
	}},
	{"empty", func(*ResponsesRequest) [][]byte { return nil }},
	{"a copy of each item", func(r *ResponsesRequest) [][]byte {
		var out [][]byte
		for _, it := range r.Items {
			out = append(out, bytes.Clone(it.Raw))
		}
		return out
	}},
}

// sameJSON: the two bodies are the same JSON text but for whitespace between tokens (the splice
// keeps the client's, rebuild wrote its own separators).
func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

func raws(items []Item) [][]byte {
	out := make([][]byte, len(items))
	for i, it := range items {
		out[i] = it.Raw
	}
	return out
}

var spliceBodies = []string{
	`{"model":"m","input":[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"}],"tools":[{"type":"function","name":"x"}]}`,
	"{\n \"context_management\": [{\"type\":\"compaction\",\"compact_threshold\":100}],\n \"input\" : [ {\"role\":\"user\",\"content\":\"a\"} ,\n {\"role\":\"user\",\"content\":\"b\"}\n ] ,\n \"tools\": null }",
	`{"input":[{"role":"user","content":"a"}],"context_management":[{"type":"compaction"}],"tools":[]}`,
	`{"input":[]}`,
}

func TestRebuildSpliceIsRebuild(t *testing.T) {
	bodies := append([]string(nil), spliceBodies...)
	_, caps := fixtures.CodexAll()
	for _, c := range caps {
		bodies = append(bodies, gjson.GetBytes(c, "body").Raw)
	}
	tool := []byte(`{"type":"function","name":"compactd_recall"}`)
	for _, b := range bodies {
		r, err := ParseResponsesRequest([]byte(b))
		if err != nil {
			t.Fatalf("%v: %.80s", err, b)
		}
		for _, c := range spliceCases {
			for _, drop := range []bool{false, true} {
				for _, tl := range [][]byte{nil, tool} {
					items := c.items(r)
					want := r.rebuild(items, drop, tl)
					sp := r.RebuildSplice(items, drop, tl)
					if sp == nil {
						continue // rebuild's own case: no tools array for the tool
					}
					if got := sp.Bytes(); !sameJSON(got, want) {
						t.Fatalf("%s (drop %v, tool %v): splice\n%s\nwant\n%s", c.name, drop, tl != nil, got, want)
					}
					if sp.Len() != len(sp.Bytes()) {
						t.Fatalf("%s: Len %d, joined %d", c.name, sp.Len(), len(sp.Bytes()))
					}
					if c.name == "unchanged" && !drop && tl == nil && !bytes.Equal(sp.Bytes(), r.Body) {
						t.Fatalf("unchanged input is not the client's bytes:\n%s", sp.Bytes())
					}
					// Pieces of the body are not copies; unchanged input is one piece (the body
					// cut only where an edit falls).
					s := newSplicer(r.Body, 0)
					inBody := 0
					for _, p := range sp {
						if s.inBody(p) >= 0 {
							inBody += len(p)
						}
					}
					if c.name == "unchanged" && !drop && tl == nil && len(sp) != 1 {
						t.Fatalf("unchanged input in %d pieces, want 1 (the body): %q", len(sp), sp)
					}
					if c.name == "handoff in front of the rest" && len(r.Items) > 3 && inBody < len(r.Body)/2 {
						t.Fatalf("a handoff kept only %d of %d bytes as pieces of the body", inBody, len(r.Body))
					}
				}
			}
		}
	}
}

// FuzzRebuildSplice: for any body the skim accepts, the splice of a handoff-shaped rebuild joins
// to the bytes rebuild writes.
func FuzzRebuildSplice(f *testing.F) {
	for _, b := range spliceBodies {
		f.Add([]byte(b), uint8(0))
	}
	f.Fuzz(func(t *testing.T, body []byte, k uint8) {
		r, err := ParseResponsesRequest(body)
		if err != nil || len(body) > 1<<20 {
			return
		}
		for _, c := range spliceCases {
			items := c.items(r)
			drop := k&1 == 1
			var tl []byte
			if k&2 == 2 {
				tl = []byte(`{"name":"t"}`)
			}
			sp := r.RebuildSplice(items, drop, tl)
			if sp == nil {
				continue
			}
			if got, want := sp.Bytes(), r.rebuild(items, drop, tl); !sameJSON(got, want) {
				t.Fatalf("%s: splice %q, rebuild %q", c.name, got, want)
			}
		}
	})
}
