package api

import (
	"github.com/tidwall/gjson"
)

// MessageItems renders messages as the neutral item view the compaction engine works on: the
// Responses item shapes that package compact already partitions, counts and renders for the
// summariser. Text, image and document blocks of one message stay together as one message
// item; tool_use becomes function_call, tool_result function_call_output, thinking a reasoning
// summary; redacted thinking and compaction blocks carry nothing a summariser can read and are
// left out; any other block (server tools and their results) is kept as an item of its own
// type, which the transcript renders as compact JSON.
func MessageItems(msgs []Message) []Item {
	out := make([]Item, 0, len(msgs))
	for _, m := range msgs {
		out = appendMessageItems(out, m)
	}
	return out
}

func appendMessageItems(out []Item, m Message) []Item {
	var group [][]byte // consecutive plain content blocks
	flush := func() {
		if len(group) == 0 {
			return
		}
		b := make([]byte, 0, 64)
		b = append(b, `{"type":"message","role":`...)
		b = AppendString(b, m.Role)
		b = append(b, `,"content":`...)
		b = append(b, JSONArray(group)...)
		b = append(b, '}')
		out = append(out, Item{Raw: b, Type: "message", Role: m.Role, Handoff: m.Handoff})
		group = nil
	}
	for _, blk := range m.ContentBlocks() {
		v := gjson.ParseBytes(blk.Raw)
		switch blk.Type {
		case "text", "image", "document", "search_result":
			group = append(group, blk.Raw)
		case "tool_use", "server_tool_use", "mcp_tool_use":
			flush()
			b := []byte(`{"type":"function_call","call_id":`)
			b = AppendString(b, v.Get("id").Str)
			b = append(b, `,"name":`...)
			b = AppendString(b, v.Get("name").Str)
			b = append(b, `,"arguments":`...)
			b = AppendString(b, v.Get("input").Raw)
			out = append(out, Item{Raw: append(b, '}'), Type: "function_call"})
		case "tool_result", "mcp_tool_result":
			flush()
			b := []byte(`{"type":"function_call_output","call_id":`)
			b = AppendString(b, v.Get("tool_use_id").Str)
			b = append(b, `,"output":`...)
			if c := v.Get("content"); c.Exists() {
				b = append(b, c.Raw...)
			} else {
				b = append(b, `""`...)
			}
			out = append(out, Item{Raw: append(b, '}'), Type: "function_call_output"})
		case "thinking":
			flush()
			b := []byte(`{"type":"reasoning","summary":[{"type":"summary_text","text":`)
			b = AppendString(b, v.Get("thinking").Str)
			out = append(out, Item{Raw: append(b, `}]}`...), Type: "reasoning"})
		case "redacted_thinking", BlockCompaction:
		default:
			flush()
			out = append(out, Item{Raw: blk.Raw, Type: blk.Type, InMessage: true})
		}
	}
	flush()
	return out
}

// CountItems views messages as items for token counting: one item per message, its raw bytes.
func CountItems(msgs []Message) []Item {
	out := make([]Item, len(msgs))
	for i, m := range msgs {
		out[i] = Item{Raw: m.Raw, Type: "message", Role: m.Role}
	}
	return out
}
