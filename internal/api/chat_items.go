package api

import (
	"github.com/tidwall/gjson"
)

// ChatItems renders Chat Completions messages as the neutral item view the compaction engine
// works on (the Responses item shapes package compact partitions, counts, renders for the
// summariser and mines for the facts ledger), and owner[k], the index of the message items[k]
// came from. Each message gives one item or more, in order:
//
//   - system, developer and user messages are one "message" item holding the message's own
//     bytes (Chat's string content and text parts read the same as Responses'), so the window's
//     instructions and retained user messages are the client's messages verbatim;
//   - an assistant message gives a "message" item for its content (or refusal), when it has
//     any, then a "function_call" item per function tool call (custom tool calls give
//     "custom_tool_call"; the deprecated function_call member a "function_call");
//   - a tool message is a "function_call_output" under its tool_call_id, and a deprecated
//     function message one under the function's name;
//   - any other role is a "message" item of that role.
//
// The messages must come from ParseChatRequest (valid, bounded JSON).
func ChatItems(msgs []ChatMessage) (items []Item, owner []int) {
	items = make([]Item, 0, len(msgs))
	owner = make([]int, 0, len(msgs))
	for i, m := range msgs {
		n := len(items)
		items = appendChatItems(items, m)
		for range len(items) - n {
			owner = append(owner, i)
		}
	}
	return items, owner
}

func appendChatItems(out []Item, m ChatMessage) []Item {
	switch m.Role {
	case "assistant":
		return appendAssistantItems(out, m)
	case "tool", "function":
		v := gjson.ParseBytes(m.Raw)
		id := v.Get("tool_call_id").Str
		if m.Role == "function" {
			id = v.Get("name").Str
		}
		b := []byte(`{"type":"function_call_output","call_id":`)
		b = AppendString(b, id)
		b = append(b, `,"output":`...)
		if c := v.Get("content"); c.Exists() && c.Type != gjson.Null {
			b = append(b, c.Raw...)
		} else {
			b = append(b, `""`...)
		}
		return append(out, Item{Raw: append(b, '}'), Type: "function_call_output"})
	}
	return append(out, Item{Raw: m.Raw, Type: "message", Role: m.Role, Handoff: m.Handoff})
}

func appendAssistantItems(out []Item, m ChatMessage) []Item {
	v := gjson.ParseBytes(m.Raw)
	content := v.Get("content")
	hasContent := (content.Type == gjson.String && content.Str != "") || (content.IsArray() && len(content.Array()) > 0)
	if hasContent {
		b := []byte(`{"type":"message","role":"assistant","content":`)
		b = append(b, content.Raw...)
		out = append(out, Item{Raw: append(b, '}'), Type: "message", Role: "assistant"})
	}
	if r := v.Get("refusal"); r.Type == gjson.String && r.Str != "" {
		b := []byte(`{"type":"message","role":"assistant","content":[{"type":"refusal","refusal":`)
		b = AppendString(b, r.Str)
		out = append(out, Item{Raw: append(b, `}]}`...), Type: "message", Role: "assistant"})
	}
	v.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
		if c := tc.Get("custom"); tc.Get("type").Str == "custom" || c.IsObject() {
			b := []byte(`{"type":"custom_tool_call","call_id":`)
			b = AppendString(b, tc.Get("id").Str)
			b = append(b, `,"name":`...)
			b = AppendString(b, c.Get("name").Str)
			b = append(b, `,"input":`...)
			b = AppendString(b, c.Get("input").Str)
			out = append(out, Item{Raw: append(b, '}'), Type: "custom_tool_call"})
			return true
		}
		out = append(out, functionCallItem(tc.Get("id").Str, tc.Get("function")))
		return true
	})
	if fc := v.Get("function_call"); fc.IsObject() {
		out = append(out, functionCallItem("", fc))
	}
	return out
}

// functionCallItem is a Responses function_call item for a Chat function call {name, arguments}.
func functionCallItem(id string, fn gjson.Result) Item {
	b := []byte(`{"type":"function_call","call_id":`)
	b = AppendString(b, id)
	b = append(b, `,"name":`...)
	b = AppendString(b, fn.Get("name").Str)
	b = append(b, `,"arguments":`...)
	args := fn.Get("arguments")
	if args.Type == gjson.String {
		b = AppendString(b, args.Str)
	} else {
		b = AppendString(b, args.Raw) // some local servers send the arguments as an object
	}
	return Item{Raw: append(b, '}'), Type: "function_call"}
}

// ChatUnits views messages as one item per message, its raw bytes: what a Chat request is
// counted in, and the units speculation keys on and a kept tail is counted in.
func ChatUnits(msgs []ChatMessage) []Item {
	out := make([]Item, len(msgs))
	for i, m := range msgs {
		out[i] = Item{Raw: m.Raw, Type: "message", Role: m.Role, Handoff: m.Handoff}
	}
	return out
}
