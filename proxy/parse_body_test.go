package proxy_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// The routes that skim their bodies, with the dialect their errors use.
var parsedRoutes = []struct {
	path      string
	anthropic bool
	normal    string // a request the route serves with 200
}{
	{"/v1/responses", false, `{"model":"gpt-fake","input":"hi"}`},
	{"/v1/responses/compact", false, `{"model":"gpt-fake","input":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}`},
	{"/v1/messages", true, `{"model":"claude-fake","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`},
	{"/v1/messages/count_tokens", true, `{"model":"claude-fake","messages":[{"role":"user","content":"hi"}]}`},
}

func parsePost(t *testing.T, url string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// parseEnvelope asserts b is a 400 invalid_request_error in the route's dialect whose message
// contains want, and returns OpenAI's param (or "").
func parseEnvelope(t *testing.T, anthropic bool, status int, b []byte, want string) string {
	t.Helper()
	if status != http.StatusBadRequest {
		t.Fatalf("status %d, want 400: %.300s", status, b)
	}
	e := gjson.ParseBytes(b)
	if anthropic {
		if e.Get("type").Str != "error" || e.Get("error.type").Str != "invalid_request_error" || !strings.HasPrefix(e.Get("request_id").Str, "req_") {
			t.Fatalf("not Anthropic's error envelope: %.300s", b)
		}
	} else {
		for _, k := range []string{"message", "type", "param", "code"} {
			if !e.Get("error." + k).Exists() {
				t.Fatalf("OpenAI error envelope lacks error.%s: %.300s", k, b)
			}
		}
		if e.Get("error.type").Str != "invalid_request_error" {
			t.Fatalf("error.type %q: %.300s", e.Get("error.type").Str, b)
		}
	}
	if msg := e.Get("error.message").Str; !strings.Contains(msg, want) {
		t.Fatalf("message %q does not contain %q", msg, want)
	}
	return e.Get("error.param").Str
}

// A 30 MB body nesting arrays or objects used to end the process with a fatal stack overflow in
// gjson.ValidBytes. Now every parsed route answers 400 in its dialect, forwards nothing, and
// keeps serving.
func TestDeeplyNestedBodiesThroughProxy(t *testing.T) {
	const size = 30 << 20
	bodies := []struct {
		name string
		body []byte
	}{
		{"arrays", append(bytes.Repeat([]byte("["), size/2), bytes.Repeat([]byte("]"), size/2)...)},
		{"objects", append(append([]byte(`{"model":"m","x":`), append(bytes.Repeat([]byte(`{"a":`), size/6), '1')...), bytes.Repeat([]byte("}"), size/6+1)...)},
	}
	h := newMsgHarness(t, nil)
	for _, rt := range parsedRoutes {
		for _, b := range bodies {
			t.Run(strings.TrimPrefix(rt.path, "/v1/")+"/"+b.name, func(t *testing.T) {
				status, resp := parsePost(t, h.proxyURL+rt.path, b.body)
				parseEnvelope(t, rt.anthropic, status, resp, "more than 1000 levels deep")
				if n := len(h.fake.Requests()); n != 0 {
					t.Fatalf("the upstream received %d requests", n)
				}
			})
		}
	}
	for _, rt := range parsedRoutes {
		t.Run(strings.TrimPrefix(rt.path, "/v1/")+"/afterwards", func(t *testing.T) {
			if status, resp := parsePost(t, h.proxyURL+rt.path, []byte(rt.normal)); status != http.StatusOK {
				t.Fatalf("a normal request after the deep ones: %d %.300s", status, resp)
			}
		})
	}
}

// Bodies compactd would read differently from the upstream (duplicate members), that carry a
// compaction item where compactd does not open one, or that it cannot skim at all, are refused
// on every parsed route with a 400 in the route's dialect, and nothing reaches the upstream.
// Before, the Messages routes forwarded what they could not skim, compaction blocks and all.
func TestRefusedBodiesThroughProxy(t *testing.T) {
	const msg = `{"type":"message","role":"user","content":"hi"}`
	openai := []struct {
		name, body, param, want string
	}{
		{"message read as compaction by a last-key-wins upstream", `{"model":"m","input":[` + msg + `,{"type":"message","role":"user","content":"x","type":"compaction","encrypted_content":"gAAAA"}]}`,
			"input[1].type", `"type" appears more than once`},
		{"compaction in a content part", `{"model":"m","input":[` + msg + `,` + msg + `,` + msg + `,{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"compaction","encrypted_content":"gAAAA"}]}]}`,
			"input[3].content[1]", "only valid as an item of input"},
		{"duplicate type in a content part", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a","type":"compaction"}]}]}`,
			"input[0].content[0].type", "appears more than once"},
		{"two inputs", `{"model":"m","input":[` + msg + `],"input":[]}`, "input", "appears more than once"},
		{"two models", `{"model":"m","input":[` + msg + `],"model":"n"}`, "model", "appears more than once"},
		{"truncated JSON", `{"model":"m","input":[` + msg, "", "We could not parse the JSON body"},
		{"not an object", `[` + msg + `]`, "", "We could not parse the JSON body"},
		{"input a number", `{"model":"m","input":5}`, "input", "string or an array"},
		{"item not an object", `{"model":"m","input":[1]}`, "input[0]", "must be an object"},
	}
	anthropic := []struct {
		name, body, want string
	}{
		{"two messages members", `{"model":"claude-fake","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"messages":[{"role":"user","content":[{"type":"compaction","content":"s","encrypted_content":"e"}]}]}`,
			`messages: the member "messages" appears more than once`},
		{"text block read as compaction", `{"model":"claude-fake","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"a","type":"compaction","content":"s","encrypted_content":"e"}]}]}`,
			"messages.0.content.0.type:"},
		{"duplicate block in tool_result", `{"model":"claude-fake","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"a","type":"compaction"}]}]}]}`,
			"messages.0.content.0.content.0.type:"},
		{"compaction in tool_result", `{"model":"claude-fake","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"compaction","content":"s","encrypted_content":"e"}]}]}]}`,
			"messages.1.content.0.content.0: a compaction block is only valid directly in a message's content"},
		{"malformed JSON", `{"model":"claude-fake","max_tokens":10,"messages":[{"role":"user","content":[{"type":"compaction","content":"s","encrypted_content":"e"}]}`,
			"compactd could not parse the request body"},
		{"messages not a list", `{"model":"claude-fake","max_tokens":10,"messages":{"role":"user","content":[{"type":"compaction","content":"s"}]}}`,
			"messages: Input should be a valid list"},
		{"content an object", `{"model":"claude-fake","max_tokens":10,"messages":[{"role":"user","content":{"type":"compaction","content":"s","encrypted_content":"e"}}]}`,
			"messages.0.content:"},
		{"message not an object", `{"model":"claude-fake","max_tokens":10,"messages":[{"role":"user","content":[{"type":"compaction","content":"s"}]},"hi"]}`,
			"messages.1: Input should be a valid dictionary"},
	}
	h := newMsgHarness(t, nil)
	for _, path := range []string{"/v1/responses", "/v1/responses/compact"} {
		for _, c := range openai {
			t.Run(strings.TrimPrefix(path, "/v1/")+"/"+c.name, func(t *testing.T) {
				before := len(h.fake.Requests())
				status, b := parsePost(t, h.proxyURL+path, []byte(c.body))
				if n := len(h.fake.Requests()) - before; n != 0 {
					t.Fatalf("the upstream received %d requests", n)
				}
				if param := parseEnvelope(t, false, status, b, c.want); param != c.param {
					t.Fatalf("param %q, want %q", param, c.param)
				}
			})
		}
	}
	for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
		for _, c := range anthropic {
			t.Run(strings.TrimPrefix(path, "/v1/")+"/"+c.name, func(t *testing.T) {
				before := len(h.fake.Requests())
				status, b := parsePost(t, h.proxyURL+path, []byte(c.body))
				if n := len(h.fake.Requests()) - before; n != 0 {
					t.Fatalf("the upstream received %d requests", n)
				}
				parseEnvelope(t, true, status, b, c.want)
			})
		}
	}
}
