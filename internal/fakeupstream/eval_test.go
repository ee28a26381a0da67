package fakeupstream

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// testAnswerer answers "What is `KEY`?" with the value of a "KEY=VALUE" in context.
func testAnswerer(question, context string) (string, string, bool) {
	key, ok := strings.CutPrefix(question, "What is `")
	if !ok {
		return "", "", false
	}
	key, _, _ = strings.Cut(key, "`")
	for _, l := range strings.Split(context, "\n") {
		if v, ok := strings.CutPrefix(l, key+"="); ok {
			return v, key, true
		}
	}
	return "", key, true
}

func responsesBody(t *testing.T, input []any, tools ...any) string {
	t.Helper()
	b := map[string]any{"model": "m", "input": input}
	if tools != nil {
		b["tools"] = tools
	}
	out, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func user(text string) any { return map[string]any{"type": "message", "role": "user", "content": text} }

// TestEvalAnswerer checks the fake model's reading of its context: it answers what is there,
// calls the offered recall tool when it is not, answers "unknown" once a tool result came back
// or when no recall tool is offered, and leaves other turns to MOCK-REPLY.
func TestEvalAnswerer(t *testing.T) {
	recall := map[string]any{"type": "function", "name": "compactd_recall", "parameters": map[string]any{"type": "object"}}
	other := map[string]any{"type": "function", "name": "exec_command", "parameters": map[string]any{"type": "object"}}
	toolOut := map[string]any{"type": "function_call_output", "call_id": "c1", "output": "no match"}
	toolOutHit := map[string]any{"type": "function_call_output", "call_id": "c1", "output": "excerpt:\nport=8443\n"}
	call := map[string]any{"type": "function_call", "call_id": "c1", "name": "compactd_recall", "arguments": `{"query":"port"}`}
	q := user("What is `port`? Reply with the value only.")
	for _, tc := range []struct {
		name      string
		input     []any
		tools     []any
		text      string // the reply text, or "" for a function call
		callQuery string
	}{
		{"found in context", []any{user("deploy with\nport=8443\nthen"), q}, []any{recall}, "8443", ""},
		{"not found, recall offered", []any{user("nothing here"), q}, []any{other, recall}, "", "port"},
		{"not found, no recall tool", []any{user("nothing here"), q}, []any{other}, Unknown, ""},
		{"after a fruitless recall", []any{user("nothing here"), q, call, toolOut}, []any{recall}, Unknown, ""},
		{"after a recall that found it", []any{q, call, toolOutHit}, []any{recall}, "8443", ""},
		{"not a question", []any{user("port=1\nfix the build")}, []any{recall}, "MOCK-REPLY 1: port=1\nfix the build", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, base := start(t, Options{Answer: testAnswerer})
			status, _, body := post(t, base+"/v1/responses", responsesBody(t, tc.input, tc.tools...))
			if status != 200 {
				t.Fatalf("status %d: %s", status, body)
			}
			out := gjson.GetBytes(body, "output.0")
			if tc.text != "" {
				if got := out.Get("content.0.text").Str; got != tc.text {
					t.Errorf("reply %q, want %q", got, tc.text)
				}
				return
			}
			if out.Get("type").Str != "function_call" || out.Get("name").Str != "compactd_recall" {
				t.Fatalf("want a compactd_recall call, got %s", out.Raw)
			}
			if got := gjson.Get(out.Get("arguments").Str, "query").Str; got != tc.callQuery {
				t.Errorf("query %q, want %q", got, tc.callQuery)
			}
		})
	}
}

