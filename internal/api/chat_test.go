package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/compactd/compactd/bench/cputime"
	"github.com/compactd/compactd/internal/jsonx"
)

func TestParseChatRequest(t *testing.T) {
	body := `{"model":"qwen3","stream":true,"stream_options":{"include_usage":true},"x":{"keep":1},` +
		`"tools":[{"type":"function","function":{"name":"sh"}}],"messages":[` +
		`{"role":"system","content":"be brief"},` +
		`{"role":"user","content":[{"type":"text","text":"run ls"},{"type":"image_url","image_url":{"url":"data:x"}}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"sh","arguments":"{\"cmd\":\"ls\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"a.go\nb.go"},` +
		`{"role":"assistant","content":"two files"}]}`
	r, err := ParseChatRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "qwen3" || !r.Stream || !r.IncludeUsage || string(r.Tools) != `[{"type":"function","function":{"name":"sh"}}]` {
		t.Errorf("model %q stream %v include_usage %v tools %s", r.Model, r.Stream, r.IncludeUsage, r.Tools)
	}
	roles := []string{}
	for _, m := range r.Messages {
		roles = append(roles, m.Role)
		if !strings.Contains(body, string(m.Raw)) || m.Raw[0] != '{' {
			t.Errorf("message %s is not a sub-slice of the body", m.Raw)
		}
	}
	if got := strings.Join(roles, ","); got != "system,user,assistant,tool,assistant" {
		t.Errorf("roles %s", got)
	}
	// The body round-trips byte for byte through WithMessages.
	if got := string(r.WithMessages(Raws[[]byte](r.Messages))); got != body {
		t.Errorf("round trip changed the body:\n%s", got)
	}
}

func TestParseChatRequestRefuses(t *testing.T) {
	cases := []struct {
		name, body, param string
		kind              error
	}{
		{"not json", `{"messages":[`, "", ErrInvalidJSON},
		{"not an object", `[1]`, "", ErrInvalidJSON},
		{"too deep", `{"messages":[{"role":"user","content":` + strings.Repeat("[", jsonx.MaxDepth) + strings.Repeat("]", jsonx.MaxDepth) + `}]}`, "", ErrTooDeep},
		{"messages not an array", `{"messages":{"role":"user"}}`, "messages", ErrShape},
		{"message not an object", `{"messages":["hi"]}`, "messages[0]", ErrShape},
		{"content a number", `{"messages":[{"role":"user","content":"a"},{"role":"user","content":5}]}`, "messages[1].content", ErrShape},
		{"tool_calls not an array", `{"messages":[{"role":"assistant","tool_calls":{}}]}`, "messages[0].tool_calls", ErrShape},
		{"tool call not an object", `{"messages":[{"role":"assistant","tool_calls":[1]}]}`, "messages[0].tool_calls[0]", ErrShape},
		{"duplicate messages", `{"messages":[],"messages":[{"role":"user","content":"x"}]}`, "messages", ErrDuplicateMember},
		{"duplicate escaped role", `{"messages":[{"role":"user","r\u006fle":"system","content":"x"}]}`, "messages[0].role", ErrDuplicateMember},
		{"duplicate part text", `{"messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}`, "messages[0].content[0].text", ErrDuplicateMember},
		{"duplicate arguments", `{"messages":[{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}","arguments":"{}"}}]}]}`, "messages[0].tool_calls[0].function.arguments", ErrDuplicateMember},
		{"duplicate include_usage", `{"stream_options":{"include_usage":false,"include_usage":true}}`, "stream_options.include_usage", ErrDuplicateMember},
		{"duplicate model", `{"model":"a","model":"b"}`, "model", ErrDuplicateMember},
		{"duplicate function_call name", `{"messages":[{"role":"assistant","function_call":{"name":"a","arguments":"{}","name":"b"}}]}`, "messages[0].function_call.name", ErrDuplicateMember},
		{"duplicate n", `{"n":1,"messages":[],"n":2}`, "n", ErrDuplicateMember},
		{"escaped duplicate n", `{"n":1,"\u006e":2}`, "n", ErrDuplicateMember},
		{"duplicate tool_choice", `{"tool_choice":"none","tool_choice":"auto"}`, "tool_choice", ErrDuplicateMember},
		{"duplicate tool_choice type", `{"tool_choice":{"type":"none","type":"function"}}`, "tool_choice.type", ErrDuplicateMember},
		{"duplicate tool function name", `{"tools":[{"type":"function","function":{"name":"compactd_recall","name":"f"}}]}`, "tools[0].function.name", ErrDuplicateMember},
		{"duplicate tool function", `{"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"a"},"function":{"name":"b"}}]}`, "tools[1].function", ErrDuplicateMember},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseChatRequest([]byte(c.body))
			var be *BodyError
			if !errors.As(err, &be) || !errors.Is(err, c.kind) || be.Param != c.param {
				t.Fatalf("err %v (param %q): want %v at %q", err, paramOf(err), c.kind, c.param)
			}
		})
	}
}

func paramOf(err error) string {
	var be *BodyError
	if errors.As(err, &be) {
		return be.Param
	}
	return ""
}

