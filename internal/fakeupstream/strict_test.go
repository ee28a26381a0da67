package fakeupstream

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fixtures"
)

// strictCase is one request body and what the strict upstream must do with it: accept it
// (refused == "") or refuse it with a message containing refused.
type strictCase struct {
	name, body, refused string
}

// msgs wraps Anthropic messages in a request body.
func msgs(m string) string { return `{"model":"m","max_tokens":10,"messages":[` + m + `]}` }

// input wraps Responses input items in a request body.
func input(in string) string { return `{"model":"m","input":[` + in + `]}` }

// chat wraps Chat Completions messages in a request body.
func chat(m string) string { return `{"model":"m","messages":[` + m + `]}` }

const (
	u       = `{"role":"user","content":"hi"}`
	a       = `{"role":"assistant","content":"ok"}`
	sys     = `{"role":"system","content":"deferred tools: x"}`
	useA    = `{"role":"assistant","content":[{"type":"text","text":"reading"},{"type":"tool_use","id":"toolu_A","name":"Read","input":{}}]}`
	useAB   = `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_A","name":"Read","input":{}},{"type":"tool_use","id":"toolu_B","name":"Read","input":{}}]}`
	resA    = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_A","content":"file"}]}`
	resB    = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_B","content":"file"}]}`
	resAB   = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_A","content":"a"},{"type":"tool_result","tool_use_id":"toolu_B","content":"b"}]}`
	resAtxt = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_A","content":"file"},{"type":"text","text":"and then?"}]}`
	txtResA = `{"role":"user","content":[{"type":"text","text":"here:"},{"type":"tool_result","tool_use_id":"toolu_A","content":"file"}]}`
)

