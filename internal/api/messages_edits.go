package api

import (
	"slices"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Context editing applied by compactd, for upstreams that do not support
// clear_thinking_20251015 / clear_tool_uses_20250919 themselves. Both edits are deterministic
// functions of the messages, so a conversation edited on one turn is edited the same way on the
// next and the upstream's prompt cache keeps its prefix.

// ClearedToolResult replaces the content of a cleared tool result. It is fixed text so that a
// conversation cleared on one turn has the same bytes on the next.
const ClearedToolResult = "[tool result cleared by context management]"

// AppliedEdit is one entry of a response's context_management.applied_edits.
type AppliedEdit struct {
	Type                 string
	ClearedInputTokens   int
	ClearedThinkingTurns int // clear_thinking_20251015
	ClearedToolUses      int // clear_tool_uses_20250919
}

// AppliedEditsJSON renders {"applied_edits":[…]} in the shape of BetaContextManagementResponse.
func AppliedEditsJSON(edits []AppliedEdit) []byte {
	b := []byte(`{"applied_edits":[`)
	for i, e := range edits {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":`...)
		b = AppendString(b, e.Type)
		b = append(b, `,"cleared_input_tokens":`...)
		b = strconv.AppendInt(b, int64(e.ClearedInputTokens), 10)
		switch e.Type {
		case EditClearThinking:
			b = append(b, `,"cleared_thinking_turns":`...)
			b = strconv.AppendInt(b, int64(e.ClearedThinkingTurns), 10)
		case EditClearToolUses:
			b = append(b, `,"cleared_tool_uses":`...)
			b = strconv.AppendInt(b, int64(e.ClearedToolUses), 10)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// WithBlocks returns m with its content replaced by blocks; other fields of the message are kept.
func (m Message) WithBlocks(blocks []Block) Message {
	raws := make([][]byte, len(blocks))
	for i, b := range blocks {
		raws[i] = b.Raw
	}
	raw, err := sjson.SetRawBytes(append([]byte(nil), m.Raw...), "content", JSONArray(raws))
	if err != nil {
		raw = AnthropicMessage(m.Role, raws)
	}
	return Message{Raw: raw, Role: m.Role, Blocks: blocks, Handoff: m.Handoff}
}

func isThinking(t string) bool { return t == "thinking" || t == "redacted_thinking" }

// Apply removes the thinking blocks of every assistant turn but the newest KeepTurns that have
// any. It returns msgs unchanged and nil when there is nothing to clear. count gives the tokens
// of a message's raw JSON.
func (e *ClearThinkingEdit) Apply(msgs []Message, count func([]byte) int) ([]Message, *AppliedEdit) {
	if e == nil || e.KeepAll {
		return msgs, nil
	}
	var turns []int
	for i, m := range msgs {
		if m.Role == "assistant" && slices.ContainsFunc(m.Blocks, func(b Block) bool { return isThinking(b.Type) }) {
			turns = append(turns, i)
		}
	}
	if len(turns) <= e.KeepTurns {
		return msgs, nil
	}
	clear := turns[:len(turns)-e.KeepTurns]
	out := slices.Clone(msgs)
	ae := &AppliedEdit{Type: EditClearThinking, ClearedThinkingTurns: len(clear)}
	drop := map[int]bool{}
	for _, i := range clear {
		kept := slices.DeleteFunc(slices.Clone(msgs[i].Blocks), func(b Block) bool { return isThinking(b.Type) })
		before := count(msgs[i].Raw)
		if len(kept) == 0 {
			drop[i] = true // an assistant turn of thinking only: nothing of it remains
			ae.ClearedInputTokens += before
			continue
		}
		out[i] = msgs[i].WithBlocks(kept)
		ae.ClearedInputTokens += max(0, before-count(out[i].Raw))
	}
	if len(drop) > 0 {
		kept := out[:0]
		for i, m := range out {
			if !drop[i] {
				kept = append(kept, m)
			}
		}
		out = kept
	}
	return out, ae
}

type toolUse struct {
	msg, block int
	id, name   string
}

// Apply clears the oldest tool uses once the trigger is reached: every tool use but the newest
// Keep (tools in ExcludeTools are never cleared) has its tool_result content replaced by
// ClearedToolResult and, when asked, its input emptied. inputTokens is the request's input
// size, for an input_tokens trigger. It returns msgs unchanged and nil when the trigger is not
// reached, nothing is left to clear, or less than ClearAtLeast tokens would be cleared.
func (e *ClearToolUsesEdit) Apply(msgs []Message, inputTokens int, count func([]byte) int) ([]Message, *AppliedEdit) {
	if e == nil {
		return msgs, nil
	}
	var uses []toolUse
	for i, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		for j, b := range m.Blocks {
			if b.Type == "tool_use" {
				v := gjson.ParseBytes(b.Raw)
				uses = append(uses, toolUse{i, j, v.Get("id").Str, v.Get("name").Str})
			}
		}
	}
	if e.TriggerToolUses > 0 && len(uses) <= e.TriggerToolUses ||
		e.TriggerToolUses == 0 && inputTokens <= e.TriggerInputTokens {
		return msgs, nil
	}
	candidates := slices.DeleteFunc(uses, func(u toolUse) bool { return slices.Contains(e.ExcludeTools, u.name) })
	if len(candidates) <= e.Keep {
		return msgs, nil
	}
	clear := candidates[:len(candidates)-e.Keep]
	ids := map[string]bool{}
	inputs := map[[2]int]bool{}
	for _, u := range clear {
		ids[u.id] = true
		if e.ClearInputs || slices.Contains(e.ClearInputsOf, u.name) {
			inputs[[2]int{u.msg, u.block}] = true
		}
	}
	out := slices.Clone(msgs)
	ae := &AppliedEdit{Type: EditClearToolUses}
	cleared := map[string]bool{}
	for i, m := range msgs {
		var blocks []Block
		for j, b := range m.Blocks {
			nb, changed := b, false
			switch {
			case b.Type == "tool_result" && ids[gjson.GetBytes(b.Raw, "tool_use_id").Str]:
				if c := gjson.GetBytes(b.Raw, "content"); c.Str != ClearedToolResult {
					raw, _ := sjson.SetBytes(append([]byte(nil), b.Raw...), "content", ClearedToolResult)
					nb, changed = Block{Raw: raw, Type: b.Type}, true
					cleared[gjson.GetBytes(b.Raw, "tool_use_id").Str] = true
				}
			case b.Type == "tool_use" && inputs[[2]int{i, j}]:
				if in := gjson.GetBytes(b.Raw, "input"); in.Raw != "{}" {
					raw, _ := sjson.SetRawBytes(append([]byte(nil), b.Raw...), "input", []byte("{}"))
					nb, changed = Block{Raw: raw, Type: b.Type}, true
					cleared[gjson.GetBytes(b.Raw, "id").Str] = true
				}
			}
			if blocks == nil && changed {
				blocks = slices.Clone(m.Blocks[:j])
			}
			if blocks != nil {
				blocks = append(blocks, nb)
			}
		}
		if blocks != nil {
			out[i] = m.WithBlocks(blocks)
			ae.ClearedInputTokens += max(0, count(m.Raw)-count(out[i].Raw))
		}
	}
	ae.ClearedToolUses = len(cleared)
	if ae.ClearedToolUses == 0 || ae.ClearedInputTokens < e.ClearAtLeast {
		return msgs, nil
	}
	return out, ae
}
