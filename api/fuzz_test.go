package api

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tidwall/gjson"
)

// Fuzz targets for the request skims: every body a client can send goes through them before
// anything else, so they must never panic, must never turn a valid body into invalid JSON, and
// must splice items back byte for byte. Seed corpora live in testdata/fuzz/<Name>/; run one with
// `go test ./api -run '^$' -fuzz '^FuzzParseResponsesRequest$' -fuzztime 30s` (.ci/fuzz.sh runs
// them all).

// duplicateKeys reports whether the top-level object repeats a key. The skims record the last
// occurrence's span (and, for input and messages, the items of every occurrence), so the
// round-trip properties below only hold without duplicates; the no-panic and valid-JSON ones
// hold always.
func duplicateKeys(body []byte) bool {
	seen := map[string]bool{}
	dup := false
	gjson.ParseBytes(body).ForEach(func(k, _ gjson.Result) bool {
		if seen[k.Str] {
			dup = true
			return false
		}
		seen[k.Str] = true
		return true
	})
	return dup
}

var responsesSeeds = []string{
	`{"model":"m","input":"hi"}`,
	`{"model":"m","stream":true}`,
	`{}`,
	` { } `,
	`{"input":null}`,
	`{"input":[]}`,
	`{"context_management":[{"type":"compaction","compact_threshold":1000}]}`,
	`{"context_management":[{"type":"compaction","compact_threshold":1000}] , "model":"m"}`,
	`{"model":"m","context_management":[],"input":[{"role":"user","content":"a"}]}`,
	`{"input":[{"role":"user","content":"a"},{"type":"compaction","encrypted_content":"x"},{"type":"compaction_summary","encrypted_content":"y"},{"type":"message","role":"user","content":"b"},{"type":"compaction_trigger"}]}`,
	"{\n  \"model\": \"gpt-5\",\n  \"instructions\": \"be brief\",\n  \"input\": [ {\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"ok\"} ],\n  \"tools\": [],\n  \"stream\": true\n}",
	`{"input":[{"role":"user","content":"\u00e9\ud83d\ude00 <tag> \"q\""}],"prompt_cache_key":"k","previous_response_id":"resp_1"}`,
	`{"inp\u0075t":[{"role":"user","content":"escaped key"}]}`,
	`{"input":[1]}`,
	`{"input":5}`,
	`[1]`,
	`{"input":`,
}

func FuzzParseResponsesRequest(f *testing.F) {
	for _, s := range responsesSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseResponsesRequest(body)
		if err != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		for i, it := range r.Items {
			if !json.Valid(it.Raw) {
				t.Fatalf("item %d raw %q is not JSON", i, it.Raw)
			}
		}
		if r.ContextManagement != nil && !json.Valid(r.ContextManagement) {
			t.Fatalf("context_management %q is not JSON", r.ContextManagement)
		}
		all := make([]int, len(r.Items))
		for i := range all {
			all[i] = i
		}
		dup := duplicateKeys(body)
		for _, drop := range []bool{false, true} {
			for _, idx := range [][]int{all, reversed(all), nil} {
				out := r.WithInput(RawItems(r.Items, idx), drop)
				if !json.Valid(out) {
					t.Fatalf("WithInput(%v, drop=%v) of %q = %q: invalid JSON", idx, drop, body, out)
				}
				if dup {
					continue
				}
				r2, err := ParseResponsesRequest(out)
				if err != nil {
					t.Fatalf("WithInput output %q does not parse: %v", out, err)
				}
				if len(r2.Items) != len(idx) {
					t.Fatalf("round trip of %q: %d items, want %d (out %q)", body, len(r2.Items), len(idx), out)
				}
				for j, i := range idx {
					if !bytes.Equal(r2.Items[j].Raw, r.Items[i].Raw) {
						t.Fatalf("round trip item %d = %q, want %q", j, r2.Items[j].Raw, r.Items[i].Raw)
					}
				}
				if drop && r2.ContextManagement != nil {
					t.Fatalf("context_management survived drop: %q", out)
				}
				if !drop && !bytes.Equal(r2.ContextManagement, r.ContextManagement) {
					t.Fatalf("context_management changed without drop: %q -> %q", r.ContextManagement, r2.ContextManagement)
				}
				if r2.Model != r.Model || r2.Stream != r.Stream || r2.PromptCacheKey != r.PromptCacheKey ||
					!bytes.Equal(r2.Instructions, r.Instructions) || !bytes.Equal(r2.Tools, r.Tools) {
					t.Fatalf("top-level fields changed: %q -> %q", body, out)
				}
			}
		}
	})
}

func reversed(s []int) []int {
	out := make([]int, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

var messagesSeeds = []string{
	`{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"compaction","content":"s","encrypted_content":"cmp_1.x"}]},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":{}}]}]}`,
	`{"messages":[{"role":"assistant","content":[{"type":"compaction","content":null,"encrypted_content":null}]}],"stream":true,"system":"s","tools":[]}`,
	`{"context_management":{"edits":[{"type":"compact_20260112"}]},"compaction":{},"messages":[]}`,
	`{"messages":null}`,
	`{"messages":[{"role":"user","content":[1,"x",null]}]}`,
	`{"messages":[1]}`,
	`{"messages":{}}`,
	`{}`,
	`[]`,
}

func FuzzParseMessagesRequest(f *testing.F) {
	for _, s := range messagesSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseMessagesRequest(body)
		if err != nil {
			return
		}
		for i, m := range r.Messages {
			if !json.Valid(m.Raw) {
				t.Fatalf("message %d raw %q is not JSON", i, m.Raw)
			}
			for j, b := range m.Blocks {
				if !json.Valid(b.Raw) {
					t.Fatalf("block %d.%d raw %q is not JSON", i, j, b.Raw)
				}
			}
		}
		for _, ref := range r.Blocks {
			if ref.Message >= len(r.Messages) || ref.Block >= len(r.Messages[ref.Message].Blocks) ||
				r.Messages[ref.Message].Blocks[ref.Block].Type != BlockCompaction {
				t.Fatalf("block ref %+v does not point at a compaction block", ref)
			}
		}
		same := r.Rewrite()
		if !json.Valid(same) {
			t.Fatalf("Rewrite() of %q = %q: invalid JSON", body, same)
		}
		msgs := JSONArray(RawMessages(r.Messages))
		out := r.Rewrite(Member{Key: "messages", Value: msgs}, Member{Key: "context_management"}, Member{Key: "x_added", Value: []byte(`1`)})
		if !json.Valid(out) {
			t.Fatalf("Rewrite of %q = %q: invalid JSON", body, out)
		}
		if duplicateKeys(body) {
			return
		}
		r2, err := ParseMessagesRequest(out)
		if err != nil {
			t.Fatalf("Rewrite output %q does not parse: %v", out, err)
		}
		if len(r2.Messages) != len(r.Messages) {
			t.Fatalf("round trip: %d messages, want %d", len(r2.Messages), len(r.Messages))
		}
		for i := range r.Messages {
			if !bytes.Equal(r2.Messages[i].Raw, r.Messages[i].Raw) {
				t.Fatalf("message %d = %q, want %q", i, r2.Messages[i].Raw, r.Messages[i].Raw)
			}
		}
		if r2.ContextManagement != nil || gjson.GetBytes(out, "x_added").Int() != 1 {
			t.Fatalf("member changes not applied: %q", out)
		}
		if r2.Model != r.Model || r2.Stream != r.Stream || !bytes.Equal(r2.System, r.System) || !bytes.Equal(r2.Tools, r.Tools) {
			t.Fatalf("top-level fields changed: %q -> %q", body, out)
		}
	})
}
