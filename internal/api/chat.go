package api

import (
	"bytes"
	"fmt"

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

	from *Prefix // the prefix the skim resumed from, nil when it read the whole body
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
// stream_options, tool_choice or a tool, in a message, a content part, a tool call, its function
// or a function_call): JSON parsers disagree on which copy counts, and the upstream must read the
// conversation compactd counted and compacted, with the tool choice recall was decided on.
// Everything else is left to the upstream.
func ParseChatRequest(body []byte) (*ChatRequest, error) { return parseChat(body, nil) }

func parseChat(body []byte, from *Prefix) (*ChatRequest, error) {
	// One pass, as ParseMessagesRequest: the walk validates every byte it passes and descends
	// only where the skim reads (see chat_twopass_test.go, the oracle it must agree with).
	it := jsonx.NewIter(body)
	err := skimObject(it, body)
	if err != nil {
		return nil, err
	}
	r := &ChatRequest{Body: body}
	var seen uint8
	it.Object(func(k []byte, _, vs int) bool {
		var buf [32]byte
		name := memberName(k, &buf)
		if bit := chatMemberBit(name); bit != 0 {
			if seen&bit != 0 {
				err = duplicateError(string(name), string(name))
				return false
			}
			seen |= bit
		}
		if string(name) == "messages" && it.Peek() == '[' {
			err = r.scanMessages(it, from)
			r.msgStart, r.msgEnd = vs, it.Pos()
			return err == nil
		}
		var end int
		var ok bool
		if end, ok, err = scanMember(it, name, openAINotation); !ok || err != nil || it.Err() != nil {
			return false
		}
		raw := body[vs:end]
		switch string(name) {
		case "model":
			r.Model = strValue(raw)
		case "stream":
			r.Stream = string(raw) == "true"
		case "stream_options":
			r.IncludeUsage, err = scanStreamOptions(raw)
		case "tools":
			r.Tools = raw
		case "functions":
			r.Functions = raw
		case "messages":
			r.msgStart, r.msgEnd = vs, end
			if string(raw) != "null" {
				err = shapeError("messages", "messages must be an array of message objects.")
			}
		}
		return err == nil
	})
	if e := skimEnd(body, it, err); e != nil {
		return nil, e
	}
	return r, nil
}

// chatMemberBit numbers the top-level members whose duplicates ParseChatRequest refuses: every
// member compactd reads (tool_choice and n decide whether a turn is offered the recall tool).
func chatMemberBit(key []byte) uint8 {
	switch string(key) {
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
	case "tool_choice":
		return 64
	case "n":
		return 128
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

// chatMembers walks the object at it and calls fn with each member compactd reads (and the
// offset of its value), refusing a repeated one; at locates the object, and is only called to
// build a refusal. Members compactd does not read are skipped; fn may walk the value. A refusal
// does not stop the walk: the object's own members must all be seen, and the caller may have a
// refusal further on that wins (a duplicate role after a bad content part).
func chatMembers(it *jsonx.Iter, at func() string, fn func(bit uint16, vs int)) error {
	var seen uint16
	var err error
	it.Object(func(k []byte, _, vs int) bool {
		if err != nil {
			return true
		}
		var buf [32]byte
		name := memberName(k, &buf)
		bit := chatBit(name)
		if bit == 0 {
			return true
		}
		if seen&bit != 0 {
			err = duplicateError(at()+"."+string(name), string(name))
			return true
		}
		seen |= bit
		if fn != nil {
			fn(bit, vs)
		}
		return true
	})
	return err
}

// scanMessages walks the messages array at it; the first refusal stops it.
func (r *ChatRequest) scanMessages(it *jsonx.Iter, from *Prefix) error {
	var err error
	it.Array(func(_, s int) bool {
		if len(r.Messages) == 0 && from.resumeAt(prefixChat, s, r.Body) {
			return r.resumeMessages(it, from)
		}
		i := len(r.Messages)
		var m ChatMessage
		if m, err = scanChatMessage(it, r.Body, i, s); err != nil {
			return false
		}
		r.Messages = append(r.Messages, m)
		return true
	})
	return err
}

// scanChatMessage reads messages[i], which starts at body[s]: its role, and the members compactd
// reads checked for duplicates and shape, down to the content parts, tool calls and the
// deprecated function_call. A duplicate member of the message wins over a refusal in its content,
// which wins over one in its tool_calls, then in its function_call, wherever they come in the
// message (as when its members were checked first).
func scanChatMessage(it *jsonx.Iter, body []byte, i, s int) (ChatMessage, error) {
	at := func() string { return fmt.Sprintf("messages[%d]", i) }
	if it.Peek() != '{' {
		return ChatMessage{}, shapeError(at(), "each message must be an object.")
	}
	var role, content, calls []byte
	var contentErr, callsErr, fcErr error
	err := chatMembers(it, at, func(bit uint16, vs int) {
		switch {
		case bit == chatContent && it.Peek() == '[':
			contentErr = scanChatParts(it, at)
		case bit == chatToolCalls && it.Peek() == '[':
			callsErr = scanToolCalls(it, func() string { return at() + ".tool_calls" })
		case bit == chatFunctionCall && it.Peek() == '{':
			// the deprecated function_call: its name and arguments are read as a tool call's
			fcErr = chatMembers(it, func() string { return at() + ".function_call" }, nil)
		default:
			if _, _, ok := it.Value(); !ok {
				return
			}
		}
		switch bit {
		case chatRole:
			role = body[vs:it.Pos()]
		case chatContent:
			content = body[vs:it.Pos()]
		case chatToolCalls:
			calls = body[vs:it.Pos()]
		}
	})
	m := ChatMessage{Raw: body[s:it.Pos()]}
	if err != nil || it.Err() != nil {
		return m, err
	}
	m.Role = str(role)
	if len(content) > 0 {
		switch content[0] {
		case '"', 'n':
		case '[':
			err = contentErr
		default:
			err = shapeError(at()+".content", "content must be a string, an array of content parts, or null.")
		}
	}
	if err == nil && len(calls) > 0 && calls[0] != 'n' {
		if calls[0] != '[' {
			err = shapeError(at()+".tool_calls", "tool_calls must be an array of tool calls.")
		} else {
			err = callsErr
		}
	}
	if err == nil {
		err = fcErr
	}
	return m, err
}

// scanChatParts walks a message's content array at it: each part that is an object repeats no
// member compactd reads. It returns the first refusal and walks the rest without reading it.
func scanChatParts(it *jsonx.Iter, at func() string) error {
	var err error
	it.Array(func(j, _ int) bool {
		if err == nil && it.Peek() == '{' {
			err = chatMembers(it, func() string { return fmt.Sprintf("%s.content[%d]", at(), j) }, nil)
		}
		return true
	})
	return err
}

// scanToolCalls walks an assistant message's tool_calls array at it: objects, each member
// compactd reads (id, type, function.name, function.arguments, custom.name, custom.input)
// once. It returns the first refusal (a call's duplicate before one in its function) and walks
// the rest without reading it.
func scanToolCalls(it *jsonx.Iter, at func() string) error {
	var err error
	it.Array(func(j, _ int) bool {
		if err != nil {
			return true
		}
		p := func() string { return fmt.Sprintf("%s[%d]", at(), j) }
		if it.Peek() != '{' {
			err = shapeError(p(), "each tool call must be an object.")
			return true
		}
		var inner error
		err = chatMembers(it, p, func(bit uint16, _ int) {
			if (bit == chatFunction || bit == chatCustom) && it.Peek() == '{' && inner == nil {
				name := "function"
				if bit == chatCustom {
					name = "custom"
				}
				inner = chatMembers(it, func() string { return p() + "." + name }, nil)
			}
		})
		if err == nil {
			err = inner
		}
		return true
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

// ChatUserMessage renders a Chat Completions user message with string content.
func ChatUserMessage(text string) []byte {
	b := make([]byte, 0, len(text)+32)
	b = append(b, `{"role":"user","content":`...)
	b = AppendString(b, text)
	return append(b, '}')
}
