package api

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestParseMessagesRequest(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantErr bool
		roles   []string
		blocks  []BlockRef
	}{
		{name: "not json", body: `{"messages":`, wantErr: true},
		{name: "messages not list", body: `{"messages":{}}`, wantErr: true},
		{name: "message not object", body: `{"messages":[1]}`, wantErr: true},
		{name: "string content", body: `{"messages":[{"role":"user","content":"hi"}]}`, roles: []string{"user"}},
		{
			name: "compaction blocks",
			body: `{"model":"m","stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},` +
				`{"role":"assistant","content":[{"type":"compaction","content":"s","encrypted_content":"e"},{"type":"text","text":"b"}]},` +
				`{"role":"user","content":[{"type":"text","text":"c"},{"type":"compaction","content":null}]}]}`,
			roles:  []string{"user", "assistant", "user"},
			blocks: []BlockRef{{1, 0}, {2, 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseMessagesRequest([]byte(tt.body))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			var roles []string
			for _, m := range r.Messages {
				roles = append(roles, m.Role)
				for _, b := range m.Blocks {
					if !json.Valid(b.Raw) {
						t.Errorf("block %q is not JSON", b.Raw)
					}
				}
			}
			if !reflect.DeepEqual(roles, tt.roles) || !reflect.DeepEqual(r.Blocks, tt.blocks) {
				t.Errorf("roles %v blocks %v, want %v %v", roles, r.Blocks, tt.roles, tt.blocks)
			}
		})
	}
}

