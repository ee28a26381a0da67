package compact

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/agentlog"
	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/handoff"
)

// RenderEntry renders one item as plain text for the summariser: "[user] …", "[assistant] …",
// "[tool call] name(args)", "[tool output call_id] …", "[reasoning] …" (summary text only, never
// encrypted_content), "[web search] …", and unknown item types as "[type] <compact JSON>" with
// ids, ciphertext and client metadata removed. The summariser reads the conversation, not its
// wire format, so plain lines cost fewer tokens and leave nothing opaque to misread. compactd's
// own facts ledger inside an earlier summary is left out: compactd carries it into the next
// ledger verbatim (Ledger), and a summary restating it would spend the summary's budget on facts
// already kept. The output depends only on the item.
func RenderEntry(it api.Item) string {
	raw := bytesToString(it.Raw)
	v := gjson.Parse(raw)
	typ := it.Type
	if typ == "" {
		typ = v.Get("type").Str
	}
	switch typ {
	case "message":
		role := it.Role
		if role == "" {
			role = v.Get("role").Str
		}
		text := renderContent(v.Get("content"))
		if role == "user" && (it.Handoff || handoff.Original(text) == "") {
			text = withoutLedger(text)
		}
		return "[" + role + "] " + text
	case "function_call":
		return "[tool call] " + v.Get("name").Str + "(" + v.Get("arguments").Str + ")"
	case "custom_tool_call":
		return "[tool call] " + v.Get("name").Str + "(" + v.Get("input").Str + ")"
	case "function_call_output", "custom_tool_call_output", "local_shell_call_output":
		id := v.Get("call_id").Str
		if id == "" {
			id = v.Get("id").Str
		}
		return "[tool output " + id + "] " + renderContent(v.Get("output"))
	case "local_shell_call":
		var args []string
		for _, a := range v.Get("action.command").Array() {
			args = append(args, agentlog.Quote(a.Str))
		}
		s := "[tool call] local_shell(" + strings.Join(args, " ") + ")"
		if wd := v.Get("action.working_directory").Str; wd != "" {
			s += " in " + wd
		}
		return s
	case "reasoning":
		var parts []string
		for _, p := range v.Get("summary").Array() {
			if t := p.Get("text").Str; t != "" {
				parts = append(parts, t)
			}
		}
		return strings.TrimRight("[reasoning] "+strings.Join(parts, "\n"), " ")
	case "web_search_call":
		return "[web search] " + renderWebSearch(v.Get("action"))
	case "compaction", "compaction_summary":
		return "[compaction]"
	}
	return "[" + typ + "] " + compactUnknown(it.Raw)
}

// RenderEntries renders the items at the given indexes, in that order.
func RenderEntries(items []api.Item, idx []int) []string {
	out := make([]string, 0, len(idx))
	for _, i := range idx {
		out = append(out, RenderEntry(items[i]))
	}
	return out
}

// renderContent renders message content or tool output: a string as is, or an array of parts
// joined by newlines, with images and files as placeholders (their bytes say nothing to a
// text summariser and would dominate its input).
func renderContent(c gjson.Result) string {
	if c.Type == gjson.String {
		return c.Str
	}
	if !c.IsArray() {
		if c.Exists() && c.Type != gjson.Null {
			return c.Raw
		}
		return ""
	}
	var parts []string
	for _, p := range c.Array() {
		if p.Type == gjson.String {
			parts = append(parts, p.Str)
			continue
		}
		switch p.Get("type").Str {
		case "input_text", "output_text", "text", "summary_text", "reasoning_text":
			parts = append(parts, p.Get("text").Str)
		case "refusal":
			parts = append(parts, "[refusal] "+p.Get("refusal").Str)
		case "input_image", "image":
			parts = append(parts, "[image]")
		case "input_file", "file":
			name := p.Get("filename").Str
			if name == "" {
				name = p.Get("file_id").Str
			}
			if name == "" {
				name = p.Get("file_url").Str
			}
			parts = append(parts, strings.TrimRight("[file "+name, " ")+"]")
		case "input_audio":
			parts = append(parts, "[audio]")
		default:
			if t := p.Get("text"); t.Type == gjson.String {
				parts = append(parts, t.Str)
			} else {
				parts = append(parts, "["+p.Get("type").Str+"]")
			}
		}
	}
	return strings.Join(parts, "\n")
}

func renderWebSearch(a gjson.Result) string {
	switch a.Get("type").Str {
	case "search":
		if q := a.Get("query").Str; q != "" {
			return "search " + strconv.Quote(q)
		}
		var qs []string
		for _, q := range a.Get("queries").Array() {
			qs = append(qs, strconv.Quote(q.Str))
		}
		return "search " + strings.Join(qs, ", ")
	case "open_page":
		return "open " + a.Get("url").Str
	case "find", "find_in_page":
		return "find " + strconv.Quote(a.Get("pattern").Str) + " in " + a.Get("url").Str
	}
	return compactUnknown([]byte(a.Raw))
}

// compactUnknown renders an unknown item as compact JSON without the fields that carry no
// meaning for a summary or must never reach one (ciphertext, client metadata).
func compactUnknown(raw []byte) string {
	out := raw
	for _, k := range []string{"id", "encrypted_content", "internal_chat_message_metadata_passthrough"} {
		if gjson.GetBytes(out, k).Exists() {
			if o, err := sjson.DeleteBytes(out, k); err == nil {
				out = o
			}
		}
	}
	return gjson.GetBytes(out, "@ugly").Raw
}