var messagesCases = []strictCase{
	{"one user message", msgs(u), ""},
	{"alternating turns", msgs(u + "," + a + "," + u), ""},
	{"consecutive user messages are combined, not refused", msgs(u + "," + u + "," + a + "," + a + "," + u), ""},
	{"final assistant prefill", msgs(u + "," + `{"role":"assistant","content":"The answer is ("}`), ""},
	{"empty final assistant", msgs(u + "," + `{"role":"assistant","content":[]}`), ""},
	{"no messages", msgs(""), "at least one message is required"},
	{"messages missing", `{"model":"m","max_tokens":10}`, "messages: Field required"},
	{"first message assistant", msgs(a + "," + u), `first message must use the "user" role`},
	{"first message system", msgs(sys + "," + u), `first message must use the "user" role`},
	{"unknown role", msgs(u + `,{"role":"tool","content":"x"}`), "messages.1.role"},
	{"empty user content", msgs(u + "," + a + `,{"role":"user","content":""}`), "messages.2: all messages must have non-empty content"},
	{"empty middle assistant", msgs(u + `,{"role":"assistant","content":[]},` + u), "messages.1: all messages must have non-empty content"},
	{"system after the first user message (Claude Code)", msgs(u + "," + sys + "," + a + "," + u), ""},
	{"system last on a first turn (Claude Code)", msgs(u + "," + sys), ""},
	{"system with blocks", msgs(u + `,{"role":"system","content":[{"type":"text","text":"x"}]}`), ""},
	{"system with a tool_use block", msgs(u + `,{"role":"system","content":[{"type":"tool_use","id":"t","name":"n","input":{}}]}`), "messages.1.content.0.type"},
	{"unknown block type", msgs(`{"role":"user","content":[{"type":"input_text","text":"hi"}]}`), "messages.0.content.0.type: Input tag 'input_text'"},
	{"known beta block types", msgs(`{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image","source":{"type":"url","url":"u"}},{"type":"document","source":{"type":"text","media_type":"text/plain","data":"d"}}]},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"redacted_thinking","data":"d"},{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]},{"type":"text","text":"ok"}]},` + u), ""},
	{"tool round trip", msgs(u + "," + useA + "," + resA + "," + a + "," + u), ""},
	{"tool round trip with text after the results", msgs(u + "," + useA + "," + resAtxt), ""},
	{"parallel tool uses answered", msgs(u + "," + useAB + "," + resAB), ""},
	{"results split over consecutive user messages", msgs(u + "," + useAB + "," + resA + "," + resB), ""},
	{"result then text in a second user message", msgs(u + "," + useA + "," + resA + "," + u), ""},
	{"tool use last, awaiting its result", msgs(u + "," + useA), ""},
	{"orphan tool result (no tool_use before)", msgs(u + "," + a + "," + resA), "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_A"},
	{"orphan tool result in the first message", msgs(resA + "," + a + "," + u), "messages.0.content.0: unexpected `tool_use_id`"},
	{"orphan tool result, earlier tool_use", msgs(u + "," + useA + "," + resA + "," + a + "," + resA), "messages.4.content.0: unexpected `tool_use_id`"},
	{"orphan after a compaction boundary (issue 23, defect 1)", msgs(u + "," + resA + "," + a + "," + u), "messages.1.content.0: unexpected `tool_use_id`"},
	{"unanswered tool use", msgs(u + "," + useA + "," + u), "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_A"},
	{"one of two tool uses unanswered", msgs(u + "," + useAB + "," + resA + "," + a), "immediately after: toolu_B"},
	// Consecutive assistant messages are one turn, so the results answer the combined turn.
	{"tool use and an assistant message, combined", msgs(u + "," + useA + "," + a + "," + resA), ""},
	{"tool use, assistant, user text", msgs(u + "," + useA + "," + a + "," + u), "messages.2: `tool_use` ids were found without `tool_result` blocks"},
	{"text before the tool result", msgs(u + "," + useA + "," + txtResA), "messages.2.content.1: `tool_result` blocks must come first"},
	{"text message before the results message", msgs(u + "," + useA + "," + u + "," + resA), "messages.3.content.0: `tool_result` blocks must come first"},
	{"system between tool use and result", msgs(u + "," + useA + "," + sys + "," + resA), ""},
	// Tool directives: a tool_reference names a tool of tools or one defined inline earlier.
	{"tool_addition of a declared tool", `{"model":"m","max_tokens":10,"tools":[{"name":"Read","input_schema":{"type":"object"}}],"messages":[` +
		u + `,{"role":"user","content":[{"type":"tool_addition","tool":{"type":"tool_reference","name":"Read"}}]}]}`, ""},
	{"tool defined inline, then referenced", msgs(`{"role":"user","content":[{"type":"tool_addition","tool":{"type":"tool_definition","definition":{"name":"grep","input_schema":{"type":"object"}}}},{"type":"text","text":"hi"}]},` +
		a + `,{"role":"system","content":[{"type":"tool_removal","tool":{"type":"tool_reference","name":"grep"}}]},{"role":"user","content":[{"type":"tool_addition","tool":{"type":"tool_reference","name":"grep"}},{"type":"text","text":"again"}]}`), ""},
	{"tool_reference to nothing", msgs(u + `,{"role":"user","content":[{"type":"tool_addition","tool":{"type":"tool_reference","name":"grep"}}]}`),
		"messages.1.content.0.tool: tool_reference 'grep' names no tool"},
	{"tool_removal before the inline definition", msgs(`{"role":"user","content":[{"type":"tool_removal","tool":{"type":"tool_reference","name":"grep"}},{"type":"tool_addition","tool":{"type":"tool_definition","definition":{"name":"grep","input_schema":{"type":"object"}}}}]}`),
		"messages.0.content.0.tool: tool_reference 'grep'"},
}

