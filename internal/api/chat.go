package api

import (
	"bytes"
	"fmt"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/jsonx"
)

// ChatRequest is a skim of a POST /v1/chat/completions body (OpenAI's Chat Completions API, the
// route most local-model agents speak): the few top-level fields compactd acts on and the
// messages as sub-slices of Body. Like ResponsesRequest nothing else is decoded, and every field
// compactd does not know is forwarded byte for byte.
//
// Chat Completions has no compaction item on the wire, so there is nothing here to open: a
// compaction of a Chat conversation is transparent (the upstream sees the compacted messages,
// the client its usual response).
type ChatRequest struct {
	Body []byte // the body as received; everything below aliases it

	Model  string
	Stream bool
	// IncludeUsage is stream_options.include_usage: the client asked for the final usage chunk.
	IncludeUsage bool
	// Tools is the raw JSON value of tools (nil when absent); Functions that of the deprecated
	// functions, which the upstream reads as tools too.
	Tools, Functions []byte

	Messages []ChatMessage

	msgStart, msgEnd int // byte span of the messages value in Body; 0,0 when absent
}

// ChatMessage is one element of `messages`, its exact bytes and its role.
type ChatMessage struct {
	Raw  []byte
	Role string
	// Handoff marks the user message compactd rendered from a compaction summary.
	Handoff bool
}

// ParseChatRequest skims body in one pass. It fails (with a *BodyError whose Param is in OpenAI's
// "messages[3].content" notation) on bodies that are not JSON objects or nest deeper than
// jsonx.MaxDepth, whose messages are not an array of objects with string, list or null content
// and list tool_calls, or that repeat a member compactd acts on (at the top level, in
// stream_options, in a message, a content part, a tool call or its function): JSON parsers
// disagree on which copy counts, and the upstream must read the conversation compactd counted
// and compacted. Everything else is left to the upstream.
func ParseChatRequest(body []byte) (*ChatRequest, error) {
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
		if bit := chatMemberBit(key.Str); bit != 0 {
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
		case "functions":
			r.Functions = raw
		case "messages":
			r.msgStart, r.msgEnd = value.Index, end
			err = r.scanMessages(raw)
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// chatMemberBit numbers the top-level members whose duplicates ParseChatRequest refuses.
func chatMemberBit(key string) uint8 {
	switch key {
	case "messages":
		return 1
	case "model":
		return 2
	case "stream":
		return 4
	case "stream_options":
		return 8
	case "tools":
		return 16
	case "functions":
		return 32
	}
	return 0
}

func scanStreamOptions(raw []byte) (bool, error) {
	include, seen := false, false
	var err error
	jsonx.Members(raw, func(k []byte, s, e int) bool {
		var buf [32]byte
		if string(memberName(k, &buf)) != "include_usage" {
			return true
		}
		if seen {
			err = duplicateError("stream_options.include_usage", "include_usage")
			return false
		}
		seen, include = true, string(raw[s:e]) == "true"
		return true
	})
	return include, err
}

// Members of a chat message, a content part, a tool call and its function that compactd reads
// (to classify, count, summarise or render them), one bit each: a duplicate is refused.
const (
	chatRole uint16 = 1 << iota
	chatContent
	chatToolCalls
	chatToolCallID
	chatName
	chatFunctionCall
	chatRefusal
	chatType
	chatText
	chatID
	chatFunction
	chatArguments
	chatCustom
	chatInput
)

func chatBit(name []byte) uint16 {
	switch string(name) {
	case "role":
		return chatRole
	case "content":
		return chatContent
	case "tool_calls":
		return chatToolCalls
	case "tool_call_id":
		return chatToolCallID
	case "name":
		return chatName
	case "function_call":
		return chatFunctionCall
	case "refusal":
		return chatRefusal
	case "type":
		return chatType
	case "text":
		return chatText
	case "id":
		return chatID
	case "function":
		return chatFunction
	case "arguments":
		return chatArguments
	case "custom":
		return chatCustom
	case "input":
		return chatInput
	}
	return 0
}

// chatMembers calls fn with each member of obj compactd reads, refusing a repeated one; param
// locates obj. Members compactd does not read are skipped, values are not decoded.
func chatMembers(obj []byte, param string, fn func(bit uint16, v []byte)) error {
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

func (r *ChatRequest) scanMessages(arr []byte) error {
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
		if m, err = scanChatMessage(arr[s:e], i); err != nil {
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
func scanChatMessage(raw []byte, i int) (ChatMessage, error) {
	m := ChatMessage{Raw: raw}
	at := fmt.Sprintf("messages[%d]", i)
	if raw[0] != '{' {
		return m, shapeError(at, "each message must be an object.")
	}
	var role, content, calls []byte
	err := chatMembers(raw, at, func(bit uint16, v []byte) {
		switch bit {
		case chatRole:
			role = v
		case chatContent:
			content = v
		case chatToolCalls:
			calls = v
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
					err = chatMembers(part, fmt.Sprintf("%s.content[%d]", at, j), func(uint16, []byte) {})
				}
				j++
				return err == nil
			})
		default:
			err = shapeError(at+".content", "content must be a string, an array of content parts, or null.")
		}
	}
	if err == nil && len(calls) > 0 && calls[0] != 'n' {
		err = scanToolCalls(calls, at+".tool_calls")
	}
	return m, err
}

// scanToolCalls checks an assistant message's tool_calls: an array of objects, each member
// compactd reads (id, type, function.name, function.arguments, custom.name, custom.input) once.
func scanToolCalls(arr []byte, at string) error {
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
		err = chatMembers(call, p, func(bit uint16, v []byte) {
			if (bit == chatFunction || bit == chatCustom) && v[0] == '{' && inner == nil {
				name := "function"
				if bit == chatCustom {
					name = "custom"
				}
				inner = chatMembers(v, p+"."+name, func(uint16, []byte) {})
			}
		})
		if err == nil {
			err = inner
		}
		return err == nil
	})
	return err
}

// HasMessages reports whether the body carried a messages member.
func (r *ChatRequest) HasMessages() bool { return r.msgEnd > r.msgStart }

// WithMessages returns a new body: Body with its messages value replaced by msgs, in order
// (added after the opening brace when the body had none). Every other byte of the body is kept
// as received, so unknown fields and the cache-relevant prefix survive.
func (r *ChatRequest) WithMessages(msgs [][]byte) []byte {
	arr := JSONArray(msgs)
	start, end := r.msgStart, r.msgEnd
	if !r.HasMessages() {
		start = bytes.IndexByte(r.Body, '{') + 1
		end = start
		if t := bytes.TrimLeft(r.Body[start:], " \t\r\n"); len(t) > 0 && t[0] != '}' {
			arr = append(arr, ',')
		}
		arr = append([]byte(`"messages":`), arr...)
	}
	out := make([]byte, 0, len(r.Body)-(end-start)+len(arr))
	out = append(out, r.Body[:start]...)
	out = append(out, arr...)
	return append(out, r.Body[end:]...)
}

// RawChatMessages returns the Raw of each message, for WithMessages.
func RawChatMessages(msgs []ChatMessage) [][]byte {
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		out[i] = m.Raw
	}
	return out
}

// ChatUserMessage renders a Chat Completions user message with string content.
func ChatUserMessage(text string) []byte {
	b := make([]byte, 0, len(text)+32)
	b = append(b, `{"role":"user","content":`...)
	b = AppendString(b, text)
	return append(b, '}')
}
