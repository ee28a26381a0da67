package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/jsonx"
)

// The Chat Completions skim as it was before the one-pass walk (validate everything, then gjson
// over the top level, then jsonx.Elements/Members over every message, part and tool call): the
// oracle the one-pass skim must agree with on every body, refusals and their params included
// (FuzzParseChatRequest, TestChatOnePassMatchesTwoPass).

func parseChatTwoPass(body []byte) (*ChatRequest, error) {
	if err := checkBody(body); err != nil {
		return nil, err
	}
	s := unsafe.String(unsafe.SliceData(body), len(body)) // read-only view, no copy
	root := gjson.Parse(s)
	if !root.IsObject() {
		return nil, &BodyError{Kind: ErrInvalidJSON, Message: "The request body must be a JSON object."}
	}
	r := &ChatRequest{Body: body}
	var err error
	var seen uint8
	root.ForEach(func(key, value gjson.Result) bool {
		if bit := chatMemberBit([]byte(key.Str)); bit != 0 {
			if seen&bit != 0 {
				err = duplicateError(key.Str, key.Str)
				return false
			}
			seen |= bit
		}
		end := value.Index + len(value.Raw)
		raw := body[value.Index:end]
		switch key.Str {
		case "model":
			r.Model = value.Str
		case "stream":
			r.Stream = value.Type == gjson.True
		case "stream_options":
			r.IncludeUsage, err = scanStreamOptions(raw)
		case "tools":
			r.Tools = raw
			err = toolsTwoPass(raw, openAINotation)
		case "tool_choice":
			err = toolChoiceTwoPass(raw)
		case "functions":
			r.Functions = raw
		case "messages":
			r.msgStart, r.msgEnd = value.Index, end
			err = scanChatMessagesTwoPass(r, raw)
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// chatMembers calls fn with each member of obj compactd reads, refusing a repeated one; param
// locates obj. Members compactd does not read are skipped, values are not decoded.
func chatMembersTwoPass(obj []byte, param string, fn func(bit uint16, v []byte)) error {
	var seen uint16
	var err error
	jsonx.Members(obj, func(k []byte, s, e int) bool {
		var buf [32]byte
		name := memberName(k, &buf)
		bit := chatBit(name)
		if bit == 0 {
			return true
		}
		if seen&bit != 0 {
			err = duplicateError(param+"."+string(name), string(name))
			return false
		}
		seen |= bit
		fn(bit, obj[s:e])
		return true
	})
	return err
}

func scanChatMessagesTwoPass(r *ChatRequest, arr []byte) error {
	if string(arr) == "null" {
		return nil
	}
	if arr[0] != '[' {
		return shapeError("messages", "messages must be an array of message objects.")
	}
	var err error
	i := 0
	jsonx.Elements(arr, func(s, e int) bool {
		var m ChatMessage
		if m, err = scanChatMessageTwoPass(arr[s:e], i); err != nil {
			return false
		}
		r.Messages = append(r.Messages, m)
		i++
		return true
	})
	return err
}

// scanChatMessage reads messages[i]: its role, and the members compactd reads checked for
// duplicates and shape, down to the content parts and tool calls.
func scanChatMessageTwoPass(raw []byte, i int) (ChatMessage, error) {
	m := ChatMessage{Raw: raw}
	at := fmt.Sprintf("messages[%d]", i)
	if raw[0] != '{' {
		return m, shapeError(at, "each message must be an object.")
	}
	var role, content, calls, fc []byte
	err := chatMembersTwoPass(raw, at, func(bit uint16, v []byte) {
		switch bit {
		case chatRole:
			role = v
		case chatContent:
			content = v
		case chatToolCalls:
			calls = v
		case chatFunctionCall:
			fc = v
		}
	})
	if err != nil {
		return m, err
	}
	m.Role = str(role)
	if len(content) > 0 {
		switch content[0] {
		case '"', 'n':
		case '[':
			j := 0
			jsonx.Elements(content, func(s, e int) bool {
				if part := content[s:e]; part[0] == '{' {
					err = chatMembersTwoPass(part, fmt.Sprintf("%s.content[%d]", at, j), func(uint16, []byte) {})
				}
				j++
				return err == nil
			})
		default:
			err = shapeError(at+".content", "content must be a string, an array of content parts, or null.")
		}
	}
	if err == nil && len(calls) > 0 && calls[0] != 'n' {
		err = scanToolCallsTwoPass(calls, at+".tool_calls")
	}
	if err == nil && len(fc) > 0 && fc[0] == '{' {
		err = chatMembersTwoPass(fc, at+".function_call", func(uint16, []byte) {})
	}
	return m, err
}

// scanToolCalls checks an assistant message's tool_calls: an array of objects, each member
// compactd reads (id, type, function.name, function.arguments, custom.name, custom.input) once.
func scanToolCallsTwoPass(arr []byte, at string) error {
	if arr[0] != '[' {
		return shapeError(at, "tool_calls must be an array of tool calls.")
	}
	var err error
	j := 0
	jsonx.Elements(arr, func(s, e int) bool {
		call, p := arr[s:e], fmt.Sprintf("%s[%d]", at, j)
		j++
		if call[0] != '{' {
			err = shapeError(p, "each tool call must be an object.")
			return false
		}
		var inner error
		err = chatMembersTwoPass(call, p, func(bit uint16, v []byte) {
			if (bit == chatFunction || bit == chatCustom) && v[0] == '{' && inner == nil {
				name := "function"
				if bit == chatCustom {
					name = "custom"
				}
				inner = chatMembersTwoPass(v, p+"."+name, func(uint16, []byte) {})
			}
		})
		if err == nil {
			err = inner
		}
		return err == nil
	})
	return err
}

// sameChatAsTwoPass fails unless the one-pass skim decided exactly what the two-pass one does:
// the same refusal (kind, param, message) or the same request (fields, message spans, roles).
func sameChatAsTwoPass(t *testing.T, body []byte, r *ChatRequest, err error) {
	t.Helper()
	r0, err0 := parseChatTwoPass(body)
	if sameRefusal(t, body, err, err0) {
		return
	}
	if r.Model != r0.Model || r.Stream != r0.Stream || r.IncludeUsage != r0.IncludeUsage ||
		!sameRaw(r.Tools, r0.Tools) || !sameRaw(r.Functions, r0.Functions) ||
		r.msgStart != r0.msgStart || r.msgEnd != r0.msgEnd || len(r.Messages) != len(r0.Messages) {
		t.Fatalf("%.300q: one pass read %+v; two passes %+v", body, *r, *r0)
	}
	for i := range r.Messages {
		a, b := r.Messages[i], r0.Messages[i]
		if !bytes.Equal(a.Raw, b.Raw) || a.Role != b.Role || a.Handoff != b.Handoff {
			t.Fatalf("%.300q: message %d: one pass %+v; two passes %+v", body, i, a, b)
		}
	}
}

// TestChatOnePassMatchesTwoPass: on the refusals the hostile suites care about, and where several
// apply at once (which one wins is part of the contract), the one-pass skim answers as the
// two-pass one did.
func TestChatOnePassMatchesTwoPass(t *testing.T) {
	call := `{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}`
	cases := append([]string{
		`{"model":"m\u00e9","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],"tools":[],"functions":null}`,
		`{"messages":null}`, `{"messages":5}`, `{"messages":{}}`, `{"messages":"x"}`, `[]`, `"x"`, ``, `{`, `{"a":1}x`,
		`{"stream_options":{"include_usage":true,"include_usage":false}}`, `{"stream_options":5}`, `{"stream_options":[]}`,
		`{"messages":[{"role":"user","content":"a"},1]}`,
		`{"messages":[{"role":"user"}],"model":"a","model":"b"}`,
		`{"model":"a","m\u0065ssages":[],"messages":[]}`,
		`{"messages":[{"role":"user","content":null},{"role":"user","content":true},{"content":{}}]}`,
		`{"messages":[{"role":"user","content":[1,"s",{"type":"text","text":"a"}]}]}`,
		`{"messages":[{"role":"assistant","tool_calls":null},{"role":"assistant","tool_calls":{}}]}`,
		`{"messages":[{"role":"assistant","tool_calls":[` + call + `,1]}]}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"a","name":"b"},"id":"x","id":"y"}]}]}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"a","name":"b"},"custom":{"input":1,"input":2}}]}]}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"a"},"custom":{"input":1,"input":2}},{"id":1,"id":2}]}]}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"function":5,"custom":[1]}]}]}`,
		// a duplicate in the message wins over earlier content and tool_calls refusals, content
		// over tool_calls wherever they come
		`{"messages":[{"content":[{"type":"a","type":"b"}],"role":"user","role":"x"}]}`,
		`{"messages":[{"tool_calls":[1],"content":[{"text":"a","text":"b"}]}]}`,
		`{"messages":[{"tool_calls":[{"id":1,"id":2}],"content":5}]}`,
		`{"messages":[{"tool_calls":5,"content":"x"}]}`,
		`{"messages":[{"content":[{"type":"a","type":"b"},{"text":1,"text":2}]}]}`,
		`{"messages":[{"r\u006fle":"user","role":"system"}]}`,
		// JSON errors anywhere win over any refusal before them
		`{"messages":[{"role":"a","role":"b"}],"x":[tru]}`,
		`{"messages":[{"role":"a","role":"b"}],"x":"` + "\xff" + `"}`,
		`{"messages":[{"content":[{"type":"a","type":"b"}],"x":` + strings.Repeat("[", 1001) + `}]}`,
		`{"messages":[{"role":"user","content":"x"}]} {}`,
		// tool_choice, n and the tools' names: what recall decides from
		`{"n":1,"messages":[{"role":"a","role":"b"}],"n":2}`,
		`{"tool_choice":{"type":"none","type":"auto"},"messages":[{"role":"a","role":"b"}]}`,
		`{"messages":[{"role":"a","role":"b"}],"tools":[{"function":{"name":"a","name":"b"}}]}`,
		`{"tools":[{"type":"function","function":{"name":"a"},"function":{"name":"b","name":"c"}}]}`,
		`{"tools":[{"type":"function","function":{"name":"a","name":"b"}}],"x":"` + "\xff" + `"}`,
		`{"messages":[{"role":"assistant","function_call":{"name":"a","name":"b"}}]}`,
		`{"messages":[{"function_call":{"arguments":1,"arguments":2},"tool_calls":[{"id":1,"id":2}]}]}`,
		`{"messages":[{"function_call":{"arguments":1,"arguments":2},"content":5}]}`,
		`{"messages":[{"function_call":{"arguments":1,"arguments":2},"role":"a","role":"b"}]}`,
		`{"messages":[{"function_call":"x","function_call":{}}]}`,
	}, chatSeeds...)
	for _, c := range cases {
		r, err := ParseChatRequest([]byte(c))
		sameChatAsTwoPass(t, []byte(c), r, err)
	}
}

// TestChatAgentBody: the benchmark's agent bodies are valid JSON of about the size asked for,
// and both skims read them alike.
func TestChatAgentBody(t *testing.T) {
	for _, size := range []int{2 << 10, 256 << 10} {
		body := chatAgentBody(size)
		if !json.Valid(body) || len(body) < size*3/4 || len(body) > size*5/4 {
			t.Fatalf("chatAgentBody(%d): %d bytes, valid %v", size, len(body), json.Valid(body))
		}
		r, err := ParseChatRequest(body)
		if err != nil || len(r.Messages) < 4 || !r.IncludeUsage || r.Tools == nil {
			t.Fatalf("chatAgentBody(%d): %v, %+v", size, err, r)
		}
		sameChatAsTwoPass(t, body, r, err)
	}
}