func TestEvalLossySummaries(t *testing.T) {
	var b strings.Builder
	b.WriteString("[user] Round 1: fix the loader. It panics on empty input.\n\n[tool output call_1] ")
	for i := range 200 {
		b.WriteString("line " + strings.Repeat("x", i%7) + " value_" + string(rune('a'+i%26)) + "=" + strings.Repeat("9", 1+i%5) + "\n")
	}
	transcript := b.String()
	f := LossySummaries(Lossy{Seed: 1, Keep: 0.5, MaxLines: 20})
	s1, s2 := f(transcript), f(transcript)
	if s1 != s2 {
		t.Fatal("the same transcript gave two summaries")
	}
	if !strings.HasPrefix(s1, LossySummaryPrefix) || !strings.Contains(s1, "user asked: Round 1: fix the loader") {
		t.Errorf("summary lacks its prefix or the user's request:\n%s", s1)
	}
	details := strings.Count(s1, "\n- ") - 1 // minus the user line
	if details <= 0 || details > 20 {
		t.Errorf("%d detail lines kept, want 1..20", details)
	}
	if other := LossySummaries(Lossy{Seed: 2, Keep: 0.5, MaxLines: 20})(transcript); other == s1 {
		t.Error("another seed dropped the same details")
	}
	if all := LossySummaries(Lossy{Seed: 1, Keep: 1, MaxLines: 1000})(transcript); strings.Count(all, "\n- ") <= details+1 {
		t.Error("Keep 1 kept no more than Keep 0.5")
	}

	// The gap check lists only detail lines the summary and ledger lack, verbatim.
	gap := LossySummaries(Lossy{Seed: 1, GapKeep: 1})(gapCheckLead + "\nsummary: port=8443 is set\n\n[tool output c] port=8443\ntimeout=37s\n")
	if gap != "- timeout=37s" {
		t.Errorf("gap check = %q, want only the missing line", gap)
	}
	if got := LossySummaries(Lossy{Seed: 1})(gapCheckLead + "\nport=8443\n\n[tool output c] port=8443\n"); got != "- nothing missing" {
		t.Errorf("gap check with nothing missing = %q", got)
	}
}

