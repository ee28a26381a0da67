package api

import (
	"errors"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/jsonx"
)

// nested returns a JSON value nesting n arrays (or objects) around 1.
func nested(n int, objects bool) string {
	if objects {
		return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n)
	}
	return strings.Repeat("[", n) + "1" + strings.Repeat("]", n)
}

// smallStack lowers the goroutine stack limit for one test, so a parser that recursed per level
// (gjson.ValidBytes did) dies on a modest body instead of needing hundreds of megabytes.
func smallStack(t *testing.T) {
	old := debug.SetMaxStack(8 << 20)
	t.Cleanup(func() { debug.SetMaxStack(old) })
}

type refusal struct {
	name  string
	body  string
	kind  error  // nil: the body is accepted
	param string // BodyError.Param
	text  string // substring of the message
}

func checkRefusal(t *testing.T, c refusal, err error) {
	t.Helper()
	if c.kind == nil {
		if err != nil {
			t.Fatalf("refused a body it should accept: %v", err)
		}
		return
	}
	var be *BodyError
	if !errors.Is(err, c.kind) || !errors.As(err, &be) {
		t.Fatalf("err = %v, want a *BodyError of kind %v", err, c.kind)
	}
	if be.Param != c.param {
		t.Fatalf("param = %q, want %q (%v)", be.Param, c.param, err)
	}
	if !strings.Contains(err.Error(), c.text) {
		t.Fatalf("message %q does not contain %q", err.Error(), c.text)
	}
}

