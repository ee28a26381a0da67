package fakeupstream

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
)

// Strict mode: the fake refuses, with the real API's status and error envelope, the request
// bodies the real APIs refuse, so an end-to-end test that passes proves the upstream would have
// accepted what compactd sent. It is on unless Options.Lenient. The rules, and where each comes
// from (the official SDK types in the Go module cache are the ground truth for item and block
// types; the error wording is the real APIs', as their users have reported it):
//
// Anthropic Messages (POST /v1/messages and /v1/messages/count_tokens):
//
//   - messages must be a non-empty array ("messages: at least one message is required").
//   - A message's role is "user", "assistant" or "system": anthropic-sdk-go v2.18.0
//     message.go MessageParam / betamessage.go BetaMessageParam (union on "role": user,
//     assistant, system). role:"system" is a mid-conversation system message, which the API
//     accepts "immediately after a user turn"
//     (https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages,
//     https://platform.claude.com/docs/en/about-claude/models/whats-new-claude-4-8); Claude Code
//     2.1.332 sends one after its first user message (internal/memo/testdata/claude-code-2.1.332).
//     So a system message is refused only where no user message comes before it.
//   - The first message is a user message (the SDK's MessageNewParams.Messages doc: "Our models
//     are trained to operate on alternating user and assistant conversational turns"; the API's
//     refusal reads 'messages: first message must use the "user" role').
//   - Consecutive user or assistant messages are NOT refused: "Consecutive user or assistant
//     turns in your request will be combined into a single turn" (same doc comment). The tool
//     rules below therefore apply to turns: runs of same-role messages, system messages skipped.
//   - Content is a string or an array of blocks of a known type: BetaContentBlockParamUnion's
//     discriminators (betamessage.go), or text / tool_addition / tool_removal in a system
//     message (BetaSystemMessageParamContentUnion). Compaction blocks are refused before any of
//     this: this upstream models a backend without compaction (see server.go).
//   - Every message but a final assistant one has non-empty content ("messages.N: all messages
//     must have non-empty content except for the optional final assistant message", reported in
//     github.com/anthropics/claude-code/issues/6774).
//   - In a user turn, tool_result blocks come first: "Tool result blocks must immediately follow
//     their corresponding tool use blocks … In the user message containing tool results, the
//     tool_result blocks must come FIRST in the content array"
//     (https://platform.claude.com/docs/en/agents-and-tools/tool-use/handle-tool-calls).
//   - A tool_result answers a tool_use of the assistant turn just before it ("messages.N.content.M:
//     unexpected `tool_use_id` found in `tool_result` blocks: ID. Each `tool_result` block must
//     have a corresponding `tool_use` block in the previous message.", anthropics/claude-code
//     issues 13460 and 18947).
//   - Every tool_use of an assistant turn that a later message follows is answered by a leading
//     tool_result of the next user turn ("messages.N: `tool_use` ids were found without
//     `tool_result` blocks immediately after: ID. Each `tool_use` block must have a corresponding
//     `tool_result` block in the next message.", anthropics/claude-code issue 5060). Server tool
//     blocks (server_tool_use, mcp_tool_use) carry their results in the assistant turn itself and
//     are not paired here.
//   - A tool_reference in a tool_addition or tool_removal block names "a tool declared in
//     `tools` or defined by an earlier `tool_addition` block" (anthropic-sdk-go v2.18.0
//     betamessage.go BetaToolChangeToolReferenceParam; an inline definition is a
//     tool_addition whose tool is a tool_definition). A reference to anything else is refused
//     with error.details.error_code "tool_reference_unresolved" ("A tool change or MCP tool
//     listing references a tool or MCP server that is not defined at that position in the
//     conversation": @anthropic-ai/sdk 1.17.0 ToolReferenceUnresolvedError); the message's
//     wording is this upstream's own, as no capture of the real one was available. MCP
//     references are not checked (their tools come from the MCP server).
//
// OpenAI Responses (POST /v1/responses):
//
//   - input is a string or an array of items whose type is one of
//     responses.ResponseInputItemUnionParam's discriminators (openai-go v3.105.0
//     responses/response.go); an item without "type" is a message (it has "role") or an item
//     reference (it has "id"). A message's role is user, assistant, system or developer
//     (EasyInputMessageParam). Compaction items were refused already, as above.
//   - A tool output (function_call_output, custom_tool_call_output, computer_call_output,
//     shell_call_output, apply_patch_call_output, local_shell_call_output, program_output, and
//     tool_search_output when it carries a call_id; mcp_approval_response by approval_request_id)
//     answers a call earlier in input: "No tool call found for function call output with call_id
//     ID." (400, param "input"; github.com/continuedev/continue/issues/10092,
//     github.com/microsoft/vscode/issues/320060).
//   - A client-side call (function_call, custom_tool_call, computer_call, shell_call,
//     apply_patch_call, local_shell_call, program, client-executed tool_search_call) has its
//     output somewhere in input once any item other than another call follows it: "No tool
//     output found for function call ID." (400, param "input";
//     github.com/bytedance/trae-agent/issues/245, github.com/Gitlawb/openclaude/issues/187). The
//     API pairs by call_id, not by position
//     (github.com/deepseek-ai/awesome-deepseek-integration/issues/740). Calls at the very end of
//     input, awaiting their outputs, are not refused.
//
// OpenAI Chat Completions (POST /v1/chat/completions):
//
//   - A message's role is system, developer, user, assistant, tool or function
//     (openai-go v3.105.0 chatcompletion.go ChatCompletionMessageParamUnion).
//   - A "tool" message answers a tool_calls entry of the assistant message before the run of
//     tool messages it is in: "Invalid parameter: messages with role 'tool' must be a response to
//     a preceeding message with 'tool_calls'." (param "messages.[N].role";
//     github.com/miurla/morphic/issues/136, github.com/smarter-sh/smarter/issues/264).
//   - An assistant message with tool_calls is followed by tool messages for each id before the
//     next other message: "An assistant message with 'tool_calls' must be followed by tool
//     messages responding to each 'tool_call_id'. The following tool_call_ids did not have
//     response messages: ID" (github.com/farhan0167/otto-m8/issues/30).
//
// Routes: Options.Speaks lists the APIs this upstream serves; a request on a route of another
// API gets the 404 that API-only backend would send, in its own envelope (an Anthropic-only
// backend answers /v1/responses with {"type":"error","error":{"type":"not_found_error",…}}).
// A summariser request pointed at the wrong API is caught this way.

