package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/bench/cputime"
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
				if e == nil || AnthropicFault(e, "").Status != http.StatusBadRequest || !strings.Contains(AnthropicFault(e, "").Message, tt.wantErr) {
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
			if e == nil || !strings.Contains(AnthropicFault(e, "").Message, tt.wantErr) {
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

// claudeCodeBody is a /v1/messages body of about size bytes shaped like a Claude Code turn: a
// system prompt in cache-controlled text blocks, a few tools with JSON schemas, metadata, and a
// history of user prompts, assistant turns (thinking with a signature, text, a Bash or Read
// tool_use) and tool results (file contents and test logs with newlines, tabs and quotes to
// escape), ending in a user prompt. Deterministic: every run skims the same bytes.
func claudeCodeBody(size int) []byte {
	esc := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	code := "func (s *Server) handle(w http.ResponseWriter, r *http.Request) {\n\tif err := s.check(r); err != nil {\n\t\thttp.Error(w, \"bad request: \"+err.Error(), 400)\n\t\treturn\n\t}\n}\n"
	logs := "=== RUN   TestHandle\n--- FAIL: TestHandle (0.00s)\n    handler_test.go:42: got 500, want 400 <nil>\nFAIL\n"
	var b strings.Builder
	b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":32000,"stream":true,"system":[{"type":"text","text":"You are Claude Code, Anthropic's official CLI for Claude."},{"type":"text","text":`)
	b.WriteString(esc(strings.Repeat("You are an interactive CLI tool that helps users with software engineering tasks. ", min(12, 1+size>>12))))
	b.WriteString(`,"cache_control":{"type":"ephemeral"}}],"tools":[`)
	tools := []string{"Bash", "Read", "Edit", "Grep"}
	if size < 8<<10 {
		tools = tools[:1] // a first turn's body is mostly its preamble: keep it near the size asked
	}
	for i, name := range tools {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"name":"` + name + `","description":"Runs ` + name + ` in the user's workspace.","input_schema":{"type":"object","properties":{"command":{"type":"string","description":"The command"},"timeout":{"type":"number"}},"required":["command"],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}}`)
	}
	b.WriteString(`],"metadata":{"user_id":"user_0123456789abcdef_account__session_5f0c"},"messages":[`)
	b.WriteString(`{"role":"user","content":[{"type":"text","text":"<system-reminder>\nAs you answer the user's questions, you can use the following context.\n</system-reminder>"},{"type":"text","text":"The handler test fails; fix it."}]}`)
	for i := 0; b.Len() < size-200; i++ {
		id := fmt.Sprintf("toolu_%024d", i)
		result := code
		if i%2 == 1 {
			result = logs
		}
		fmt.Fprintf(&b, `,{"role":"assistant","content":[{"type":"thinking","thinking":"The test expects 400; step %d is to look at the handler.","signature":"EqQBCkYIBxgCKkA%060d"},{"type":"text","text":"Let me check."},{"type":"tool_use","id":"%s","name":"Bash","input":{"command":"go test ./... -run TestHandle","timeout":120000}}]}`, i, i, id)
		fmt.Fprintf(&b, `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"%s","content":[{"type":"text","text":%s}]}]}`, id, esc(strings.Repeat(result, 1+i%3)))
	}
	b.WriteString(`,{"role":"user","content":[{"type":"text","text":"go on","cache_control":{"type":"ephemeral"}}]}]}`)
	return []byte(b.String())
}

// BenchmarkParseMessagesRequest is the skim every /v1/messages turn pays: validate the JSON, read
// the top-level fields, and slice out every message and content block with its type. Plain is
// the long text-only history it always measured; 2KB and 2MB are Claude Code turns (a first one
// and a long session); StringContent a plain pass-through body whose one message is a string
// (rendered as a text block).
func BenchmarkParseMessagesRequest(b *testing.B) {
	var msgs []string
	for i := 0; i < 200; i++ {
		msgs = append(msgs, `{"role":"user","content":[{"type":"text","text":"`+strings.Repeat("word ", 500)+`"}]}`,
			`{"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"t","name":"Bash","input":{"command":"ls"}}]}`)
	}
	str, _ := json.Marshal(map[string]any{
		"model": "claude-sonnet-4-5", "max_tokens": 1024,
		"messages": []map[string]any{{"role": "user", "content": strings.Repeat("The build failed on step three. ", 50)}},
	})
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"Plain", []byte(`{"model":"m","max_tokens":10,"messages":[` + strings.Join(msgs, ",") + `]}`)},
		{"ClaudeCode2KB", claudeCodeBody(2 << 10)},
		{"ClaudeCode2MB", claudeCodeBody(2 << 20)},
		{"StringContent2KB", str},
	} {
		b.Run(c.name, func(b *testing.B) {
			if _, err := ParseMessagesRequest(c.body); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			c0 := cputime.Process()
			for b.Loop() {
				if _, err := ParseMessagesRequest(c.body); err != nil {
					b.Fatal(err)
				}
			}
			cputime.Report(b, c0)
		})
	}
}