func TestParseResponsesRequestRefusals(t *testing.T) {
	smallStack(t)
	const msg = `{"type":"message","role":"user","content":"hi"}`
	cases := []refusal{
		{"nested arrays in input", `{"input":` + nested(jsonx.MaxDepth, false) + `}`, ErrTooDeep, "", "more than 1000 levels deep"},
		{"nested objects in a field", `{"model":"m","x":` + nested(jsonx.MaxDepth, true) + `}`, ErrTooDeep, "", "more than 1000 levels deep"},
		{"6 MB of open brackets", strings.Repeat("[", 6<<20), ErrTooDeep, "", "more than 1000 levels deep"},
		{"deep but within the limit", `{"model":"m","x":` + nested(jsonx.MaxDepth-2, false) + `}`, nil, "", ""},
		{"truncated", `{"input":[` + msg, ErrInvalidJSON, "", "not valid JSON"},
		{"not an object", `[` + msg + `]`, ErrInvalidJSON, "", "must be a JSON object"},
		{"input not an array", `{"input":{}}`, ErrShape, "input", "string or an array"},
		{"item not an object", `{"input":[` + msg + `,"x"]}`, ErrShape, "input[1]", "must be an object"},

		{"duplicate input", `{"input":[` + msg + `],"input":[]}`, ErrDuplicateMember, "input", `"input" appears more than once`},
		{"duplicate model", `{"model":"a","input":[],"model":"b"}`, ErrDuplicateMember, "model", `"model"`},
		{"duplicate stream", `{"stream":false,"stream":true}`, ErrDuplicateMember, "stream", `"stream"`},
		{"duplicate instructions", `{"instructions":"a","instructions":"b"}`, ErrDuplicateMember, "instructions", `"instructions"`},
		{"duplicate tools", `{"tools":[],"tools":[]}`, ErrDuplicateMember, "tools", `"tools"`},
		{"duplicate previous_response_id", `{"previous_response_id":"a","previous_response_id":"b"}`, ErrDuplicateMember, "previous_response_id", ""},
		{"duplicate prompt_cache_key", `{"prompt_cache_key":"a","prompt_cache_key":"b"}`, ErrDuplicateMember, "prompt_cache_key", ""},
		{"duplicate client_metadata", `{"client_metadata":{},"client_metadata":{"a":"b"}}`, ErrDuplicateMember, "client_metadata", ""},
		{"duplicate input spelled with an escape", `{"input":[],"inp\u0075t":[` + msg + `]}`, ErrDuplicateMember, "input", ""},
		{"duplicate unknown member is the upstream's", `{"x":1,"x":2,"input":[` + msg + `]}`, nil, "", ""},
		// every member compactd reads, down to the level it reads it at
		{"duplicate tool_choice", `{"tool_choice":"none","input":[],"tool_choice":"auto"}`, ErrDuplicateMember, "tool_choice", `"tool_choice" appears more than once`},
		{"escaped duplicate tool_choice", `{"tool_choice":"none","tool_ch\u006fice":"auto"}`, ErrDuplicateMember, "tool_choice", ""},
		{"duplicate tool_choice type", `{"tool_choice":{"type":"none","type":"auto"}}`, ErrDuplicateMember, "tool_choice.type", `"type"`},
		{"duplicate tool_choice name", `{"tool_choice":{"type":"function","name":"compactd_recall","name":"f"}}`, ErrDuplicateMember, "tool_choice.name", ""},
		{"unknown duplicate in tool_choice is the upstream's", `{"tool_choice":{"type":"allowed_tools","mode":"auto","mode":"required"}}`, nil, "", ""},
		{"duplicate tool name", `{"tools":[{"type":"function","name":"a"},{"type":"function","name":"f","name":"compactd_recall"}]}`, ErrDuplicateMember, "tools[1].name", `"name"`},
		{"duplicate tool function name", `{"tools":[{"type":"function","function":{"name":"a","name":"b"}}]}`, ErrDuplicateMember, "tools[0].function.name", ""},
		{"duplicate tool function", `{"tools":[{"function":{"name":"a"},"function":{"name":"b"}}]}`, ErrDuplicateMember, "tools[0].function", ""},
		{"unknown duplicate in a tool is the upstream's", `{"tools":[{"type":"function","name":"a","description":"x","description":"y"},"x"],"tool_choice":"auto"}`, nil, "", ""},
		{"instructions item with duplicate type", `{"instructions":[{"type":"message","role":"developer","content":"x","type":"compaction","encrypted_content":"e"}],"input":[]}`,
			ErrDuplicateMember, "instructions[0].type", ""},

		{"message then compaction type", `{"input":[` + msg + `,{"type":"message","role":"user","content":"x","type":"compaction","encrypted_content":"e"}]}`,
			ErrDuplicateMember, "input[1].type", `"type" appears more than once`},
		{"escaped duplicate type", `{"input":[{"type":"message","role":"user","content":"x","typ\u0065":"compaction"}]}`, ErrDuplicateMember, "input[0].type", ""},
		{"duplicate role", `{"input":[{"role":"developer","content":"x","role":"user"}]}`, ErrDuplicateMember, "input[0].role", ""},
		{"duplicate content", `{"input":[{"role":"user","content":"x","content":"y"}]}`, ErrDuplicateMember, "input[0].content", ""},
		{"duplicate encrypted_content", `{"input":[{"type":"compaction","encrypted_content":"a","encrypted_content":"b"}]}`, ErrDuplicateMember, "input[0].encrypted_content", ""},
		{"duplicate id on a trigger", `{"input":[{"type":"compaction_trigger","id":null,"id":"x"}]}`, ErrDuplicateMember, "input[0].id", ""},
		{"duplicate output", `{"input":[{"type":"function_call_output","call_id":"c","output":"a","output":"b"}]}`, ErrDuplicateMember, "input[0].output", ""},
		{"duplicate type in a content part", `{"input":[` + msg + `,{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b","type":"compaction"}]}]}`,
			ErrDuplicateMember, "input[1].content[1].type", ""},
		{"duplicate text in a content part", `{"input":[{"role":"user","content":[{"type":"input_text","text":"a","text":"b"}]}]}`, ErrDuplicateMember, "input[0].content[0].text", ""},
		{"unknown duplicate in an item is the upstream's", `{"input":[{"role":"user","content":"a","x":1,"x":2}]}`, nil, "", ""},

		{"compaction in a message's content", `{"input":[` + msg + `,` + msg + `,` + msg + `,{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"compaction","encrypted_content":"e"}]}]}`,
			ErrMisplacedCompaction, "input[3].content[1]", "only valid as an item of input"},
		{"compaction_summary in content", `{"input":[{"role":"assistant","content":[{"type":"compaction_summary","encrypted_content":"e"}]}]}`, ErrMisplacedCompaction, "input[0].content[0]", ""},
		{"compaction_trigger in content", `{"input":[{"role":"user","content":[{"type":"compaction_trigger"}]}]}`, ErrMisplacedCompaction, "input[0].content[0]", ""},
		{"compaction in a tool output", `{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"compaction","encrypted_content":"e"}]}]}`, ErrMisplacedCompaction, "input[0].output[0]", ""},
		{"compaction in instructions", `{"instructions":[{"type":"compaction","encrypted_content":"e"}],"input":[]}`, ErrMisplacedCompaction, "instructions[0]", ""},
		{"compaction item in input is fine", `{"input":[{"type":"compaction","encrypted_content":"e"},` + msg + `]}`, nil, "", ""},
		{"content parts that are strings are left alone", `{"input":[{"role":"user","content":["a",{"type":"input_text","text":"compaction"}]}]}`, nil, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseResponsesRequest([]byte(c.body))
			checkRefusal(t, c, err)
		})
	}
}