var responsesCases = []strictCase{
	{"string input", `{"model":"m","input":"hi"}`, ""},
	{"messages of every role", input(`{"type":"message","role":"developer","content":"d"},{"role":"system","content":"s"},{"role":"user","content":"u"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"}]}`), ""},
	{"unknown role", input(`{"role":"tool","content":"x"}`), "Invalid value: 'tool'"},
	{"unknown item type", input(`{"role":"user","content":"u"},{"type":"tool_result","call_id":"c"}`), "Invalid value: 'tool_result'. Supported values are:"},
	{"item without type, role or id", input(`{"content":"u"}`), "Missing required parameter: 'input[0].type'"},
	{"item reference", input(`{"id":"msg_1"},{"type":"item_reference","id":"msg_2"},{"role":"user","content":"u"}`), ""},
	{"server tool items need no output", input(`{"role":"user","content":"u"},{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"q"}},{"type":"reasoning","id":"rs_1","summary":[]},{"role":"user","content":"v"}`), ""},
	{"function call and output", input(`{"role":"user","content":"u"},{"type":"function_call","call_id":"call_1","name":"shell","arguments":"{}"},{"type":"function_call_output","call_id":"call_1","output":"ok"},{"role":"user","content":"v"}`), ""},
	{"parallel calls, outputs in another order", input(`{"role":"user","content":"u"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"reasoning","id":"rs_1","summary":[]},{"type":"function_call","call_id":"c2","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c2","output":"2"},{"type":"function_call_output","call_id":"c1","output":"1"}`), ""},
	{"output after other items", input(`{"role":"user","content":"u"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"role":"user","content":"and?"},{"type":"function_call_output","call_id":"c1","output":"1"}`), ""},
	{"call last, awaiting its output", input(`{"role":"user","content":"u"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}`), ""},
	{"custom, shell and apply_patch pairs", input(`{"role":"user","content":"u"},{"type":"custom_tool_call","call_id":"k1","name":"apply","input":"x"},{"type":"custom_tool_call_output","call_id":"k1","output":"ok"},` +
		`{"type":"shell_call","call_id":"s1","action":{"commands":["ls"]},"status":"completed"},{"type":"shell_call_output","call_id":"s1","output":[]},` +
		`{"type":"apply_patch_call","call_id":"p1","operation":{"type":"delete_file","path":"x"},"status":"completed"},{"type":"apply_patch_call_output","call_id":"p1","status":"completed"},{"role":"user","content":"v"}`), ""},
	{"local shell output names the call", input(`{"role":"user","content":"u"},{"type":"local_shell_call","id":"lsh_1","call_id":"c9","action":{"type":"exec","command":["ls"],"env":{}},"status":"completed"},{"type":"local_shell_call_output","id":"c9","output":"x"},{"role":"user","content":"v"}`), ""},
	{"mcp approval answered", input(`{"role":"user","content":"u"},{"type":"mcp_approval_request","id":"mcpr_1","arguments":"{}","name":"n","server_label":"s"},{"type":"mcp_approval_response","approval_request_id":"mcpr_1","approve":true},{"role":"user","content":"v"}`), ""},
	{"orphan function_call_output", input(`{"role":"user","content":"u"},{"type":"function_call_output","call_id":"call_X","output":"ok"}`), "No tool call found for function call output with call_id call_X."},
	{"output before its call", input(`{"role":"user","content":"u"},{"type":"function_call_output","call_id":"c1","output":"1"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}`), "No tool call found for function call output with call_id c1."},
	{"orphan custom_tool_call_output", input(`{"role":"user","content":"u"},{"type":"custom_tool_call_output","call_id":"k1","output":"ok"}`), "call_id k1"},
	{"orphan shell_call_output", input(`{"role":"user","content":"u"},{"type":"shell_call_output","call_id":"s1","output":[]}`), "call_id s1"},
	{"orphan mcp approval", input(`{"role":"user","content":"u"},{"type":"mcp_approval_response","approval_request_id":"mcpr_9","approve":true}`), "call_id mcpr_9"},
	{"unanswered function call", input(`{"role":"user","content":"u"},{"type":"function_call","call_id":"call_Y","name":"f","arguments":"{}"},{"role":"user","content":"v"}`), "No tool output found for function call call_Y."},
	{"unanswered custom call", input(`{"role":"user","content":"u"},{"type":"custom_tool_call","call_id":"k2","name":"apply","input":"x"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"}]}`), "No tool output found for function call k2."},
	{"compaction trigger (no compaction here)", input(`{"role":"user","content":"u"},{"type":"compaction_trigger"}`), "does not support compaction"},
}

var chatCases = []strictCase{
	{"plain conversation", chat(`{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"a"},{"role":"user","content":"v"}`), ""},
	{"tool round trip", chat(`{"role":"user","content":"u"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c2","content":"2"},{"role":"tool","tool_call_id":"c1","content":"1"},{"role":"assistant","content":"done"},{"role":"user","content":"v"}`), ""},
	{"tool calls last, awaiting results", chat(`{"role":"user","content":"u"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`), ""},
	{"unknown role", chat(`{"role":"model","content":"u"}`), "Invalid value: 'model'"},
	{"tool message with no tool_calls before", chat(`{"role":"user","content":"u"},{"role":"tool","tool_call_id":"c1","content":"1"}`), "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'"},
	{"tool message after a user message", chat(`{"role":"user","content":"u"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"1"},{"role":"user","content":"v"},{"role":"tool","tool_call_id":"c1","content":"1"}`), "must be a response to a preceeding message"},
	{"tool message answering another id", chat(`{"role":"user","content":"u"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c9","content":"1"}`), "'tool_call_id' of 'c9' not found in 'tool_calls' of previous message"},
	{"tool call unanswered", chat(`{"role":"user","content":"u"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"1"},{"role":"user","content":"v"}`), "The following tool_call_ids did not have response messages: c2"},
}

