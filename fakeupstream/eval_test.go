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
