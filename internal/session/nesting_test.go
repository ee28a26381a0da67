package session

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/stackcheck"
)

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestSessionToolingLinearInNesting parses, reduces and renders session logs whose records nest
// 100k levels deep, or whose tool arguments and outputs are strings holding 6 MB of "[" (JSON
// inside JSON strings, which the tooling decodes a second time). The session tooling decodes
// with encoding/json, whose scanner is iterative and refuses documents nested more than 10,000
// levels: so each log must be processed under the stack cap, with heap allocations a small
// multiple of its size, and still yield the events around the hostile records.
func TestSessionToolingLinearInNesting(t *testing.T) {
	const depth = 100_000
	deep := strings.Repeat("[", depth) + strings.Repeat("]", depth)
	brackets := strings.Repeat("[", 6<<20)
	codexItem := func(payload string) string {
		return `{"timestamp":"2026-03-14T09:30:14.814Z","type":"response_item","payload":` + payload + `}`
	}
	claudeLine := func(role, content string) string {
		return `{"type":"` + role + `","sessionId":"s1","cwd":"/w","timestamp":"2026-03-15T14:00:01Z","message":{"role":"` + role + `","content":` + content + `}}`
	}
	cases := []struct {
		name, format string
		lines        []string
	}{
		{"codex", "codex", []string{
			`{"timestamp":"2026-03-14T09:30:00Z","type":"session_meta","payload":{"id":"s1","cwd":"/w"}}`,
			codexItem(`{"type":"message","role":"user","content":[{"type":"input_text","text":"fix the parser"}]}`),
			codexItem(`{"type":"function_call","call_id":"c0","name":"shell","arguments":{"deep":` + deep + `}}`),
			codexItem(`{"type":"function_call","call_id":"c1","name":"exec_command","arguments":` + jsonString(`{"cmd":`+brackets) + `}`),
			codexItem(`{"type":"function_call_output","call_id":"c1","output":` + jsonString(`{"output":`+brackets) + `}`),
			codexItem(`{"type":"function_call","call_id":"c2","name":"apply_patch","arguments":` + jsonString(`{"input":`+brackets) + `}`),
			codexItem(`{"type":"function_call","call_id":"c3","name":"update_plan","arguments":` + jsonString(`{"plan":`+brackets) + `}`),
			codexItem(`{"type":"message","role":"user","content":[{"type":"input_text","text":"then run the tests"}]}`),
		}},
		{"claude", "claude", []string{
			claudeLine("user", jsonString("fix the parser")),
			claudeLine("assistant", `[{"type":"tool_use","id":"t0","name":"Bash","input":{"command":"ls","deep":`+deep+`}}]`),
			claudeLine("assistant", `[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"go test"}}]`),
			claudeLine("user", `[{"type":"tool_result","tool_use_id":"t1","content":`+jsonString(brackets)+`}]`),
			claudeLine("user", `[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":`+jsonString(`{"output":`+brackets)+`}]}]`),
			claudeLine("user", jsonString("then run the tests")),
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			log := strings.Join(tc.lines, "\n") + "\n"
			format, err := ParseFormat(tc.format)
			if err != nil {
				t.Fatal(err)
			}
			var s Session
			var md string
			var raw []string
			alloc := stackcheck.Run(func() {
				s, err = ParseSession(strings.NewReader(log), format)
				md = Reduce(s).Markdown()
				raw = RenderRaw([]Session{s}, 2000)
			})
			if err != nil {
				t.Fatal(err)
			}
			if limit := uint64(16*len(log) + 1<<20); alloc > limit {
				t.Errorf("allocated %d bytes for a %d-byte log, want at most %d", alloc, len(log), limit)
			}
			for _, want := range []string{"fix the parser", "then run the tests"} {
				if !strings.Contains(md, want) {
					t.Errorf("reduction lost the user message %q", want)
				}
			}
			if len(raw) == 0 {
				t.Error("RenderRaw rendered nothing")
			}
		})
	}
}