func TestParseMessagesRequestRefusals(t *testing.T) {
	smallStack(t)
	const user = `{"role":"user","content":"hi"}`
	tr := func(content string) string {
		return `{"messages":[` + user + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":` + content + `}]}]}`
	}
	cases := []refusal{
		{"nested arrays", `{"messages":` + nested(jsonx.MaxDepth, false) + `}`, ErrTooDeep, "", "more than 1000 levels deep"},
		{"nested objects", `{"metadata":` + nested(jsonx.MaxDepth, true) + `,"messages":[]}`, ErrTooDeep, "", "more than 1000 levels deep"},
		{"6 MB of open brackets", `{"messages":` + strings.Repeat("[", 6<<20), ErrTooDeep, "", ""},
		{"malformed", `{"messages":[` + user, ErrInvalidJSON, "", "not valid JSON"},
		{"messages not a list", `{"messages":{"role":"user"}}`, ErrShape, "messages", "valid list"},
		{"message not an object", `{"messages":[` + user + `,"hi"]}`, ErrShape, "messages.1", "valid dictionary"},
		{"content an object", `{"messages":[{"role":"user","content":{"type":"compaction","encrypted_content":"e"}}]}`, ErrShape, "messages.0.content", ""},
		{"content a number", `{"messages":[{"role":"user","content":5}]}`, ErrShape, "messages.0.content", ""},
		{"block not an object", `{"messages":[{"role":"user","content":["hi"]}]}`, ErrShape, "messages.0.content.0", "valid dictionary"},

		{"two messages members", `{"messages":[` + user + `],"model":"m","messages":[{"role":"assistant","content":[{"type":"compaction","content":"s","encrypted_content":"e"}]}]}`,
			ErrDuplicateMember, "messages", `"messages" appears more than once`},
		{"duplicate model", `{"model":"a","model":"b","messages":[]}`, ErrDuplicateMember, "model", ""},
		{"duplicate system", `{"system":"a","system":"b","messages":[]}`, ErrDuplicateMember, "system", ""},
		{"duplicate context_management", `{"context_management":null,"context_management":{"edits":[{"type":"compact_20260112"}]},"messages":[]}`, ErrDuplicateMember, "context_management", ""},
		{"duplicate compaction", `{"compaction":null,"compaction":{"type":"summarize"},"messages":[]}`, ErrDuplicateMember, "compaction", ""},
		{"duplicate stream and tools", `{"stream":true,"tools":[],"stream":false}`, ErrDuplicateMember, "stream", ""},
		{"escaped duplicate messages", `{"messages":[],"m\u0065ssages":[` + user + `]}`, ErrDuplicateMember, "messages", ""},
		{"unknown duplicate is the upstream's", `{"x":1,"x":2,"messages":[` + user + `]}`, nil, "", ""},
		// every member compactd reads, down to the level it reads it at
		{"duplicate tool_choice", `{"tool_choice":{"type":"none"},"messages":[],"tool_choice":{"type":"auto"}}`, ErrDuplicateMember, "tool_choice", `"tool_choice" appears more than once`},
		{"duplicate tool_choice type", `{"tool_choice":{"type":"any","type":"auto"},"messages":[]}`, ErrDuplicateMember, "tool_choice.type", ""},
		{"duplicate tool_choice name", `{"tool_choice":{"type":"tool","name":"compactd_recall","name":"f"},"messages":[]}`, ErrDuplicateMember, "tool_choice.name", ""},
		{"unknown duplicate in tool_choice is the upstream's", `{"tool_choice":{"type":"auto","disable_parallel_tool_use":true,"disable_parallel_tool_use":false},"messages":[]}`, nil, "", ""},
		{"duplicate tool name", `{"tools":[{"name":"a","input_schema":{}},{"name":"b","name":"compactd_recall"}],"messages":[]}`, ErrDuplicateMember, "tools.1.name", ""},
		{"unknown duplicate in a tool is the upstream's", `{"tools":[{"name":"a","description":"x","description":"y"}],"messages":[]}`, nil, "", ""},
		{"duplicate edits", `{"context_management":{"edits":[{"type":"clear_thinking_20251015"}],"edits":[{"type":"compact_20260112"}]},"messages":[]}`,
			ErrDuplicateMember, "context_management.edits", `"edits"`},
		{"duplicate edit type", `{"context_management":{"edits":[{"type":"clear_thinking_20251015","type":"compact_20260112"}]},"messages":[]}`,
			ErrDuplicateMember, "context_management.edits.0.type", ""},
		{"duplicate trigger value", `{"context_management":{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":50000,"value":1}}]},"messages":[]}`,
			ErrDuplicateMember, "context_management.edits.0.trigger.value", ""},
		{"duplicate compaction instructions", `{"compaction":{"type":"summarize","instructions":"a","instructions":"b"},"messages":[]}`, ErrDuplicateMember, "compaction.instructions", ""},

		{"duplicate role", `{"messages":[{"role":"assistant","content":"a","role":"user"}]}`, ErrDuplicateMember, "messages.0.role", ""},
		{"duplicate content", `{"messages":[{"role":"user","content":"a","content":[{"type":"compaction","content":"s"}]}]}`, ErrDuplicateMember, "messages.0.content", ""},
		{"block text then compaction", `{"messages":[` + user + `,{"role":"assistant","content":[{"type":"text","text":"a","type":"compaction","content":"s","encrypted_content":"e"}]}]}`,
			ErrDuplicateMember, "messages.1.content.0.type", `"type" appears more than once`},
		{"escaped duplicate type", `{"messages":[{"role":"user","content":[{"type":"text","text":"a","\u0074ype":"compaction"}]}]}`, ErrDuplicateMember, "messages.0.content.0.type", ""},
		{"duplicate encrypted_content", `{"messages":[{"role":"user","content":[{"type":"compaction","content":"s","encrypted_content":"a","encrypted_content":"b"}]}]}`, ErrDuplicateMember, "messages.0.content.0.encrypted_content", ""},
		{"duplicate tool_use_id", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","tool_use_id":"b"}]}]}`, ErrDuplicateMember, "messages.0.content.0.tool_use_id", ""},
		{"duplicate type nested in tool_result", tr(`[{"type":"text","text":"a"},{"type":"text","text":"b","type":"image"}]`), ErrDuplicateMember, "messages.1.content.0.content.1.type", ""},
		{"unknown duplicate in a block is the upstream's", `{"messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{},"cache_control":null}]}]}`, nil, "", ""},

		{"compaction in tool_result", tr(`[{"type":"compaction","content":"s","encrypted_content":"e"}]`), ErrMisplacedCompaction, "messages.1.content.0.content.0", "only valid directly in a message's content"},
		{"compaction two levels down", tr(`[{"type":"text","text":"a"},{"type":"search_result","content":[{"type":"compaction","content":"s"}]}]`), ErrMisplacedCompaction, "messages.1.content.0.content.1.content.0", ""},
		{"compaction in system", `{"system":[{"type":"text","text":"a"},{"type":"compaction","content":"s"}],"messages":[]}`, ErrMisplacedCompaction, "system.1", ""},
		{"tool_result with string content", tr(`"the output"`), nil, "", ""},
		{"tool_result content mixing strings", tr(`["x",{"type":"text","text":"compaction"}]`), nil, "", ""},
		{"compaction block in content is fine", `{"messages":[{"role":"assistant","content":[{"type":"compaction","content":"s","encrypted_content":"e"}]}]}`, nil, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseMessagesRequest([]byte(c.body))
			checkRefusal(t, c, err)
		})
	}
}