// refusal is why the upstream refuses a request and how: status, the OpenAI "param" and "code",
// and the message. reason "" means accepted.
type refusal struct {
	status      int
	param, code string
	reason      string
	anthropic   bool // answer in Anthropic's envelope whatever the route
	openai      bool // answer in OpenAI's envelope whatever the route
}

func badRequestRefusal(param, code, reason string) *refusal {
	return &refusal{status: http.StatusBadRequest, param: param, code: code, reason: reason}
}

// speaks reports whether the upstream serves api.
func (s *Server) speaks(api dialect.Name) bool {
	if len(s.opt.Speaks) == 0 {
		return true
	}
	for _, a := range s.opt.Speaks {
		if a == api {
			return true
		}
	}
	return false
}

// routeAPI is the API a route belongs to, or "" for routes every backend serves (/v1/models) and
// unknown ones.
func routeAPI(r route) dialect.Name {
	switch r {
	case routeResponses:
		return dialect.Responses
	case routeChat:
		return dialect.Chat
	case routeMessages, routeCountTokens:
		return dialect.Messages
	}
	return ""
}

// refusal decides whether the upstream refuses the request: a route of an API it does not speak,
// compaction (always: this upstream has none), then, unless Lenient, the strict rules.
func (c *call) refusal() *refusal {
	if api := routeAPI(c.route); api != "" && !c.srv.speaks(api) {
		r := &refusal{status: http.StatusNotFound, reason: "Invalid URL (" + c.r.Method + " " + c.r.URL.Path + ")"}
		if c.srv.speaks(dialect.Messages) {
			r.anthropic, r.reason = true, "Not Found"
		} else {
			r.openai = true
		}
		return r
	}
	if !c.in.valid {
		return nil // answered by the route's own "could not parse" error, as before
	}
	if c.in.compaction != "" {
		return badRequestRefusal("", "", c.in.compaction)
	}
	if c.srv.opt.Lenient {
		return nil
	}
	switch c.route {
	case routeResponses:
		return strictResponses(c.in.top["input"])
	case routeChat:
		return strictChat(c.in.top["messages"])
	case routeMessages, routeCountTokens:
		if r := strictMessages(c.in.top["messages"]); r != nil {
			return r
		}
		return strictToolReferences(c.in.top["tools"], c.in.top["messages"])
	}
	return nil
}

