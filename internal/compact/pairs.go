package compact

import (
	"strings"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
)

// Pairing. A compaction that keeps part of a conversation verbatim — the tail a speculative
// summary leaves behind it, the items after a prefix the memo remembers, the current turn a
// transparent Messages compaction keeps — cuts the conversation in two: what comes before the
// cut is summarised away, what comes after it is sent as it was. Every API refuses a tool result
// whose call is gone (Messages: a tool_result must answer a tool_use of the assistant message
// just before it; Responses: a function_call_output must follow its function_call; Chat: a tool
// message must answer the tool_calls of an earlier assistant message), so a cut between a call
// and its result breaks the request. SafeCuts is the one rule every such cut is chosen by, on
// every dialect and every path (threshold, speculation, memo): a cut is safe when nothing after
// it answers a call made before it, and it does not separate a Responses reasoning item from the
// output item it belongs to.

// SafeCuts reports, for every m in 0..len(units), whether cutting units at m keeps every tool
// call with its result: no unit at m or after answers a call made in units[:m], and units[m-1]
// is not a reasoning item followed by more units. safe[0] and safe[len(units)] are always true.
// A call nobody answers constrains no cut. Units are any of the item shapes the engine sees:
// Responses input items, Messages messages (one per message, its raw JSON), Chat messages, and
// the neutral items of either (api.MessageItems, api.ChatItems). One pass, linear in the bytes.
func SafeCuts(units []api.Item) []bool {
	safe := make([]bool, len(units)+1)
	if len(units) == 0 {
		safe[0] = true
		return safe
	}
	// blocked[m] counts the call/result pairs that straddle cut m, as a difference array:
	// a call in unit i answered in unit j > i blocks every m in (i, j].
	blocked := make([]int, len(units)+2)
	open := map[string]int{} // call id -> unit of its newest unanswered call
	for j, u := range units {
		toolRefs(u.Raw, func(id string, output bool) {
			if id == "" {
				return
			}
			if !output {
				open[id] = j
				return
			}
			if i, ok := open[id]; ok {
				delete(open, id)
				if i < j {
					blocked[i+1]++
					blocked[j+1]--
				}
			}
		})
		if j+1 < len(units) && isReasoning(u) {
			blocked[j+1]++
			blocked[j+2]--
		}
	}
	n := 0
	for m := range safe {
		n += blocked[m]
		safe[m] = n == 0
	}
	return safe
}

// SafeCut is the largest safe cut at or before n (see SafeCuts), 0 when there is none.
func SafeCut(safe []bool, n int) int {
	n = min(n, len(safe)-1)
	for n > 0 && !safe[n] {
		n--
	}
	return max(n, 0)
}

func isReasoning(u api.Item) bool {
	if u.Type != "" {
		return u.Type == "reasoning"
	}
	return gjson.GetBytes(u.Raw, "type").Str == "reasoning"
}

// toolRefs calls f with every tool call (output false) and tool result (output true) a unit
// holds, by the id that pairs them:
//
//   - Responses items (openai-go v3 ResponseInputItemUnionParam): every *_output item
//     (function_call_output, custom_tool_call_output, computer_call_output,
//     local_shell_call_output, shell_call_output, apply_patch_call_output, tool_search_output,
//     program_output, …) answers the call with its call_id (local_shell_call_output names it
//     "id"); every other item with a call_id (function_call, custom_tool_call, computer_call,
//     local_shell_call, shell_call, apply_patch_call, tool_search_call, program, …) is a call;
//     mcp_approval_response answers the mcp_approval_request whose id it names. Items the
//     server runs itself (web_search_call, file_search_call, mcp_call, code_interpreter_call,
//     image_generation_call) carry their result and pair with nothing.
//   - Messages messages: tool_use, server_tool_use and mcp_tool_use blocks are calls (id); any
//     block with a tool_use_id (tool_result, mcp_tool_result, the server tools' *_tool_result)
//     is a result.
//   - Chat messages: an assistant's tool_calls are calls (id), a tool message answers its
//     tool_call_id; the deprecated function_call and function message pair by function name.
func toolRefs(raw []byte, f func(id string, output bool)) {
	v := gjson.ParseBytes(raw)
	typ := v.Get("type").Str
	if typ != "" && typ != "message" {
		switch {
		case typ == "mcp_approval_request":
			f(v.Get("id").Str, false)
		case typ == "mcp_approval_response":
			f(v.Get("approval_request_id").Str, true)
		case strings.HasSuffix(typ, "_output"):
			id := v.Get("call_id")
			if !id.Exists() && typ == "local_shell_call_output" {
				id = v.Get("id")
			}
			f(id.Str, true)
		default:
			if id := v.Get("call_id"); id.Type == gjson.String {
				f(id.Str, false)
			}
		}
		return
	}
	switch v.Get("role").Str {
	case "assistant":
		v.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
			f(tc.Get("id").Str, false)
			return true
		})
		if fc := v.Get("function_call"); fc.IsObject() {
			f("function\x00"+fc.Get("name").Str, false)
		}
	case "tool":
		f(v.Get("tool_call_id").Str, true)
		return
	case "function":
		f("function\x00"+v.Get("name").Str, true)
		return
	}
	if c := v.Get("content"); c.IsArray() {
		c.ForEach(func(_, b gjson.Result) bool {
			switch b.Get("type").Str {
			case "tool_use", "server_tool_use", "mcp_tool_use":
				f(b.Get("id").Str, false)
			default:
				if id := b.Get("tool_use_id"); id.Type == gjson.String {
					f(id.Str, true)
				}
			}
			return true
		})
	}
}
