package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/jsonx"
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
	// nesting: at, and just past, the depth limit; deep inside a string (not nesting at all)
	`{"input":[{"role":"user","content":` + nested(jsonx.MaxDepth-3, false) + `}]}`,
	`{"input":` + nested(jsonx.MaxDepth, false) + `}`,
	`{"x":` + nested(jsonx.MaxDepth, true) + `}`,
	`{"input":"` + strings.Repeat("[", 5000) + `"}`,
	strings.Repeat("[", 2000),
	// duplicates, plain and escaped, at every level compactd reads
	`{"input":[{"type":"message","role":"user","content":"x","type":"compaction","encrypted_content":"e"}]}`,
	`{"input":[{"type":"message","role":"user","content":"x","typ\u0065":"compaction","encrypted_content":"e"}]}`,
	`{"input":[{"role":"user","content":[{"type":"input_text","text":"a","type":"compaction"}]}]}`,
	`{"input":[],"inp\u0075t":[{"type":"compaction","encrypted_content":"e"}]}`,
	`{"model":"a","model":"b","input":"x"}`,
	`{"input":[{"role":"user","content":"a","x":1,"x":2}],"y":1,"y":2}`,
	`{"input":[],"tool_choice":"none","tool_ch\u006fice":"auto"}`,
	`{"input":[],"tool_choice":{"type":"function","name":"a","name":"b"},"tools":[{"type":"function","name":"x","name":"y"}]}`,
	`{"input":[],"tools":[1,"s",{"function":{"name":"a","name":"b"}}],"tool_choice":[{"type":1,"type":2}]}`,
	`{"instructions":[{"type":"message","type":"compaction","encrypted_content":"e"}]}`,
	// compaction items where compactd does not open them
	`{"input":[{"role":"user","content":[{"type":"compaction","encrypted_content":"e"}]}]}`,
	`{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"compaction_summary"}]}]}`,
	`{"instructions":[{"type":"compaction","encrypted_content":"e"}]}`,
	// truncation, at several points of an agent-like body
	`{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"a`,
	`{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"a"}]},`,
	`{"model":"m","input":[{"type":"compaction","encrypted_content":"e\`,
	`{"model":"m","inp`,
}