// TestStrictRules: every rule of strict.go, accepted and refused, on its route, with the real
// API's status and envelope; the same bodies are all accepted by a Lenient server, and each
// refusal is recorded with its reason.
func TestStrictRules(t *testing.T) {
	routes := []struct {
		path  string
		cases []strictCase
	}{
		{"/v1/messages", messagesCases},
		{"/v1/messages/count_tokens", messagesCases},
		{"/v1/responses", responsesCases},
		{"/v1/chat/completions", chatCases},
	}
	strict, sbase := start(t, Options{})
	lenient, lbase := start(t, Options{Lenient: true})
	for _, r := range routes {
		for _, tc := range r.cases {
			t.Run(r.path+"/"+tc.name, func(t *testing.T) {
				strict.Reset()
				status, _, body := post(t, sbase+r.path, tc.body)
				recs := strict.Requests()
				if len(recs) != 1 {
					t.Fatalf("recorded %d requests", len(recs))
				}
				if tc.refused == "" {
					if status != 200 || recs[0].Refused != "" {
						t.Fatalf("refused: %d %s", status, body)
					}
					return
				}
				if status != 400 {
					t.Fatalf("status %d, want 400: %s", status, body)
				}
				checkEnvelope(t, r.path, body, "invalid_request_error")
				msg := gjson.GetBytes(body, "error.message").Str
				if !strings.Contains(msg, tc.refused) {
					t.Errorf("message %q does not contain %q", msg, tc.refused)
				}
				if code := gjson.GetBytes(body, "error.details.error_code").Str; strings.Contains(tc.refused, "tool_reference '") != (code == "tool_reference_unresolved") {
					t.Errorf("error.details.error_code %q: %s", code, body)
				}
				if recs[0].Refused != msg || recs[0].Status != 400 {
					t.Errorf("recorded refusal %q (%d), answered %q", recs[0].Refused, recs[0].Status, msg)
				}
				want := 200
				if strings.Contains(tc.refused, "compaction") {
					want = 400 // compaction is refused whatever Lenient says
				}
				if status, _, body := post(t, lbase+r.path, tc.body); status != want {
					t.Errorf("lenient server: %d, want %d: %s", status, want, body)
				}
			})
		}
	}
	if n := len(lenient.Refusals()); n != 1 { // the compaction trigger
		t.Errorf("lenient server recorded %d refusals, want 1", n)
	}
}

// TestStrictOpenAIParams: the OpenAI refusals carry the param and code the real API sends.
func TestStrictOpenAIParams(t *testing.T) {
	_, base := start(t, Options{})
	for _, tc := range []struct {
		path, body, param string
		code              any
	}{
		{"/v1/responses", input(`{"type":"function_call_output","call_id":"c","output":"x"}`), "input", nil},
		{"/v1/responses", input(`{"type":"bogus"}`), "input[0].type", "invalid_value"},
		{"/v1/chat/completions", chat(`{"role":"user","content":"u"},{"role":"tool","tool_call_id":"c","content":"x"}`), "messages.[1].role", nil},
	} {
		status, _, body := post(t, base+tc.path, tc.body)
		e := gjson.GetBytes(body, "error")
		if status != 400 || e.Get("param").Str != tc.param || e.Get("code").Value() != tc.code {
			t.Errorf("%s %s: %d param %s code %s", tc.path, tc.body, status, e.Get("param").Raw, e.Get("code").Raw)
		}
	}
}

// TestCapturedClientBodies: what the real clients sent, captured, is accepted: Codex 0.169's
// ordinary and local-compaction turns (its remote compaction turns carry compaction, refused
// as before), and every request of a Claude Code 2.1.332 session (role:"system" entry, tool
// round trips, string and block contents).
func TestCapturedClientBodies(t *testing.T) {
	_, base := start(t, Options{})
	names, bodies := fixtures.CodexAll()
	for i, name := range names {
		t.Run("codex-0.169/"+name, func(t *testing.T) {
			want := 200
			if strings.HasPrefix(name, "remote_v2_") {
				want = 400
			}
			status, _, body := post(t, base+gjson.GetBytes(bodies[i], "path").Str, gjson.GetBytes(bodies[i], "body").Raw)
			if status != want {
				t.Fatalf("status %d, want %d: %.300s", status, want, body)
			}
			if want == 400 && !strings.Contains(gjson.GetBytes(body, "error.message").Str, "compaction") {
				t.Errorf("refused for another reason: %s", body)
			}
		})
	}
	dir := filepath.Join("..", "memo", "testdata", "claude-code-2.1.332")
	files, err := filepath.Glob(filepath.Join(dir, "*_messages.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Claude Code captures in %s: %v", dir, err)
	}
	for _, f := range files {
		t.Run("claude-code-2.1.332/"+filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, path := range []string{"/v1/messages?beta=true", "/v1/messages/count_tokens?beta=true"} {
				if status, _, body := post(t, base+path, string(raw)); status != 200 {
					t.Errorf("%s: status %d: %.300s", path, status, body)
				}
			}
		})
	}
}

