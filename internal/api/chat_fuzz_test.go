package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/compactd/compactd/internal/jsonx"
)

var chatSeeds = []string{
	`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`,
	`{}`,
	` { } `,
	`{"messages":null}`,
	`{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c","content":"out"},{"role":"assistant","function_call":{"name":"g","arguments":{}}}]}`,
	`{"m\u0065ssages":[{"r\u006fle":"user","content":"escaped keys"}]}`,
	`{"messages":[1]}`,
	`{"messages":5}`,
	`{"messages":[{"role":"user","content":5}]}`,
	`{"messages":[{"role":"assistant","tool_calls":[1]}]}`,
	`[1]`,
	`{"messages":`,
	`{"messages":[{"role":"user","content":` + nested(jsonx.MaxDepth-3, false) + `}]}`,
	`{"messages":` + nested(jsonx.MaxDepth, false) + `}`,
	`{"messages":[{"role":"user","content":"` + strings.Repeat("[", 5000) + `"}]}`,
	strings.Repeat("[", 2000),
	`{"messages":[],"messages":[{"role":"user","content":"x"}]}`,
	`{"messages":[{"role":"user","content":"x","role":"system"}]}`,
	`{"messages":[{"role":"assistant","tool_calls":[{"id":"a","id":"b"}]}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a`,
	// the members recall decides from: tool_choice, n, the tools' names
	`{"messages":[],"tool_choice":"none","tool_choice":"auto","n":1,"n":2}`,
	`{"messages":[],"tool_choice":{"type":"function","type":"none","function":{"name":"f"}},"tools":[{"type":"function","function":{"name":"a","name":"b"}}]}`,
	`{"messages":[],"tools":[1,{"function":5},{"function":{"name":"f"},"function":{}}],"tool_choice":{"x":1,"x":2}}`,
}

// FuzzParseChatRequest holds the Chat Completions skim to the contract of the others: it never
// panics, refuses only with a *BodyError of a known kind (ErrTooDeep exactly past the depth
// limit), reads the roles and the model a last-key-wins upstream reads, renders neutral items
// that are JSON, and splices messages back byte for byte.
func FuzzParseChatRequest(f *testing.F) {
	for _, s := range chatSeeds {
		f.Add([]byte(s))
	}
	f.Add(chatAgentBody(2 << 10))
	f.Add(chatAgentBody(8 << 10)[:5000]) // truncated mid-history
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseChatRequest(body)
		checkSkimError(t, body, err)
		sameChatAsTwoPass(t, body, r, err)
		if err != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		for i, m := range r.Messages {
			if !json.Valid(m.Raw) {
				t.Fatalf("message %d raw %q is not JSON", i, m.Raw)
			}
			if role, ok := jsonString(lastWins(t, m.Raw)["role"]); ok && role != m.Role && utf8.ValidString(m.Role) {
				t.Fatalf("message %d: compactd read role %q, a last-key-wins upstream reads %q", i, m.Role, role)
			}
		}
		if model, ok := jsonString(lastWins(t, body)["model"]); ok && model != r.Model {
			t.Fatalf("compactd read model %q, a last-key-wins upstream reads %q", r.Model, model)
		}
		items, owner := ChatItems(r.Messages)
		if len(owner) != len(items) {
			t.Fatalf("%d owners for %d items", len(owner), len(items))
		}
		for k, it := range items {
			if !json.Valid(it.Raw) {
				t.Fatalf("neutral item %d %q of %q is not JSON", k, it.Raw, body)
			}
			if k > 0 && owner[k] < owner[k-1] {
				t.Fatalf("owners out of order: %v", owner)
			}
		}
		all := make([]int, len(r.Messages))
		for i := range all {
			all[i] = i
		}
		dup := duplicateKeys(body)
		for _, idx := range [][]int{all, reversed(all), nil} {
			raws := make([][]byte, len(idx))
			for j, i := range idx {
				raws[j] = r.Messages[i].Raw
			}
			out := r.WithMessages(raws)
			if !json.Valid(out) {
				t.Fatalf("WithMessages(%v) of %q = %q: invalid JSON", idx, body, out)
			}
			if dup {
				continue
			}
			r2, err := ParseChatRequest(out)
			if err != nil {
				t.Fatalf("WithMessages output %q does not parse: %v", out, err)
			}
			if len(r2.Messages) != len(idx) {
				t.Fatalf("round trip of %q: %d messages, want %d (out %q)", body, len(r2.Messages), len(idx), out)
			}
			for j, i := range idx {
				if !bytes.Equal(r2.Messages[j].Raw, r.Messages[i].Raw) {
					t.Fatalf("round trip message %d = %q, want %q", j, r2.Messages[j].Raw, r.Messages[i].Raw)
				}
			}
			if r2.Model != r.Model || r2.Stream != r.Stream || r2.IncludeUsage != r.IncludeUsage || !bytes.Equal(r2.Tools, r.Tools) {
				t.Fatalf("top-level fields changed: %q -> %q", body, out)
			}
		}
	})
}