func TestMessagesRewrite(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"context_management":{"edits":[]},"unknown":{"x":[1,2]}}`
	r, err := ParseMessagesRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		changes []Member
		want    string
	}{
		{"none", nil, body},
		{"replace", []Member{{"messages", []byte(`[]`)}}, `{"model":"m","messages":[],"context_management":{"edits":[]},"unknown":{"x":[1,2]}}`},
		{"remove", []Member{{"context_management", nil}}, `{"model":"m","messages":[{"role":"user","content":"hi"}],"unknown":{"x":[1,2]}}`},
		{"remove absent, add", []Member{{"compaction", nil}, {"stream", []byte("true")}}, body[:len(body)-1] + `,"stream":true}`},
		{"remove first", []Member{{"model", nil}}, `{"messages":[{"role":"user","content":"hi"}],"context_management":{"edits":[]},"unknown":{"x":[1,2]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(r.Rewrite(tt.changes...)); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestParseMessagesContextManagement(t *testing.T) {
	tests := []struct {
		name, cm string
		wantErr  string // substring of the error message; "" = valid
		check    func(*ContextManagement) bool
	}{
		{"absent", ``, "", func(c *ContextManagement) bool { return c == nil }},
		{"compact defaults", `{"edits":[{"type":"compact_20260112"}]}`, "",
			func(c *ContextManagement) bool {
				return c.Compact.Trigger == DefaultCompactTrigger && !c.Compact.Pause && len(c.Others) == 0
			}},
		{"compact full", `{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":50000},"pause_after_compaction":true,"instructions":" be brief "}]}`, "",
			func(c *ContextManagement) bool {
				return c.Compact.Trigger == 50000 && c.Compact.Pause && c.Compact.Instructions == "be brief"
			}},
		{"nulls", `{"edits":[{"type":"compact_20260112","trigger":null,"pause_after_compaction":null,"instructions":null}]}`, "",
			func(c *ContextManagement) bool { return c.Compact.Trigger == DefaultCompactTrigger }},
		{"claude code", `{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}`, "",
			func(c *ContextManagement) bool {
				return c.ClearThinking.KeepAll && len(c.Others) == 1 && c.Compact == nil
			}},
		{"thinking turns", `{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":2}}]}`, "",
			func(c *ContextManagement) bool { return c.ClearThinking.KeepTurns == 2 }},
		{"tool uses", `{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":5},"keep":{"type":"tool_uses","value":1},"exclude_tools":["Read"],"clear_tool_inputs":["Bash"],"clear_at_least":{"type":"input_tokens","value":10}}]}`, "",
			func(c *ContextManagement) bool {
				e := c.ClearToolUses
				return e.TriggerToolUses == 5 && e.TriggerInputTokens == 0 && e.Keep == 1 && e.ClearAtLeast == 10 &&
					reflect.DeepEqual(e.ExcludeTools, []string{"Read"}) && reflect.DeepEqual(e.ClearInputsOf, []string{"Bash"})
			}},
		{"not object", `[]`, "context_management: Input should be a valid dictionary", nil},
		{"extra top", `{"edits":[],"x":1}`, "context_management.x: Extra inputs are not permitted", nil},
		{"below minimum", `{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":49999}}]}`, "edits.0.trigger.value: Input should be greater than or equal to 50000", nil},
		{"fractional", `{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":60000.5}}]}`, "valid integer", nil},
		{"wrong trigger type", `{"edits":[{"type":"compact_20260112","trigger":{"type":"tool_uses","value":60000}}]}`, "trigger.type", nil},
		{"missing value", `{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens"}}]}`, "trigger.value: Field required", nil},
		{"duplicate", `{"edits":[{"type":"compact_20260112"},{"type":"compact_20260112"}]}`, "edits.1.type", nil},
		{"unknown type", `{"edits":[{"type":"compact_1999"}]}`, "does not match any of the expected tags", nil},
		{"instructions type", `{"edits":[{"type":"compact_20260112","instructions":5}]}`, "instructions: Input should be a valid string", nil},
		{"keep invalid", `{"edits":[{"type":"clear_thinking_20251015","keep":"some"}]}`, "keep", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cm, e := ParseMessagesContextManagement([]byte(tt.cm))
			if tt.wantErr != "" {
				if e == nil || e.Status != http.StatusBadRequest || !strings.Contains(e.Message, tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", e, tt.wantErr)
				}
				return
			}
			if e != nil {
				t.Fatalf("unexpected error %v", e)
			}
			if !tt.check(cm) {
				t.Errorf("parsed %+v", cm)
			}
		})
	}
}

func TestParseCompactionConfig(t *testing.T) {
	tests := []struct{ raw, instructions, wantErr string }{
		{`{"type":"summarize"}`, "", ""},
		{`{"type":"summarize","instructions":"  focus on tests "}`, "focus on tests", ""},
		{`{"type":"summarize","instructions":"   "}`, "", ""},
		{`{"type":"summarize","instructions":null}`, "", ""},
		{`{"type":"drop"}`, "", "compaction.type"},
		{`{"type":"summarize","x":1}`, "", "Extra inputs"},
		{`"summarize"`, "", "valid dictionary"},
	}
	for _, tt := range tests {
		in, e := ParseCompactionConfig([]byte(tt.raw))
		if tt.wantErr != "" {
			if e == nil || !strings.Contains(e.Message, tt.wantErr) {
				t.Errorf("%s: err = %v, want %q", tt.raw, e, tt.wantErr)
			}
			continue
		}
		if e != nil || in != tt.instructions {
			t.Errorf("%s: got %q, %v", tt.raw, in, e)
		}
	}
}

func TestBetas(t *testing.T) {
	h := http.Header{}
	h.Add("Anthropic-Beta", "a, compact-2026-01-12 ,b")
	h.Add("Anthropic-Beta", "c")
	if got := Betas(h); !reflect.DeepEqual(got, []string{"a", BetaCompact, "b", "c"}) {
		t.Fatalf("Betas = %v", got)
	}
	if !DropBetas(h, BetaCompact) || h.Get("Anthropic-Beta") != "a,b,c" || len(h.Values("Anthropic-Beta")) != 1 {
		t.Fatalf("after DropBetas: %v", h.Values("Anthropic-Beta"))
	}
	if DropBetas(h, "absent") {
		t.Fatal("DropBetas reported a change that did not happen")
	}
	h2 := http.Header{"Anthropic-Beta": {BetaCompact}}
	if DropBetas(h2, BetaCompact); len(h2.Values("Anthropic-Beta")) != 0 {
		t.Fatalf("an empty beta header was left: %v", h2)
	}
}

func TestMessageItems(t *testing.T) {
	r, err := ParseMessagesRequest([]byte(`{"messages":[` +
		`{"role":"user","content":"fix the build"},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"redacted_thinking","data":"x"},{"type":"text","text":"running"},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"make"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"},{"type":"text","text":"thanks"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	items := MessageItems(r.Messages)
	var got []string
	for _, it := range items {
		if !json.Valid(it.Raw) {
			t.Fatalf("item %s is not JSON", it.Raw)
		}
		got = append(got, it.Type+"/"+it.Role)
	}
	want := []string{"message/user", "reasoning/", "message/assistant", "function_call/", "function_call_output/", "message/user"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("items = %v, want %v", got, want)
	}
	if a := gjson.GetBytes(items[3].Raw, "arguments").Str; a != `{"command":"make"}` {
		t.Errorf("function_call arguments = %q", a)
	}
}

func TestClearThinkingApply(t *testing.T) {
	turn := func(i string) string {
		return `{"role":"assistant","content":[{"type":"thinking","thinking":"t` + i + `","signature":"s"},{"type":"text","text":"a` + i + `"}]}`
	}
	r, _ := ParseMessagesRequest([]byte(`{"messages":[{"role":"user","content":"q"},` + turn("1") + `,{"role":"user","content":"q"},` +
		`{"role":"assistant","content":[{"type":"redacted_thinking","data":"x"}]},{"role":"user","content":"q"},` + turn("3") + `]}`))
	count := func(b []byte) int { return len(b) }
	tests := []struct {
		edit        ClearThinkingEdit
		wantCleared int
		wantMsgs    int
	}{
		{ClearThinkingEdit{KeepAll: true}, 0, 6},
		{ClearThinkingEdit{KeepTurns: 3}, 0, 6},
		{ClearThinkingEdit{KeepTurns: 1}, 2, 5}, // the thinking-only turn disappears
		{ClearThinkingEdit{KeepTurns: 2}, 1, 6},
	}
	for _, tt := range tests {
		out, ae := tt.edit.Apply(r.Messages, count)
		cleared := 0
		if ae != nil {
			cleared = ae.ClearedThinkingTurns
			if ae.ClearedInputTokens <= 0 {
				t.Errorf("%+v: no tokens cleared", tt.edit)
			}
		}
		if cleared != tt.wantCleared || len(out) != tt.wantMsgs {
			t.Errorf("%+v: cleared %d turns, %d messages; want %d, %d", tt.edit, cleared, len(out), tt.wantCleared, tt.wantMsgs)
		}
		if last := out[len(out)-1]; last.Blocks[0].Type != "thinking" {
			t.Errorf("%+v: the newest thinking turn was cleared", tt.edit)
		}
	}
}

func TestClearToolUsesApply(t *testing.T) {
	var msgs []string
	for _, id := range []string{"1", "2", "3"} {
		name := "Bash"
		if id == "2" {
			name = "Read"
		}
		msgs = append(msgs,
			`{"role":"assistant","content":[{"type":"tool_use","id":"t`+id+`","name":"`+name+`","input":{"c":"`+strings.Repeat("x", 50)+`"}}]}`,
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t`+id+`","content":"`+strings.Repeat("out", 50)+`"}]}`)
	}
	r, _ := ParseMessagesRequest([]byte(`{"messages":[` + strings.Join(msgs, ",") + `]}`))
	count := func(b []byte) int { return len(b) }
	tests := []struct {
		name        string
		edit        ClearToolUsesEdit
		input       int
		wantCleared int
		cleared     []string // tool_use ids whose results are cleared
		inputs      []string // tool_use ids whose inputs are cleared
	}{
		{"below trigger", ClearToolUsesEdit{TriggerInputTokens: 1000, Keep: 1}, 999, 0, nil, nil},
		{"keep one", ClearToolUsesEdit{TriggerInputTokens: 1000, Keep: 1}, 1001, 2, []string{"t1", "t2"}, nil},
		{"exclude Read", ClearToolUsesEdit{TriggerToolUses: 2, Keep: 1, ExcludeTools: []string{"Read"}}, 0, 1, []string{"t1"}, nil},
		{"inputs", ClearToolUsesEdit{TriggerToolUses: 2, Keep: 1, ClearInputs: true}, 0, 2, []string{"t1", "t2"}, []string{"t1", "t2"}},
		{"clear at least", ClearToolUsesEdit{TriggerToolUses: 2, Keep: 1, ClearAtLeast: 100000}, 0, 0, nil, nil},
		{"keep all", ClearToolUsesEdit{TriggerToolUses: 2, Keep: 3}, 0, 0, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, ae := tt.edit.Apply(r.Messages, tt.input, count)
			got := 0
			if ae != nil {
				got = ae.ClearedToolUses
			}
			if got != tt.wantCleared {
				t.Fatalf("cleared %d tool uses, want %d", got, tt.wantCleared)
			}
			var cleared, inputs []string
			for _, m := range out {
				for _, b := range m.Blocks {
					v := gjson.ParseBytes(b.Raw)
					if b.Type == "tool_result" && v.Get("content").Str == ClearedToolResult {
						cleared = append(cleared, v.Get("tool_use_id").Str)
					}
					if b.Type == "tool_use" && v.Get("input").Raw == "{}" {
						inputs = append(inputs, v.Get("id").Str)
					}
				}
				if !json.Valid(m.Raw) {
					t.Fatalf("message %s is not JSON", m.Raw)
				}
			}
			if !reflect.DeepEqual(cleared, tt.cleared) || !reflect.DeepEqual(inputs, tt.inputs) {
				t.Fatalf("cleared results %v inputs %v, want %v %v", cleared, inputs, tt.cleared, tt.inputs)
			}
			// Applying again changes nothing more: the edit is stable turn after turn.
			if again, ae2 := tt.edit.Apply(out, tt.input, count); ae2 != nil && ae2.ClearedToolUses != 0 || len(again) != len(out) {
				t.Fatalf("second application cleared again: %+v", ae2)
			}
		})
	}
}