// TestSpeaks: an upstream that speaks only some APIs answers the others' routes with the 404 a
// backend of its kind sends, in its own envelope, whatever the body (a summariser call too),
// and records the refusal; its own routes work as before.
func TestSpeaks(t *testing.T) {
	summary := `{"model":"m","input":[{"role":"user","content":"<conversation>\n[user] hi\n</conversation>"}]}`
	for _, tc := range []struct {
		name      string
		speaks    []dialect.Name
		path      string
		body      string
		status    int
		anthropic bool
	}{
		{"anthropic-only refuses a Responses summariser", []dialect.Name{dialect.Messages}, "/v1/responses", summary, 404, true},
		{"anthropic-only refuses chat", []dialect.Name{dialect.Messages}, "/v1/chat/completions", chat(`{"role":"user","content":"u"}`), 404, true},
		{"anthropic-only serves messages", []dialect.Name{dialect.Messages}, "/v1/messages", msgs(u), 200, true},
		{"anthropic-only serves count_tokens", []dialect.Name{dialect.Messages}, "/v1/messages/count_tokens", msgs(u), 200, true},
		{"openai-only refuses messages", []dialect.Name{dialect.Responses, dialect.Chat}, "/v1/messages", msgs(u), 404, false},
		{"openai-only refuses count_tokens", []dialect.Name{dialect.Responses, dialect.Chat}, "/v1/messages/count_tokens", msgs(u), 404, false},
		{"chat-only refuses responses", []dialect.Name{dialect.Chat}, "/v1/responses", input(u), 404, false},
		{"chat-only serves chat", []dialect.Name{dialect.Chat}, "/v1/chat/completions", chat(`{"role":"user","content":"u"}`), 200, false},
		{"default speaks all", nil, "/v1/responses", summary, 200, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, base := start(t, Options{Speaks: tc.speaks})
			status, _, body := post(t, base+tc.path, tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			refs := s.Refusals()
			if status == 200 {
				if len(refs) != 0 {
					t.Errorf("refusals %v", refs)
				}
				return
			}
			if tc.anthropic {
				if gjson.GetBytes(body, "type").Str != "error" || gjson.GetBytes(body, "error.type").Str != "not_found_error" ||
					!strings.HasPrefix(gjson.GetBytes(body, "request_id").Str, "req_") {
					t.Errorf("not Anthropic's 404 envelope: %s", body)
				}
			} else {
				e := gjson.GetBytes(body, "error")
				if e.Get("type").Str != "invalid_request_error" || !e.Get("param").Exists() || !e.Get("code").Exists() ||
					!strings.Contains(e.Get("message").Str, tc.path) {
					t.Errorf("not OpenAI's 404 envelope: %s", body)
				}
			}
			if len(refs) != 1 || refs[0].Status != 404 || refs[0].Path != tc.path {
				t.Errorf("refusals %+v", refs)
			}
		})
	}
}

// fakeTB records what FailOnRefusal reports.
type fakeTB struct {
	cleanups []func()
	errs     []string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}
func (f *fakeTB) finish() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// TestFailOnRefusal: a test fails at its end for each refusal it did not expect, naming the
// route and the reason — even with DropBodies and after Reset — and not for expected ones.
func TestFailOnRefusal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		expect []string
		errs   int
	}{
		{"unexpected refusals fail", nil, 2},
		{"one expected", []string{"unexpected `tool_use_id`"}, 1},
		{"all expected", []string{""}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, base := start(t, Options{DropBodies: true})
			tb := &fakeTB{}
			s.FailOnRefusal(tb)
			s.ExpectRefusals(tc.expect...)
			post(t, base+"/v1/messages", msgs(u+","+a+","+resA))
			s.Reset()
			post(t, base+"/v1/responses", input(`{"type":"function_call_output","call_id":"c","output":"x"}`))
			post(t, base+"/v1/messages", msgs(u)) // accepted
			tb.finish()
			if len(tb.errs) != tc.errs {
				t.Fatalf("reported %d errors, want %d: %q", len(tb.errs), tc.errs, tb.errs)
			}
			for _, e := range tb.errs {
				if !strings.Contains(e, "POST /v1/") || !strings.Contains(e, "refused") || !strings.Contains(e, "with 400: ") {
					t.Errorf("report %q does not name the route and reason", e)
				}
			}
		})
	}
}
