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

// The Messages skim as it was before the one-pass walk (validate everything, then gjson over the
// top level, then jsonx.Elements/Members over every message and block): the oracle the one-pass
// skim must agree with on every body, refusals and their params included
// (FuzzParseMessagesRequest, TestMessagesOnePassMatchesTwoPass).

func parseMessagesTwoPass(body []byte) (*MessagesRequest, error) {
	if err := checkBody(body); err != nil {
		return nil, err
	}
	s := unsafe.String(unsafe.SliceData(body), len(body)) // read-only view, no copy
	root := gjson.Parse(s)
	if !root.IsObject() {
		return nil, &BodyError{Kind: ErrInvalidJSON, Message: "The request body must be a JSON object."}
	}
	r := &MessagesRequest{Body: body}
	var err error
	var seen uint8
	root.ForEach(func(key, value gjson.Result) bool {
		if bit := messagesMemberBit([]byte(key.Str)); bit != 0 {
			if seen&bit != 0 {
				err = duplicateError(key.Str, key.Str)
				return false
			}
			seen |= bit
		}
		end := value.Index + len(value.Raw)
		r.members = append(r.members, member{key: key.Str, start: key.Index, end: end})
		raw := body[value.Index:end]
		switch key.Str {
		case "model":
			r.Model = value.Str
		case "stream":
			r.Stream = value.Type == gjson.True
		case "system":
			r.System = raw
			err = checkSystemTwoPass(raw)
		case "tools":
			r.Tools = raw
			err = toolsTwoPass(raw, anthropicNotation)
		case "tool_choice":
			err = toolChoiceTwoPass(raw)
		case "context_management":
			r.ContextManagement = raw
			err = strictTwoPass(raw, key.Str)
		case "compaction":
			r.Compaction = raw
			err = strictTwoPass(raw, key.Str)
		case "messages":
			err = scanMessagesTwoPass(r, raw)
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func scanMessagesTwoPass(r *MessagesRequest, arr []byte) error {
	if string(arr) == "null" {
		return nil
	}
	if arr[0] != '[' {
		return shapeError("messages", "Input should be a valid list")
	}
	var err error
	i := 0
	jsonx.Elements(arr, func(s, e int) bool {
		var msg Message
		if msg, err = scanMessageTwoPass(r, arr[s:e], i); err != nil {
			return false
		}
		r.Messages = append(r.Messages, msg)
		i++
		return true
	})
	return err
}

func scanMessageTwoPass(r *MessagesRequest, raw []byte, i int) (Message, error) {
	msg := Message{Raw: raw}
	if raw[0] != '{' {
		return msg, shapeError(fmt.Sprintf("messages.%d", i), "Input should be a valid dictionary")
	}
	var seen uint16
	var role, content []byte
	var err error
	jsonx.Members(raw, func(k []byte, s, e int) bool {
		var buf [32]byte
		var bit uint16
		switch name := memberName(k, &buf); string(name) {
		case "role":
			bit, role = blockRole, raw[s:e]
		case "content":
			bit, content = blockContent, raw[s:e]
		default:
			return true
		}
		if seen&bit != 0 {
			name := "role"
			if bit == blockContent {
				name = "content"
			}
			err = duplicateError(fmt.Sprintf("messages.%d.%s", i, name), name)
			return false
		}
		seen |= bit
		return true
	})
	if err != nil {
		return msg, err
	}
	msg.Role = str(role)
	switch {
	case content == nil:
	case content[0] == '"':
		msg.StringContent = true
		// The client's string as it spelt it, whose text block ContentBlocks makes.
		msg.text = content
	case content[0] == '[':
		j := 0
		jsonx.Elements(content, func(s, e int) bool {
			var blk Block
			if blk, err = scanBlockTwoPass(content[s:e], false); err != nil {
				err = within(err, fmt.Sprintf("messages.%d.content.%d", i, j))
				return false
			}
			if blk.Type == BlockCompaction {
				r.Blocks = append(r.Blocks, BlockRef{i, j})
			}
			msg.Blocks = append(msg.Blocks, blk)
			j++
			return true
		})
	default:
		err = shapeError(fmt.Sprintf("messages.%d.content", i), "Input should be a valid string or a valid list of content blocks")
	}
	return msg, err
}

func scanBlockTwoPass(raw []byte, nested bool) (Block, error) {
	blk := Block{Raw: raw}
	if raw[0] != '{' {
		if nested {
			return blk, nil
		}
		return blk, shapeError("", "Input should be a valid dictionary")
	}
	var seen uint16
	var typ, content []byte
	var err error
	jsonx.Members(raw, func(k []byte, s, e int) bool {
		var buf [32]byte
		name := memberName(k, &buf)
		bit := blockBit(name)
		if bit == 0 {
			return true
		}
		if seen&bit != 0 {
			err = duplicateError("."+string(name), string(name))
			return false
		}
		seen |= bit
		switch bit {
		case blockType:
			typ = raw[s:e]
		case blockContent:
			content = raw[s:e]
		}
		return true
	})
	if err != nil {
		return blk, err
	}
	blk.Type = str(typ)
	if blk.Type == BlockCompaction && nested {
		return blk, misplacedBlock()
	}
	if blk.Type == BlockCompaction || len(content) == 0 || content[0] != '[' {
		return blk, nil
	}
	n := 0
	jsonx.Elements(content, func(s, e int) bool {
		if _, err = scanBlockTwoPass(content[s:e], true); err != nil {
			err = within(err, fmt.Sprintf(".content.%d", n))
		}
		n++
		return err == nil
	})
	return blk, err
}

func checkSystemTwoPass(raw []byte) error {
	if len(raw) == 0 || raw[0] != '[' {
		return nil
	}
	var err error
	i := 0
	jsonx.Elements(raw, func(s, e int) bool {
		if _, err = scanBlockTwoPass(raw[s:e], true); err != nil {
			err = within(err, fmt.Sprintf("system.%d", i))
		}
		i++
		return err == nil
	})
	return err
}

// sameMessagesAsTwoPass fails unless the one-pass skim decided exactly what the two-pass one
// does: the same refusal (kind, param, message) or the same request (fields, message and block
// spans, types, roles, compaction refs, and the member spans Rewrite splices).
func sameMessagesAsTwoPass(t *testing.T, body []byte, r *MessagesRequest, err error) {
	t.Helper()
	r0, err0 := parseMessagesTwoPass(body)
	if sameRefusal(t, body, err, err0) {
		return
	}
	if r.Model != r0.Model || r.Stream != r0.Stream || !sameRaw(r.System, r0.System) ||
		!sameRaw(r.Tools, r0.Tools) || !sameRaw(r.ContextManagement, r0.ContextManagement) ||
		!sameRaw(r.Compaction, r0.Compaction) || len(r.Messages) != len(r0.Messages) ||
		fmt.Sprint(r.Blocks) != fmt.Sprint(r0.Blocks) || fmt.Sprint(r.members) != fmt.Sprint(r0.members) {
		t.Fatalf("%.300q: one pass read %+v; two passes %+v", body, *r, *r0)
	}
	for i := range r.Messages {
		a, b := r.Messages[i], r0.Messages[i]
		ab, bb := a.ContentBlocks(), b.ContentBlocks()
		if !bytes.Equal(a.Raw, b.Raw) || a.Role != b.Role || a.StringContent != b.StringContent ||
			a.Handoff != b.Handoff || len(a.Blocks) != len(b.Blocks) || len(ab) != len(bb) {
			t.Fatalf("%.300q: message %d: one pass %+v; two passes %+v", body, i, a, b)
		}
		for j := range ab {
			if !bytes.Equal(ab[j].Raw, bb[j].Raw) || ab[j].Type != bb[j].Type {
				t.Fatalf("%.300q: block %d.%d: one pass %+v; two passes %+v", body, i, j, ab[j], bb[j])
			}
		}
	}
}

// sameRaw is bytes.Equal that also tells an absent value (nil) from an empty one.
func sameRaw(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// TestMessagesOnePassMatchesTwoPass: on the refusals the hostile suites care about, and where
// several apply at once (which one wins is part of the contract), the one-pass skim answers as
// the two-pass one did.
func TestMessagesOnePassMatchesTwoPass(t *testing.T) {
	tr := func(content string) string {
		return `{"type":"tool_result","tool_use_id":"t","content":` + content + `}`
	}
	cases := append([]string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		` {"messages":[{"role":"user","content":"h\u00e9 <b> \u2028"}],"model":"m\u00e9"} `,
		// string content: copied when it needs no re-encoding, re-encoded when it does
		"{\"messages\":[{\"role\":\"user\",\"content\":\"a \u2028 b \u2029 c \u2027 \u00e2\\n\"}]}",
		"{\"messages\":[{\"role\":\"user\",\"content\":\"\xe2\x80\xa8\"},{\"content\":\"x \xe2\x80\xa9\"},{\"content\":\"\xe2\x80\xa7\xe2\x82\xac\"}]}",
		"{\"messages\":[{\"role\":\"user\",\"content\":\"x\xe2\x80\"}]}",
		`{"messages":[{"content":"\u2028 \/ \ud83d\ude00 \ud800"},{"content":""},{"content":"<&>\u0041"}]}`,
		`{"messages":null}`, `{"messages":5}`, `{"messages":{}}`, `{"messages":"x"}`, `[]`, `"x"`, ``, `{`, `{"a":1}x`,
		`{"messages":[{"role":"user","content":"a"},1]}`,
		`{"messages":[{"role":"user"}],"model":"a","model":"b"}`,
		`{"model":"a","m\u0065ssages":[],"messages":[]}`,
		`{"messages":[{"role":"user","content":null}]}`,
		`{"messages":[{"role":"user","content":5}]}`,
		`{"messages":[{"role":"user","content":[1]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"compaction","content":"s","encrypted_content":"e"}]}]}`,
		// a duplicate in the message wins over an earlier bad block or content
		`{"messages":[{"content":[{"type":"text","type":"x"}],"role":"user","role":"assistant"}]}`,
		`{"messages":[{"content":5,"role":"user","role":"assistant"}]}`,
		`{"messages":[{"content":[1],"content":"x"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"},{"type":"text","type":"c"}]}]}`,
		// a duplicate in a block wins over its nested content; a compaction block's content is
		// not read, wherever its type comes
		`{"messages":[{"role":"user","content":[` + tr(`[{"type":"compaction"}]`) + `]}]}`,
		`{"messages":[{"role":"user","content":[{"content":[{"type":"compaction"}],"type":"tool_result","type":"x"}]}]}`,
		`{"messages":[{"role":"user","content":[{"content":[{"type":"compaction"}],"type":"compaction"}]}]}`,
		`{"messages":[{"role":"user","content":[{"content":[{"type":"text","type":"x"}],"type":"compaction"}]}]}`,
		`{"messages":[{"role":"user","content":[{"content":[{"type":"text","type":"x"}],"type":"search_result"}]}]}`,
		`{"messages":[{"role":"user","content":[` + tr(`[1,"s",{"type":"text"},{"content":[{"type":"compaction"}]}]`) + `]}]}`,
		`{"messages":[{"role":"user","content":[` + tr(`[{"type":"compaction","content":[{"type":"x","type":"y"}]}]`) + `]}]}`,
		`{"messages":[{"role":"user","content":[` + tr(`[{"content":[{"type":"x","type":"y"}],"type":"compaction"}]`) + `]}]}`,
		`{"messages":[{"role":"user","content":[` + tr(`[{"typ\u0065":"compaction"}]`) + `]}]}`,
		`{"system":[{"type":"compaction"}],"messages":[]}`,
		`{"system":[{"type":"text","text":"a"},"s",{"type":"text","text":"a","text":"b"}],"messages":[]}`,
		`{"system":"plain","messages":[{"role":"user","content":"x"}]}`,
		`{"system":null,"tools":null,"context_management":{},"compaction":{}}`,
		`{"messages":[],"messages":[]}`,
		`{"stream":true,"stream":false}`,
		`{"stream":true,"tools":[{"name":"a"}],"x":1,"x":2}`,
		// JSON errors anywhere win over any refusal before them
		`{"messages":[{"role":"a","role":"b"}],"x":[tru]}`,
		`{"messages":[{"role":"a","role":"b"}],"x":"` + "\xff" + `"}`,
		`{"messages":[{"role":"a","role":"b"}],"x":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`,
		`{"messages":[{"role":"user","content":[{"type":"text","type":"x"}],"x":` + strings.Repeat("[", 1001) + `}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]} {}`,
		`{"messages":[{"role":"user","content":` + nested(jsonx.MaxDepth-3, false) + `}]}`,
		`{"messages":[{"role":"user","content":[` + tr(nested(jsonx.MaxDepth-6, false)) + `]}]}`,
		`{"messages":[{"role":"user","content":[` + tr(nested(jsonx.MaxDepth-4, false)) + `]}]}`,
		`{"messages":[{"role":"user","content":[` + strings.Repeat(`{"type":"x","content":[`, 490) + `{"type":"compaction"}` + strings.Repeat(`]}`, 490) + `]}]}`,
		`{"messages":[{"role":"user","content":[` + strings.Repeat(`{"type":"x","content":[`, 490) + `{"type":"t","type":"u"}` + strings.Repeat(`]}`, 490) + `]}]}`,
		`{"messages":[{"role":"user","content":[` + strings.Repeat(`{"type":"x","content":[`, 500) + `{"type":"t"}` + strings.Repeat(`]}`, 500) + `]}]}`,
		`{"\u00e9":1,"caf\u00e9":2,"\ud800":3,"messages":[]}`,
		// tool_choice, the tools' names, and every member of context_management and compaction
		`{"tool_choice":{"type":"none"},"messages":[],"tool_choice":{"type":"auto"}}`,
		`{"tool_choice":{"type":"any","type":"auto"},"messages":[{"role":"a","role":"b"}]}`,
		`{"messages":[{"role":"a","role":"b"}],"tool_choice":{"type":"any","type":"auto"}}`,
		`{"tools":[{"name":"a"},{"name":"b","name":"c"}],"system":[{"type":"compaction"}]}`,
		`{"tools":[1,{"function":{"name":"a","name":"b"}}],"tool_choice":"auto"}`,
		`{"context_management":{"edits":[{"type":"a","trigger":{"value":1,"value":2},"type":"b"}]}}`,
		`{"context_management":{"edits":[{"type":"a"},{"keep":[{"type":1},{"type":2,"type":3}]}]}}`,
		`{"context_management":{"x":{"y":1,"y":2},"edits":null,"edits":[]}}`,
		`{"context_management":[{"edits":1},{"edits":1,"edits":2}],"compaction":{"instructions":1,"instructions":2}}`,
		`{"compaction":{"type":"summarize","type":"x"},"messages":[{"role":"a","role":"b"}]}`,
		`{"context_management":{"edits":[{"type":"a","type":"b"}]},"x":[tru]}`,
		`{"context_management":` + strings.Repeat(`{"edits":[`, 300) + strings.Repeat(`]}`, 300) + `}`,
		`{"context_management":` + strings.Repeat(`{"edits":[`, 300) + `{"type":1,"type":2}` + strings.Repeat(`]}`, 300) + `}`,
		`{"context_management":` + strings.Repeat(`{"edits":[`, 500) + strings.Repeat(`]}`, 500) + `}`,
	}, messagesSeeds...)
	for _, c := range cases {
		r, err := ParseMessagesRequest([]byte(c))
		sameMessagesAsTwoPass(t, []byte(c), r, err)
	}
}

// TestClaudeCodeBody: the benchmark's Claude Code bodies are valid JSON of about the size asked
// for, and both skims read them alike (the tool results' blocks nested in content included).
func TestClaudeCodeBody(t *testing.T) {
	for _, size := range []int{2 << 10, 256 << 10} {
		body := claudeCodeBody(size)
		if !json.Valid(body) || len(body) < size*3/4 || len(body) > size*5/4 {
			t.Fatalf("claudeCodeBody(%d): %d bytes, valid %v", size, len(body), json.Valid(body))
		}
		r, err := ParseMessagesRequest(body)
		if err != nil || len(r.Messages) < 3 || r.Model == "" || !r.Stream || r.System == nil || r.Tools == nil {
			t.Fatalf("claudeCodeBody(%d): %v, %+v", size, err, r)
		}
		sameMessagesAsTwoPass(t, body, r, err)
	}
}