// strictToolReferences refuses a tool_reference (in a tool_addition or tool_removal block of
// any message, system messages included) that names neither a tool of tools nor one an earlier
// tool_addition defined inline.
func strictToolReferences(tools, msgs gjson.Result) *refusal {
	known := map[string]bool{}
	tools.ForEach(func(_, t gjson.Result) bool {
		if n := member(t, "name"); n.Type == gjson.String {
			known[n.Str] = true
		}
		return true
	})
	var bad *refusal
	i := 0
	msgs.ForEach(func(_, m gjson.Result) bool {
		j := 0
		member(m, "content").ForEach(func(_, b gjson.Result) bool {
			typ := member(b, "type").Str
			if typ == "tool_addition" || typ == "tool_removal" {
				tool := member(b, "tool")
				switch member(tool, "type").Str {
				case "tool_definition":
					if typ == "tool_addition" {
						known[member(member(tool, "definition"), "name").Str] = true
					}
				case "tool_reference":
					if name := member(tool, "name").Str; !known[name] {
						bad = badRequestRefusal("", "tool_reference_unresolved", "messages."+strconv.Itoa(i)+".content."+strconv.Itoa(j)+
							".tool: tool_reference '"+name+"' names no tool declared in `tools` or defined by an earlier `tool_addition` block")
						return false
					}
				}
			}
			j++
			return true
		})
		i++
		return bad == nil
	})
	return bad
}

// Anthropic content block types a user or assistant message may carry (BetaContentBlockParamUnion).
var messagesBlockTypes = map[string]bool{
	"text": true, "image": true, "document": true, "search_result": true, "thinking": true,
	"redacted_thinking": true, "tool_use": true, "tool_result": true, "server_tool_use": true,
	"web_search_tool_result": true, "web_fetch_tool_result": true, "advisor_tool_result": true,
	"code_execution_tool_result": true, "bash_code_execution_tool_result": true,
	"text_editor_code_execution_tool_result": true, "tool_search_tool_result": true,
	"mcp_tool_use": true, "mcp_tool_result": true, "container_upload": true, "compaction": true,
	"tool_addition": true, "tool_removal": true, "mcp_tool_listing": true, "fallback": true,
}

// Block types of a role:"system" message (BetaSystemMessageParamContentUnion).
var systemBlockTypes = map[string]bool{"text": true, "tool_addition": true, "tool_removal": true}

// textBlock stands for a string content, which is shorthand for one text block.
var textBlock = gjson.Parse(`{"type":"text"}`)

// block is one content block of a turn, with where it sits in the request.
type block struct {
	msg, idx int
	b        gjson.Result
}

// turn is a run of consecutive user (or assistant) messages, which the API combines into one.
type turn struct {
	role   string
	first  int // index of its first message
	last   int // index of its last message
	blocks []block
}