func FuzzParseResponsesRequest(f *testing.F) {
	for _, s := range responsesSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseResponsesRequest(body)
		checkSkimError(t, body, err)
		sameAsTwoPass(t, body, r, err)
		if err != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		// What compactd decided must be what a last-key-wins upstream reads.
		for i, it := range r.Items {
			if r.InputString {
				break
			}
			m := lastWins(t, it.Raw)
			// (encoding/json replaces invalid UTF-8, which no type compactd acts on contains)
			if typ, ok := jsonString(m["type"]); ok && typ != it.Type && utf8.ValidString(it.Type) {
				t.Fatalf("item %d: compactd read type %q, a last-key-wins upstream reads %q: %q", i, it.Type, typ, it.Raw)
			}
			for _, member := range []string{"content", "output", "summary"} {
				var parts []json.RawMessage
				if json.Unmarshal(m[member], &parts) != nil {
					continue
				}
				for j, p := range parts {
					if typ, _ := jsonString(lastWins(t, p)["type"]); isCompactionType(typ) {
						t.Fatalf("accepted a %s part in input[%d].%s[%d]: %q", typ, i, member, j, body)
					}
				}
			}
		}
		if top := lastWins(t, body); top["model"] != nil {
			if model, ok := jsonString(top["model"]); ok && model != r.Model {
				t.Fatalf("compactd read model %q, a last-key-wins upstream reads %q", r.Model, model)
			}
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
				out := r.WithInput(itemsAt(r.Items, idx), drop)
				if !json.Valid(out) {
					t.Fatalf("WithInput(%v, drop=%v) of %q = %q: invalid JSON", idx, drop, body, out)
				}
				if dup {
					continue
				}
				if string(r.Tools) != "null" {
					// the recall tool, spliced in the same copy: as sjson would append it
					tool := []byte(`{"type":"function","name":"recall"}`)
					if got, want := r.Rebuild(itemsAt(r.Items, idx), drop, tool), rebuildOracle(r, itemsAt(r.Items, idx), drop, tool); !jsonEqual(got, want) {
						t.Fatalf("Rebuild of %q with a tool = %q, WithInput+sjson = %q", body, got, want)
					}
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

// checkSkimError holds a skim's refusal to its contract: a *BodyError of a known kind, and
// ErrTooDeep exactly for valid documents past the depth limit.
func checkSkimError(t *testing.T, body []byte, err error) {
	t.Helper()
	if err == nil {
		if jsonx.CheckDepth(body, jsonx.MaxDepth) != nil {
			t.Fatalf("accepted a body deeper than %d: %.200q", jsonx.MaxDepth, body)
		}
		return
	}
	var be *BodyError
	if !errors.As(err, &be) {
		t.Fatalf("error %v is not a *BodyError", err)
	}
	known := false
	for _, k := range []error{ErrInvalidJSON, ErrTooDeep, ErrDuplicateMember, ErrMisplacedCompaction, ErrShape} {
		known = known || errors.Is(err, k)
	}
	if !known {
		t.Fatalf("error %v is of no known kind", err)
	}
	// (encoding/json.Valid accepts invalid UTF-8, which the skim refuses in byte order: a bad
	// string before the bracket that crosses the limit is the refusal, as in jsonx.Valid.)
	if deep := jsonx.CheckDepth(body, jsonx.MaxDepth) != nil; json.Valid(body) && utf8.Valid(body) && errors.Is(err, ErrTooDeep) != deep {
		t.Fatalf("valid body: ErrTooDeep = %v, deeper than the limit = %v (%v)", errors.Is(err, ErrTooDeep), deep, err)
	}
}

// lastWins decodes an object as an upstream that keeps the last of duplicate keys would.
func lastWins(t *testing.T, raw []byte) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m) // not an object: nil map, no claims
	return m
}

func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if raw == nil || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
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
	// nesting
	`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":` + nested(jsonx.MaxDepth-6, false) + `}]}]}`,
	`{"messages":` + nested(jsonx.MaxDepth, false) + `}`,
	`{"metadata":` + nested(jsonx.MaxDepth, true) + `}`,
	`{"messages":` + strings.Repeat("[", 2000),
	// duplicates, plain and escaped
	`{"messages":[{"role":"user","content":"hi"}],"messages":[{"role":"user","content":[{"type":"compaction","content":"s","encrypted_content":"e"}]}]}`,
	`{"messages":[],"m\u0065ssages":[{"role":"user","content":"x"}]}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"a","type":"compaction","content":"s"}]}]}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"a","\u0074ype":"compaction"}]}]}`,
	`{"messages":[{"role":"user","content":"a","content":[{"type":"compaction","content":"s"}]}]}`,
	`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"a","type":"compaction"}]}]}]}`,
	`{"messages":[],"tool_choice":{"type":"none"},"tool_choice":{"type":"auto"}}`,
	`{"messages":[],"tool_choice":{"type":"tool","name":"a","name":"b"},"tools":[{"name":"x","name":"y"}]}`,
	`{"messages":[],"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":1,"value":2}}]}}`,
	`{"messages":[],"context_management":{"edits":[],"edits":[{"type":"compact_20260112"}]},"compaction":{"type":"summarize","type":"x"}}`,
	`{"messages":[],"context_management":{"edits":[[[{"type":1,"type":2}]]],"x":{"edits":1,"edits":2}}}`,
	// compaction blocks where compactd does not open them
	`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"compaction","content":"s"}]}]}]}`,
	`{"system":[{"type":"compaction","content":"s"}],"messages":[]}`,
	`{"messages":[{"role":"user","content":{"type":"compaction","content":"s"}}]}`,
	// truncation
	`{"model":"claude","messages":[{"role":"user","content":[{"type":"compaction","content":"s","encrypted_content":"e`,
	`{"model":"claude","messages":[{"role":"user","content":[{"type":"text","text":"a"}]},`,
	`{"model":"claude","messages":[{"role":"user","content":"\`,
}

func FuzzParseMessagesRequest(f *testing.F) {
	for _, s := range messagesSeeds {
		f.Add([]byte(s))
	}
	f.Add(claudeCodeBody(2 << 10))
	f.Add(claudeCodeBody(8 << 10)[:5000]) // truncated mid-history
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseMessagesRequest(body)
		checkSkimError(t, body, err)
		sameMessagesAsTwoPass(t, body, r, err)
		if err != nil {
			return
		}
		// What compactd decided must be what a last-key-wins upstream reads.
		var upMsgs []json.RawMessage
		if json.Unmarshal(lastWins(t, body)["messages"], &upMsgs) == nil && len(upMsgs) != len(r.Messages) {
			t.Fatalf("compactd read %d messages, a last-key-wins upstream reads %d: %q", len(r.Messages), len(upMsgs), body)
		}
		for i, m := range r.Messages {
			if m.StringContent {
				continue
			}
			for j, b := range m.Blocks {
				bm := lastWins(t, b.Raw)
				if typ, ok := jsonString(bm["type"]); ok && typ != b.Type && utf8.ValidString(b.Type) {
					t.Fatalf("block %d.%d: compactd read type %q, a last-key-wins upstream reads %q", i, j, b.Type, typ)
				}
				if b.Type != BlockCompaction && bytes.Contains(bm["content"], []byte(`compaction`)) {
					var nested []json.RawMessage
					if json.Unmarshal(bm["content"], &nested) == nil {
						for _, n := range nested {
							if typ, _ := jsonString(lastWins(t, n)["type"]); typ == BlockCompaction {
								t.Fatalf("accepted a compaction block nested in block %d.%d: %q", i, j, body)
							}
						}
					}
				}
			}
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
		msgs := JSONArray(Raws[[]byte](r.Messages))
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

// itemsAt is the raw JSON of items[idx...], in that order.
func itemsAt(items []Item, idx []int) [][]byte {
	out := make([][]byte, len(idx))
	for i, j := range idx {
		out[i] = items[j].Raw
	}
	return out
}