func TestAppliedEditsJSON(t *testing.T) {
	got := string(AppliedEditsJSON([]AppliedEdit{
		{Type: EditClearThinking, ClearedInputTokens: 10, ClearedThinkingTurns: 2},
		{Type: EditClearToolUses, ClearedInputTokens: 5, ClearedToolUses: 1},
	}))
	want := `{"applied_edits":[{"type":"clear_thinking_20251015","cleared_input_tokens":10,"cleared_thinking_turns":2},` +
		`{"type":"clear_tool_uses_20250919","cleared_input_tokens":5,"cleared_tool_uses":1}]}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestBuildersMessages(t *testing.T) {
	for _, b := range [][]byte{
		AnthropicMessage("user", [][]byte{TextBlock("a <b>")}),
		CompactionBlock("s", "e", ""),
		CompactionBlock("s", "e", "sig"),
		[]byte(CompactionBlockStart),
	} {
		if !json.Valid(b) {
			t.Errorf("%s is not JSON", b)
		}
	}
	if gjson.GetBytes(CompactionBlock("s", "e", ""), "signature").Exists() {
		t.Error("an unsigned block carries a signature field")
	}
}

func BenchmarkParseMessagesRequest(b *testing.B) {
	var msgs []string
	for i := 0; i < 200; i++ {
		msgs = append(msgs, `{"role":"user","content":[{"type":"text","text":"`+strings.Repeat("word ", 500)+`"}]}`,
			`{"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"t","name":"Bash","input":{"command":"ls"}}]}`)
	}
	body := []byte(`{"model":"m","max_tokens":10,"messages":[` + strings.Join(msgs, ",") + `]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseMessagesRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}