// TestEvalAnswererMessages is TestEvalAnswerer on /v1/messages: the fake reads the system prompt,
// text blocks and tool_result contents (string or text blocks) of a Messages request, calls a
// recall tool offered in Messages form with a tool_use block, and answers "unknown" once a
// tool_result came back without the value.
func TestEvalAnswererMessages(t *testing.T) {
	recall := map[string]any{"name": "compactd_recall", "input_schema": map[string]any{"type": "object"}}
	other := map[string]any{"name": "Read", "input_schema": map[string]any{"type": "object"}}
	text := func(s string) any { return map[string]any{"type": "text", "text": s} }
	msg := func(role string, blocks ...any) any { return map[string]any{"role": role, "content": blocks} }
	use := msg("assistant", map[string]any{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": map[string]any{"file_path": "/x"}})
	q := msg("user", text("What is `port`? Reply with the value only."))
	for _, tc := range []struct {
		name   string
		system any
		msgs   []any
		tools  []any
		text   string // the reply text, or "" for a tool_use of compactd_recall
	}{
		{"in a tool_result string", nil, []any{msg("user", text("go")), use,
			msg("user", map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a\nport=8443\n"}), q}, []any{other}, "8443"},
		{"in tool_result text blocks", nil, []any{msg("user", text("go")), use,
			msg("user", map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": []any{text("port=9443")}}), q}, []any{other}, "9443"},
		{"in the system prompt", []any{text("port=7443")}, []any{q}, []any{other}, "7443"},
		{"in a handoff text block", nil, []any{msg("user", text("<summary>\nport=6443\n</summary>")), msg("assistant", text("ok")), q}, []any{other}, "6443"},
		{"not found, recall offered", nil, []any{msg("user", text("nothing")), q}, []any{other, recall}, ""},
		{"not found, no recall tool", nil, []any{msg("user", text("nothing")), q}, []any{other}, Unknown},
		{"after a fruitless recall", nil, []any{q, msg("assistant", map[string]any{"type": "tool_use", "id": "toolu_2", "name": "compactd_recall", "input": map[string]any{"query": "port"}}),
			msg("user", map[string]any{"type": "tool_result", "tool_use_id": "toolu_2", "content": "no match"})}, []any{recall}, Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, base := start(t, Options{Answer: testAnswerer})
			b := map[string]any{"model": "claude-fake", "max_tokens": 64, "messages": tc.msgs, "tools": tc.tools}
			if tc.system != nil {
				b["system"] = tc.system
			}
			raw, _ := json.Marshal(b)
			status, _, body := post(t, base+"/v1/messages", string(raw), "anthropic-version", "2023-06-01")
			if status != 200 {
				t.Fatalf("status %d: %s", status, body)
			}
			out := gjson.GetBytes(body, "content.0")
			if tc.text != "" {
				if out.Get("type").Str != "text" || out.Get("text").Str != tc.text {
					t.Errorf("reply %s, want text %q", out.Raw, tc.text)
				}
				return
			}
			if out.Get("type").Str != "tool_use" || out.Get("name").Str != "compactd_recall" || out.Get("input.query").Str != "port" {
				t.Errorf("want a compactd_recall tool_use for port, got %s", out.Raw)
			}
		})
	}
}

// TestEvalAnswererChat is TestEvalAnswerer on /v1/chat/completions, the route compactd eval
// --api chat sends its sessions to: the fake reads string and part contents and "tool"
// messages, calls a recall function tool (Chat's {"type":"function","function":{…}} form) with a
// tool_calls reply when the value is missing, and after the recall's "tool" message answers from
// it or says "unknown".
func TestEvalAnswererChat(t *testing.T) {
	fn := func(name string) any {
		return map[string]any{"type": "function", "function": map[string]any{"name": name, "parameters": map[string]any{"type": "object"}}}
	}
	recall, other := fn("compactd_recall"), fn("run_shell_command")
	msg := func(role string, content any) any { return map[string]any{"role": role, "content": content} }
	calls := func(id, name string) any {
		return map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": id, "type": "function",
			"function": map[string]any{"name": name, "arguments": `{}`}}}}
	}
	tool := func(id, content string) any {
		return map[string]any{"role": "tool", "tool_call_id": id, "content": content}
	}
	q := msg("user", "What is `port`? Reply with the value only.")
	for _, tc := range []struct {
		name  string
		msgs  []any
		tools []any
		text  string // the reply, or "" for a compactd_recall tool call
	}{
		{"in a tool message", []any{msg("user", "go"), calls("c1", "run_shell_command"), tool("c1", "a\nport=8443\n"), q}, []any{other, recall}, "8443"},
		{"in content parts", []any{msg("user", []any{map[string]any{"type": "text", "text": "port=9443"}}), q}, []any{other}, "9443"},
		{"not found, recall offered", []any{msg("user", "nothing"), q}, []any{other, recall}, ""},
		{"not found, no recall tool", []any{msg("user", "nothing"), q}, []any{other}, Unknown},
		{"after a fruitless recall", []any{q, calls("c2", "compactd_recall"), tool("c2", "no match")}, []any{recall}, Unknown},
		{"after a recall that found it", []any{q, calls("c3", "compactd_recall"), tool("c3", "excerpt:\nport=7443\n")}, []any{recall}, "7443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, base := start(t, Options{Answer: testAnswerer})
			raw, _ := json.Marshal(map[string]any{"model": "m", "messages": tc.msgs, "tools": tc.tools})
			status, _, body := post(t, base+"/v1/chat/completions", string(raw))
			if status != 200 {
				t.Fatalf("status %d: %s", status, body)
			}
			choice := gjson.GetBytes(body, "choices.0")
			if tc.text != "" {
				if got := choice.Get("message.content").Str; got != tc.text || choice.Get("finish_reason").Str != "stop" {
					t.Errorf("reply %s, want %q", choice.Raw, tc.text)
				}
				return
			}
			call := choice.Get("message.tool_calls.0.function")
			if choice.Get("finish_reason").Str != "tool_calls" || call.Get("name").Str != "compactd_recall" || gjson.Get(call.Get("arguments").Str, "query").Str != "port" {
				t.Errorf("want a compactd_recall call for port, got %s", choice.Raw)
			}
		})
	}
}
