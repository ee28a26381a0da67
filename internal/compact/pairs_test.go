package compact

import (
	"fmt"
	"testing"

	"github.com/compactd/compactd/internal/api"
)

func units(raws ...string) []api.Item {
	out := make([]api.Item, len(raws))
	for i, r := range raws {
		out[i] = api.Item{Raw: []byte(r)}
	}
	return out
}

// cuts renders SafeCuts as a string of 'y' (safe) and '.' (unsafe), cut 0 first.
func cuts(safe []bool) string {
	b := make([]byte, len(safe))
	for i, s := range safe {
		b[i] = '.'
		if s {
			b[i] = 'y'
		}
	}
	return string(b)
}

// Every dialect's call/result pairs, as each API's units: a cut between a call and its result
// is unsafe, every other cut is safe (cut m keeps units[m:] verbatim).
func TestSafeCutsPerDialect(t *testing.T) {
	tests := []struct {
		name  string
		units []api.Item
		want  string
	}{
		{"messages: tool_use then tool_result", units(
			`{"role":"user","content":"read it"}`,
			`{"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"toolu_A","name":"Read","input":{}}]}`,
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_A","content":"x"}]}`,
			`{"role":"assistant","content":[{"type":"text","text":"done"}]}`,
			`{"role":"user","content":"next"}`,
		), "yy.yyy"},
		{"messages: parallel tool uses, MCP and server tools", units(
			`{"role":"user","content":"go"}`,
			`{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"x","input":{}},{"type":"mcp_tool_use","id":"b","name":"y","server_name":"s","input":{}},{"type":"server_tool_use","id":"c","name":"web_search","input":{}},{"type":"web_search_tool_result","tool_use_id":"c","content":[]}]}`,
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"a"},{"type":"text","text":"and"}]}`,
			`{"role":"assistant","content":"thinking more"}`,
			`{"role":"user","content":[{"type":"mcp_tool_result","tool_use_id":"b","content":"late"}]}`,
		), "yy...y"},
		{"messages: Claude Code's in-message system entry", units(
			`{"role":"user","content":"read"}`,
			`{"role":"system","content":"deferred tools: WebFetch"}`,
			`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{}}]}`,
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"1"}]}`,
		), "yyy.y"},
		{"responses: function, custom, local shell, computer, shell, apply_patch", units(
			`{"type":"message","role":"user","content":"go"}`,
			`{"type":"function_call","call_id":"f1","name":"a","arguments":"{}"}`,
			`{"type":"function_call_output","call_id":"f1","output":"ok"}`,
			`{"type":"custom_tool_call","call_id":"c1","name":"b","input":""}`,
			`{"type":"custom_tool_call_output","call_id":"c1","output":"ok"}`,
			`{"type":"local_shell_call","id":"ls_1","call_id":"l1","action":{},"status":"completed"}`,
			`{"type":"local_shell_call_output","id":"l1","output":"ok"}`,
			`{"type":"computer_call","id":"cu_1","call_id":"k1","action":{},"pending_safety_checks":[],"status":"completed"}`,
			`{"type":"computer_call_output","call_id":"k1","output":{}}`,
			`{"type":"shell_call","call_id":"s1","action":{}}`,
			`{"type":"shell_call_output","call_id":"s1","output":[]}`,
			`{"type":"apply_patch_call","call_id":"p1","operation":{},"status":"completed"}`,
			`{"type":"apply_patch_call_output","call_id":"p1","status":"completed"}`,
		), "yy.y.y.y.y.y.y"},
		{"responses: MCP approval pairs, self-contained server calls", units(
			`{"type":"mcp_approval_request","id":"mcpr_1","name":"x","server_label":"s","arguments":"{}"}`,
			`{"type":"message","role":"user","content":"approve?"}`,
			`{"type":"mcp_approval_response","approval_request_id":"mcpr_1","approve":true}`,
			`{"type":"mcp_call","id":"mcp_1","name":"x","server_label":"s","arguments":"{}","output":"done"}`,
			`{"type":"web_search_call","id":"ws_1","status":"completed"}`,
		), "y..yyy"},
		{"responses: reasoning stays with the item after it", units(
			`{"type":"message","role":"user","content":"go"}`,
			`{"type":"reasoning","id":"rs_1","summary":[]}`,
			`{"type":"function_call","call_id":"f1","name":"a","arguments":"{}"}`,
			`{"type":"function_call_output","call_id":"f1","output":"ok"}`,
			`{"type":"reasoning","id":"rs_2","summary":[]}`,
		), "yy..yy"},
		{"chat: tool_calls answered by tool messages", units(
			`{"role":"system","content":"be brief"}`,
			`{"role":"user","content":"go"}`,
			`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"a","arguments":"{}"}},{"id":"call_2","type":"function","function":{"name":"b","arguments":"{}"}}]}`,
			`{"role":"tool","tool_call_id":"call_1","content":"1"}`,
			`{"role":"tool","tool_call_id":"call_2","content":"2"}`,
			`{"role":"assistant","content":"done"}`,
		), "yyy..yy"},
		{"chat: the deprecated function_call pairs by name", units(
			`{"role":"user","content":"go"}`,
			`{"role":"assistant","content":null,"function_call":{"name":"lookup","arguments":"{}"}}`,
			`{"role":"function","name":"lookup","content":"x"}`,
			`{"role":"assistant","content":null,"function_call":{"name":"lookup","arguments":"{}"}}`,
			`{"role":"function","name":"lookup","content":"y"}`,
		), "yy.y.y"},
		{"a call nobody answers constrains nothing", units(
			`{"role":"user","content":"go"}`,
			`{"type":"function_call","call_id":"orphan","name":"a","arguments":"{}"}`,
			`{"role":"user","content":"again"}`,
		), "yyyy"},
		{"empty", nil, "y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cuts(SafeCuts(tt.units)); got != tt.want {
				t.Errorf("SafeCuts = %s, want %s", got, tt.want)
			}
		})
	}
}