func strictMessages(msgs gjson.Result) *refusal {
	if !msgs.Exists() {
		return badRequestRefusal("", "", "messages: Field required")
	}
	if !msgs.IsArray() {
		return badRequestRefusal("", "", "messages: Input should be a valid list")
	}
	all := msgs.Array()
	if len(all) == 0 {
		return badRequestRefusal("", "", "messages: at least one message is required")
	}
	var turns []turn
	seenUser := false
	for i, m := range all {
		role := member(m, "role").Str
		at := "messages." + strconv.Itoa(i)
		switch role {
		case "user", "assistant", "system":
		default:
			return badRequestRefusal("", "", at+".role: Input should be 'user', 'assistant' or 'system'")
		}
		if i == 0 && role != "user" {
			return badRequestRefusal("", "", `messages: first message must use the "user" role`)
		}
		content := member(m, "content")
		allowed := messagesBlockTypes
		if role == "system" {
			if !seenUser {
				return badRequestRefusal("", "", at+`: a role "system" message must follow a user turn`)
			}
			allowed = systemBlockTypes
		}
		var blocks []block
		switch {
		case content.Type == gjson.String:
			if content.Str == "" && role != "system" && !(role == "assistant" && i == len(all)-1) {
				return badRequestRefusal("", "", at+": all messages must have non-empty content except for the optional final assistant message")
			}
			blocks = []block{{msg: i, idx: 0, b: textBlock}}
		case content.IsArray():
			var bad *refusal
			j := 0
			content.ForEach(func(_, b gjson.Result) bool {
				typ := member(b, "type").Str
				if !b.IsObject() || !allowed[typ] {
					bad = badRequestRefusal("", "", at+".content."+strconv.Itoa(j)+".type: Input tag '"+typ+
						"' found using 'type' does not match any of the expected tags")
					return false
				}
				blocks = append(blocks, block{msg: i, idx: j, b: b})
				j++
				return true
			})
			if bad != nil {
				return bad
			}
			if j == 0 && role != "system" && !(role == "assistant" && i == len(all)-1) {
				return badRequestRefusal("", "", at+": all messages must have non-empty content except for the optional final assistant message")
			}
		case !content.Exists() && role == "system":
			// output_config alone is allowed on a system message
		default:
			return badRequestRefusal("", "", at+".content: Input should be a valid list or string")
		}
		if role == "user" {
			seenUser = true
		}
		if role == "system" {
			continue // not a conversational turn: it neither splits nor joins turns
		}
		if n := len(turns); n > 0 && turns[n-1].role == role {
			turns[n-1].last = i
			turns[n-1].blocks = append(turns[n-1].blocks, blocks...)
			continue
		}
		turns = append(turns, turn{role: role, first: i, last: i, blocks: blocks})
	}
	for k, t := range turns {
		if t.role != "user" {
			continue
		}
		// The ids this user turn may answer: the tool_use blocks of the assistant turn before it.
		uses := map[string]bool{}
		var order []string
		var prev *turn
		if k > 0 {
			prev = &turns[k-1]
			for _, b := range prev.blocks {
				if member(b.b, "type").Str == "tool_use" {
					id := member(b.b, "id").Str
					if !uses[id] {
						order = append(order, id)
					}
					uses[id] = true
				}
			}
		}
		answered := map[string]bool{}
		leading := true
		for _, b := range t.blocks {
			if member(b.b, "type").Str != "tool_result" {
				leading = false
				continue
			}
			at := "messages." + strconv.Itoa(b.msg) + ".content." + strconv.Itoa(b.idx)
			id := member(b.b, "tool_use_id").Str
			if !uses[id] {
				return badRequestRefusal("", "", at+": unexpected `tool_use_id` found in `tool_result` blocks: "+id+
					". Each `tool_result` block must have a corresponding `tool_use` block in the previous message.")
			}
			if !leading {
				return badRequestRefusal("", "", at+": `tool_result` blocks must come first in a user message, before any other content: "+id)
			}
			answered[id] = true
		}
		var missing []string
		for _, id := range order {
			if !answered[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return badRequestRefusal("", "", "messages."+strconv.Itoa(prev.last)+": `tool_use` ids were found without `tool_result` blocks immediately after: "+
				strings.Join(missing, ", ")+". Each `tool_use` block must have a corresponding `tool_result` block in the next message.")
		}
	}
	return nil
}

// Responses input item types (ResponseInputItemUnionParam's discriminators).
var responsesItemTypes = map[string]bool{
	"message": true, "file_search_call": true, "computer_call": true, "computer_call_output": true,
	"web_search_call": true, "function_call": true, "function_call_output": true,
	"tool_search_call": true, "tool_search_output": true, "additional_tools": true,
	"configuration_update": true, "reasoning": true, "compaction": true,
	"image_generation_call": true, "code_interpreter_call": true, "local_shell_call": true,
	"local_shell_call_output": true, "shell_call": true, "shell_call_output": true,
	"apply_patch_call": true, "apply_patch_call_output": true, "mcp_list_tools": true,
	"mcp_approval_request": true, "mcp_approval_response": true, "mcp_call": true,
	"custom_tool_call_output": true, "custom_tool_call": true, "compaction_trigger": true,
	"item_reference": true, "program": true, "program_output": true,
}

// responsesCalls are the client-side calls whose output the client must send back.
var responsesCalls = map[string]bool{
	"function_call": true, "custom_tool_call": true, "computer_call": true, "shell_call": true,
	"apply_patch_call": true, "local_shell_call": true, "program": true, "tool_search_call": true,
	"mcp_approval_request": true,
}

var responsesOutputs = map[string]bool{
	"function_call_output": true, "custom_tool_call_output": true, "computer_call_output": true,
	"shell_call_output": true, "apply_patch_call_output": true, "local_shell_call_output": true,
	"program_output": true, "tool_search_output": true, "mcp_approval_response": true,
}

var responsesRoles = map[string]bool{"user": true, "assistant": true, "system": true, "developer": true}

func strictResponses(input gjson.Result) *refusal {
	if input.Type == gjson.String || !input.Exists() {
		return nil
	}
	if !input.IsArray() {
		return badRequestRefusal("input", "invalid_type", "Invalid type for 'input': expected one of a string or array of input items.")
	}
	type pending struct {
		ids []string // what an output may name: call_id, and id for local_shell_call
		idx int
	}
	calls := map[string]bool{}    // call ids seen so far (call_id, and id for local_shell_call)
	answered := map[string]bool{} // call ids with an output anywhere in input
	var open []pending            // calls in input order, to check for outputs afterwards
	items := input.Array()
	// Outputs may come in any order after their calls, so collect them first.
	for _, it := range items {
		typ := member(it, "type").Str
		if responsesOutputs[typ] {
			for _, id := range outputIDs(typ, it) {
				answered[id] = true
			}
		}
	}
	lastNonCall := -1
	for i, it := range items {
		at := "input[" + strconv.Itoa(i) + "]"
		if !it.IsObject() {
			return badRequestRefusal(at, "invalid_type", "Invalid type for '"+at+"': expected an object.")
		}
		typ := member(it, "type").Str
		switch {
		case typ == "" && member(it, "role").Exists():
			typ = "message"
		case typ == "" && member(it, "id").Exists():
			typ = "item_reference"
		case typ == "":
			return badRequestRefusal(at, "missing_required_parameter", "Missing required parameter: '"+at+".type'.")
		case !responsesItemTypes[typ]:
			return badRequestRefusal(at+".type", "invalid_value", "Invalid value: '"+typ+"'. Supported values are: "+supported(responsesItemTypes)+".")
		}
		if typ == "message" {
			if role := member(it, "role").Str; !responsesRoles[role] {
				return badRequestRefusal(at+".role", "invalid_value", "Invalid value: '"+role+"'. Supported values are: 'assistant', 'system', 'developer', and 'user'.")
			}
		}
		if responsesCalls[typ] {
			if typ == "tool_search_call" && member(it, "execution").Str != "client" {
				continue // server-executed: its output is the server's
			}
			ids := []string{callID(typ, it)}
			if typ == "local_shell_call" {
				ids = append(ids, member(it, "id").Str)
			}
			for _, id := range ids {
				calls[id] = true
			}
			open = append(open, pending{ids, i})
			continue
		}
		if typ != "reasoning" { // reasoning sits among a turn's calls
			lastNonCall = i
		}
		if responsesOutputs[typ] {
			ids := outputIDs(typ, it)
			if len(ids) == 0 {
				continue // a server-side tool_search_output
			}
			found := false
			for _, id := range ids {
				found = found || calls[id]
			}
			if !found {
				return badRequestRefusal("input", "", "No tool call found for function call output with call_id "+ids[0]+".")
			}
		}
	}
	for _, p := range open {
		done := false
		for _, id := range p.ids {
			done = done || answered[id]
		}
		if !done && p.idx < lastNonCall {
			return badRequestRefusal("input", "", "No tool output found for function call "+p.ids[0]+".")
		}
	}
	return nil
}

// callID is the id an output of this call answers: call_id, or id for an MCP approval request.
func callID(typ string, it gjson.Result) string {
	if typ == "mcp_approval_request" {
		return member(it, "id").Str
	}
	return member(it, "call_id").Str
}

// outputIDs are the call ids an output item may answer. local_shell_call_output names its call
// by "id" ("The unique ID of the local shell tool call generated by the model"), which clients
// fill with either of the call's ids; tool_search_output without a call_id is the server's.
func outputIDs(typ string, it gjson.Result) []string {
	switch typ {
	case "local_shell_call_output":
		return []string{member(it, "id").Str}
	case "mcp_approval_response":
		return []string{member(it, "approval_request_id").Str}
	case "tool_search_output":
		if id := member(it, "call_id"); id.Exists() {
			return []string{id.Str}
		}
		return nil
	}
	return []string{member(it, "call_id").Str}
}

// supported lists a set's keys as the API lists allowed values: 'a', 'b', and 'c' (sorted).
func supported(set map[string]bool) string {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		keys[i] = "'" + k + "'"
	}
	if n := len(keys); n > 1 {
		keys[n-1] = "and " + keys[n-1]
	}
	return strings.Join(keys, ", ")
}

var chatRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true, "function": true}

func strictChat(msgs gjson.Result) *refusal {
	if !msgs.IsArray() {
		return nil // the route's own handling; compactd's tests send odd bodies on purpose
	}
	all := msgs.Array()
	var callIDs []string // tool_calls of the assistant message that opened the current tool run
	answered := map[string]bool{}
	opener := -1 // index of that assistant message, -1 when no run is open
	closeRun := func(next int) *refusal {
		if opener < 0 {
			return nil
		}
		var missing []string
		for _, id := range callIDs {
			if !answered[id] {
				missing = append(missing, id)
			}
		}
		opener = -1
		if len(missing) == 0 {
			return nil
		}
		return badRequestRefusal("messages.["+strconv.Itoa(next)+"].role", "",
			"An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "+
				"The following tool_call_ids did not have response messages: "+strings.Join(missing, ", "))
	}
	inRun := false // the previous messages since the opener are all tool messages
	for i, m := range all {
		role := member(m, "role").Str
		at := "messages.[" + strconv.Itoa(i) + "]"
		if !chatRoles[role] {
			return badRequestRefusal(at+".role", "invalid_value", "Invalid value: '"+role+
				"'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.")
		}
		if role == "tool" {
			if !inRun {
				return badRequestRefusal(at+".role", "", "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.")
			}
			id := member(m, "tool_call_id").Str
			found := false
			for _, c := range callIDs {
				found = found || c == id
			}
			if !found {
				return badRequestRefusal(at+".tool_call_id", "", "Invalid parameter: 'tool_call_id' of '"+id+"' not found in 'tool_calls' of previous message.")
			}
			answered[id] = true
			continue
		}
		if r := closeRun(i); r != nil {
			return r
		}
		inRun = false
		if role == "assistant" {
			if tcs := member(m, "tool_calls"); tcs.IsArray() && len(tcs.Array()) > 0 {
				callIDs, answered, opener, inRun = nil, map[string]bool{}, i, true
				tcs.ForEach(func(_, tc gjson.Result) bool {
					callIDs = append(callIDs, member(tc, "id").Str)
					return true
				})
			}
		}
	}
	return nil // a run still open at the end awaits its tool messages
}