// The skims must stay one allocation per item (or message and block) with the checks in place:
// they run on every turn of multi-megabyte bodies.
func TestSkimAllocations(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"model":"m","input":[`)
	for i := range 200 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"type":"message","role":"user","content":[{"type":"input_text","text":"a \"quoted\" line\n"}]},{"type":"function_call_output","call_id":"c","output":"ok\n"}`)
	}
	b.WriteString(`]}`)
	body := []byte(b.String())
	if n := testing.AllocsPerRun(5, func() {
		if _, err := ParseResponsesRequest(body); err != nil {
			t.Fatal(err)
		}
	}); n > 20 {
		t.Errorf("ParseResponsesRequest: %v allocations for 400 items", n)
	}
}

// TestSmallSkimOneAllocation: the skim of a short session's body (up to 8 items, as in the 2 KB
// and 10 KB pass-through turns) allocates the request and nothing else, and leaves Items
// without spare capacity over the request's own buffer.
func TestSmallSkimOneAllocation(t *testing.T) {
	item := `{"type":"message","role":"user","content":[{"type":"input_text","text":"a \"quoted\" line\n"}]}`
	for _, n := range []int{1, 4, 8} {
		body := []byte(`{"model":"m","stream":true,"input":[` + strings.Repeat(item+",", n-1) + item + `]}`)
		allocs := testing.AllocsPerRun(10, func() {
			if r, err := ParseResponsesRequest(body); err != nil || len(r.Items) != n {
				t.Fatalf("%d items: %v", n, err)
			}
		})
		if allocs != 1 {
			t.Errorf("ParseResponsesRequest of %d items: %v allocations, want 1", n, allocs)
		}
		r, _ := ParseResponsesRequest(body)
		if cap(r.Items) != len(r.Items) {
			t.Errorf("%d items: cap(Items) = %d, want %d (an append must copy)", n, cap(r.Items), len(r.Items))
		}
	}
	// Past the buffer the skim still works, the items appended in order.
	body := []byte(`{"input":[` + strings.Repeat(`{"type":"a"},`, 20) + `{"type":"b"}]}`)
	r, err := ParseResponsesRequest(body)
	if err != nil || len(r.Items) != 21 || r.Items[0].Type != "a" || r.Items[20].Type != "b" {
		t.Fatalf("21 items: %v, %d items", err, len(r.Items))
	}
}

func TestMessagesSkimAllocations(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[`)
	for i := range 200 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"a \"quoted\" line\n"},{"type":"text","text":"b"}]},{"type":"text","text":"c"}]}`)
	}
	b.WriteString(`]}`)
	body := []byte(b.String())
	n := testing.AllocsPerRun(5, func() {
		if _, err := ParseMessagesRequest(body); err != nil {
			t.Fatal(err)
		}
	})
	// The messages' Blocks share one buffer (grown by doubling), as do the Messages and members
	// slices, and the nested tool_result checks allocate nothing: a few dozen allocations
	// whatever the number of messages (22 when this bound was set; one per message would be 200).
	if n > 40 {
		t.Errorf("ParseMessagesRequest: %v allocations for 200 messages", n)
	}
	t.Logf("%v allocations", n)
}