// encodeString is the oracle for AppendString: encoding/json's Encoder without HTML escaping,
// which AppendString used to call.
func encodeString(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(buf.String(), "\n")
}

// TestAppendString: AppendString writes exactly encoding/json's bytes (HTML characters kept,
// control characters, quotes, backslashes, U+2028/U+2029 escaped, invalid UTF-8 replaced), on
// fixed cases and on random strings drawn mostly from the bytes that need care.
func TestAppendString(t *testing.T) {
	cases := []string{"", "plain", `a "q" \ b`, "<tag> a < b && c > d", "\x00\x01\b\f\n\r\t\x1f\x7f",
		"\u2028x\u2029", "\u2027\u202a", "é😀", "\xff", "a\xc3", "\xed\xa0\x80", "\xe2\x80", "\xf4\x90\x80\x80",
		strings.Repeat("word ", 100) + "\u2029"}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", " ", "<", ">", "&", `"`, `\`, "\n", "\t", "\x00", "\x1f", "\x7f", "é", "😀",
		"\u2028", "\u2029", "\xe2\x80", "\xff", "\x80", "\xc3", "\xed\xa0\x80", "/"}
	for range 5000 {
		var b strings.Builder
		for range rng.IntN(24) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		cases = append(cases, b.String())
	}
	for _, s := range cases {
		prefix := []byte("x:")
		if got, want := string(AppendString(prefix, s)), "x:"+encodeString(s); got != want {
			t.Fatalf("AppendString(%q) = %s, encoding/json writes %s", s, got, want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a<b>&", "\u2028\xff\x00\"\\", "é😀\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := string(AppendString(nil, s)), encodeString(s); got != want {
			t.Fatalf("AppendString(%q) = %s, encoding/json writes %s", s, got, want)
		}
	})
}

// TestMessagesBlocksShareOneBuffer: the blocks of every message live in one buffer, so a long
// history costs a few allocations, not one or two per message; and each message's Blocks has
// no spare capacity, so appending to one leaves the next message's blocks alone.
func TestMessagesBlocksShareOneBuffer(t *testing.T) {
	body := claudeCodeBody(256 << 10)
	r, err := ParseMessagesRequest(body)
	if err != nil || len(r.Messages) < 200 {
		t.Fatalf("%v, %d messages", err, len(r.Messages))
	}
	n := testing.AllocsPerRun(5, func() {
		if _, err := ParseMessagesRequest(body); err != nil {
			t.Fatal(err)
		}
	})
	if n > 60 {
		t.Errorf("ParseMessagesRequest: %v allocations for %d messages", n, len(r.Messages))
	}
	for i, m := range r.Messages[:len(r.Messages)-1] {
		if cap(m.Blocks) != len(m.Blocks) {
			t.Fatalf("message %d: cap(Blocks) = %d, len %d (an append must copy)", i, cap(m.Blocks), len(m.Blocks))
		}
		next := r.Messages[i+1].Blocks[0]
		_ = append(m.Blocks, Block{Type: "x"})
		if r.Messages[i+1].Blocks[0].Type != next.Type {
			t.Fatalf("appending to message %d's blocks overwrote message %d's", i, i+1)
		}
	}
}

// A string content stands for one text block, made when asked (ContentBlocks) rather than by every
// skim, whose text is the string's value and whose bytes are the client's spelling of it: no
// decode and encode, and still valid JSON with the same text.
func TestStringContentBlockKeepsTheClientsSpelling(t *testing.T) {
	for _, raw := range []string{`"plain"`, `"a\nb"`, `"h\u00e9 \ud83d\ude00"`, `"q\"uote\\"`, "\"x\u2028y\u2029z\"", `"\u2028"`, `""`} {
		body := []byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":` + raw + `}]}`)
		r, err := ParseMessagesRequest(body)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		m := r.Messages[0]
		blocks := m.ContentBlocks()
		if !m.StringContent || m.Blocks != nil || len(blocks) != 1 || blocks[0].Type != BlockText {
			t.Fatalf("%s: %+v", raw, m)
		}
		got := blocks[0].Raw
		if want := `{"type":"text","text":` + raw + `}`; string(got) != want {
			t.Errorf("%s: block %s, want %s", raw, got, want)
		}
		var v struct{ Text string }
		var s string
		if err := json.Unmarshal(got, &v); err != nil || json.Unmarshal([]byte(raw), &s) != nil || v.Text != s {
			t.Errorf("%s: block %s does not hold the string's text %q (%v)", raw, got, s, err)
		}
	}
}
