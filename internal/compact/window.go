package compact

import (
	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/tokenize"
)

// DefaultRetainBudget is how many tokens of the newest user messages OpenAI keeps verbatim after
// a compaction (inferred from Codex, which mirrors that default).
const DefaultRetainBudget = 64_000

// Window says what a compaction does with each item of the input.
type Window struct {
	// Instructions are the indexes of the items that are context rather than conversation
	// (IsContext): system/developer messages, tool definitions carried as items
	// (additional_tools), and every item type compactd does not know to be conversation. The
	// client re-sends them every turn; they are kept verbatim, in order, and never summarised.
	Instructions []int
	// Retained are the indexes of the newest user messages kept verbatim, in original order.
	Retained []int
	// Summarise are the indexes of every conversation item (all but Instructions), in order.
	// Retained user messages are summarised too: the summariser needs them for context.
	Summarise []int
	// Truncated is the index of a retained user message that must be middle-truncated to
	// the retain budget (TruncateMiddle), or -1.
	Truncated int
}

// Partition splits items into a compaction window. It walks user messages from the newest
// backwards, keeping each whole while the running total of count fits retainBudget, and stops at
// the first that does not fit; if even the newest does not fit it is kept anyway, marked
// Truncated. A retainBudget <= 0 retains nothing. The result depends only on items, retainBudget
// and count, so the proxy can recompute the same window on a later turn.
func Partition(items []api.Item, retainBudget int, count func(api.Item) int) Window {
	w := Window{Truncated: -1}
	for i, it := range items {
		if IsContext(it) {
			w.Instructions = append(w.Instructions, i)
		} else {
			w.Summarise = append(w.Summarise, i)
		}
	}
	if retainBudget <= 0 {
		return w
	}
	used := 0
	var newestFirst []int
	for i := len(items) - 1; i >= 0; i-- {
		if !items[i].IsUserMessage() {
			continue
		}
		n := count(items[i])
		if used+n > retainBudget {
			if len(newestFirst) == 0 {
				newestFirst = append(newestFirst, i)
				w.Truncated = i
			}
			break
		}
		used += n
		newestFirst = append(newestFirst, i)
	}
	for j := len(newestFirst) - 1; j >= 0; j-- {
		w.Retained = append(w.Retained, newestFirst[j])
	}
	return w
}

// TruncateMiddle shortens s to about maxTokens tokens by keeping its head and tail and replacing
// the middle with a marker naming how many tokens were cut: tokenize.TruncateMiddle, counting
// with c's cache. s is returned unchanged when it already fits.
func TruncateMiddle(s string, maxTokens int, c *Counter) string {
	return tokenize.TruncateMiddle(s, maxTokens, c.Text)
}

// conversationTypes are the Responses input item types that are conversation: what the user, the
// model and its tools said and did, which a compaction summarises and replaces. The list is the
// openai-go v3 input item union (ResponseInputItemUnion and its beta) minus the items that are
// not conversation. A compaction item is listed because an earlier one is superseded by the
// later one a window is computed for (and foreign ones never get here: proxy drops or refuses
// them before).
var conversationTypes = map[string]bool{
	"message": true, "reasoning": true, "agent_message": true,
	"function_call": true, "function_call_output": true,
	"custom_tool_call": true, "custom_tool_call_output": true,
	"local_shell_call": true, "local_shell_call_output": true,
	"shell_call": true, "shell_call_output": true,
	"apply_patch_call": true, "apply_patch_call_output": true,
	"computer_call": true, "computer_call_output": true,
	"file_search_call": true, "web_search_call": true,
	"image_generation_call": true, "code_interpreter_call": true,
	"mcp_call": true, "mcp_approval_request": true, "mcp_approval_response": true,
	"tool_search_call": true, "tool_search_output": true,
	"multi_agent_call": true, "multi_agent_call_output": true,
	"program": true, "program_output": true,
	api.TypeCompaction: true, api.TypeCompactionSummary: true,
}

// IsContext reports whether a compaction keeps it verbatim like instructions instead of
// summarising it: a system or developer message, or a Responses item whose type is not known
// conversation (conversationTypes). That takes in additional_tools (Codex's "Responses Lite"
// moves the tool definitions there: summarised away, the model would lose its tools),
// configuration_update, mcp_list_tools (the tool listing of an MCP server), item_reference
// (a pointer whose content compactd cannot see, so cannot summarise) and every type the API
// adds later: keeping an unknown item costs tokens, summarising it away could cost the model
// something it needs, and the upstream, which knows the type, reads it as sent. An item of a
// Messages conversation (api.Item.InMessage) is conversation whatever its block type: the
// Messages API has no context items, and its compacted context keeps nothing but the handoff.
func IsContext(it api.Item) bool {
	if it.Type == "message" {
		return it.IsInstruction()
	}
	return !it.InMessage && !conversationTypes[it.Type]
}