// The neutral items the engine summarises (api.MessageItems of Messages messages) pair the same
// way as the messages they come from.
func TestSafeCutsOfNeutralMessageItems(t *testing.T) {
	msgs := []api.Message{
		api.NewMessage("user", []api.Block{{Raw: []byte(`{"type":"text","text":"go"}`), Type: "text"}}),
		api.NewMessage("assistant", []api.Block{{Raw: []byte(`{"type":"tool_use","id":"toolu_1","name":"Read","input":{}}`), Type: "tool_use"}}),
		api.NewMessage("user", []api.Block{{Raw: []byte(`{"type":"tool_result","tool_use_id":"toolu_1","content":"1"}`), Type: "tool_result"}}),
	}
	items := api.MessageItems(msgs)
	if got, want := cuts(SafeCuts(items)), "yy.y"; got != want {
		t.Errorf("SafeCuts of %d neutral items = %s, want %s", len(items), got, want)
	}
}

func TestSafeCut(t *testing.T) {
	safe := []bool{true, true, false, false, true, false}
	for n, want := range []int{0, 1, 1, 1, 4, 4, 4, 4} {
		if got := SafeCut(safe, n); got != want {
			t.Errorf("SafeCut(%d) = %d, want %d", n, got, want)
		}
	}
}

// SafeCuts is one pass over the units: a long agent session (thousands of tool rounds) is cut
// without anything quadratic, and hostile ids cost no more than ordinary ones.
func TestSafeCutsLongSession(t *testing.T) {
	var raws []string
	for i := range 5000 {
		id := fmt.Sprintf("toolu_%d", i)
		raws = append(raws,
			`{"role":"assistant","content":[{"type":"tool_use","id":"`+id+`","name":"Read","input":{}}]}`,
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"`+id+`","content":"x"}]}`)
	}
	safe := SafeCuts(units(raws...))
	for m, s := range safe {
		if want := m%2 == 0; s != want {
			t.Fatalf("cut %d: safe %v, want %v", m, s, want)
		}
	}
}