func TestChatItems(t *testing.T) {
	body := `{"messages":[` +
		`{"role":"developer","content":"rules"},` +
		`{"role":"user","content":"fix it"},` +
		`{"role":"assistant","content":"looking","tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{\"path\":\"a.go\"}"}},{"id":"c2","type":"custom","custom":{"name":"patch","input":"*** Begin"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"package a"}]},` +
		`{"role":"assistant","content":"","refusal":"no"},` +
		`{"role":"function","name":"old","content":"legacy"},` +
		`{"role":"assistant","function_call":{"name":"old","arguments":"{}"}}]}`
	r, err := ParseChatRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	items, owner := ChatItems(r.Messages)
	want := []struct {
		typ, role string
		owner     int
		raw       string
	}{
		{"message", "developer", 0, `{"role":"developer","content":"rules"}`},
		{"message", "user", 1, `{"role":"user","content":"fix it"}`},
		{"message", "assistant", 2, `{"type":"message","role":"assistant","content":"looking"}`},
		{"function_call", "", 2, `{"type":"function_call","call_id":"c1","name":"read","arguments":"{\"path\":\"a.go\"}"}`},
		{"custom_tool_call", "", 2, `{"type":"custom_tool_call","call_id":"c2","name":"patch","input":"*** Begin"}`},
		{"function_call_output", "", 3, `{"type":"function_call_output","call_id":"c1","output":[{"type":"text","text":"package a"}]}`},
		{"message", "assistant", 4, `{"type":"message","role":"assistant","content":[{"type":"refusal","refusal":"no"}]}`},
		{"function_call_output", "", 5, `{"type":"function_call_output","call_id":"old","output":"legacy"}`},
		{"function_call", "", 6, `{"type":"function_call","call_id":"","name":"old","arguments":"{}"}`},
	}
	if len(items) != len(want) || len(owner) != len(want) {
		t.Fatalf("got %d items (%d owners), want %d", len(items), len(owner), len(want))
	}
	for k, w := range want {
		if items[k].Type != w.typ || items[k].Role != w.role || owner[k] != w.owner || string(items[k].Raw) != w.raw {
			t.Errorf("item %d: %s %q from %d %s; want %s %q from %d %s", k, items[k].Type, items[k].Role, owner[k], items[k].Raw, w.typ, w.role, w.owner, w.raw)
		}
	}
	if !items[0].IsInstruction() || !items[1].IsUserMessage() {
		t.Error("the developer message must be an instruction and the user message a user message")
	}
}

func TestChatWithMessages(t *testing.T) {
	cases := []struct{ body, want string }{
		{`{"model":"m", "messages" : [ {"role":"user","content":"a"} ] ,"z":1}`, `{"model":"m", "messages" : [{"role":"user","content":"b"}] ,"z":1}`},
		{`{"model":"m"}`, `{"messages":[{"role":"user","content":"b"}],"model":"m"}`},
		{` {} `, ` {"messages":[{"role":"user","content":"b"}]} `},
	}
	for _, c := range cases {
		r, err := ParseChatRequest([]byte(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(r.WithMessages([][]byte{ChatUserMessage("b")})); got != c.want {
			t.Errorf("%s: got %s, want %s", c.body, got, c.want)
		}
	}
}

// chatAgentBody is a /v1/chat/completions body of about size bytes shaped like a local-model
// coding agent's turn: a system prompt, tools, and a history of assistant tool calls and tool
// results (code and logs with newlines, tabs and quotes to escape). Deterministic.
func chatAgentBody(size int) []byte {
	esc := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	out := "func main() {\n\tif err := run(); err != nil {\n\t\tlog.Fatal(\"run: \", err)\n\t}\n}\n=== RUN TestX\n--- FAIL: TestX <nil>\n"
	var b strings.Builder
	b.WriteString(`{"model":"qwen3-coder","stream":true,"stream_options":{"include_usage":true},"tools":[{"type":"function","function":{"name":"shell","description":"Run a command","parameters":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}}],"messages":[`)
	b.WriteString(`{"role":"system","content":` + esc(strings.Repeat("You are a coding agent working in the user's repository. ", 8)) + `},{"role":"user","content":"The tests fail; fix them."}`)
	for i := 0; b.Len() < size-200; i++ {
		fmt.Fprintf(&b, `,{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"shell","arguments":"{\"command\":\"go test ./...\"}"}}]}`, i)
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":[{"type":"text","text":%s}]}`, i, esc(strings.Repeat(out, 1+i%3)))
	}
	b.WriteString(`,{"role":"user","content":"go on"}]}`)
	return []byte(b.String())
}

// BenchmarkParseChatRequest is the skim every /v1/chat/completions turn pays: validate the JSON,
// read the top-level fields, and slice out every message, checking its parts and tool calls.
func BenchmarkParseChatRequest(b *testing.B) {
	for _, c := range []struct {
		name string
		size int
	}{{"2KB", 2 << 10}, {"2MB", 2 << 20}} {
		body := chatAgentBody(c.size)
		b.Run(c.name, func(b *testing.B) {
			if r, err := ParseChatRequest(body); err != nil || len(r.Messages) < 3 {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			c0 := cputime.Process()
			for b.Loop() {
				if _, err := ParseChatRequest(body); err != nil {
					b.Fatal(err)
				}
			}
			cputime.Report(b, c0)
		})
	}
}
