package api

import (
	"fmt"
	"github.com/compactd/compactd/internal/fault"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Messages context-management edit types and betas.
const (
	EditCompact       = "compact_20260112"
	EditClearThinking = "clear_thinking_20251015"
	EditClearToolUses = "clear_tool_uses_20250919"

	BetaCompact           = "compact-2026-01-12"
	BetaCompactOnDemand   = "compact-2026-09-04"
	BetaContextManagement = "context-management-2025-06-27"

	// DefaultCompactTrigger and MinCompactTrigger bound compact_20260112's trigger.value.
	DefaultCompactTrigger = 150_000
	MinCompactTrigger     = 50_000
	// DefaultClearToolUsesTrigger and DefaultClearToolUsesKeep are clear_tool_uses_20250919's
	// documented defaults.
	DefaultClearToolUsesTrigger = 100_000
	DefaultClearToolUsesKeep    = 3
)

// ContextManagement is a validated Messages `context_management`.
type ContextManagement struct {
	Compact       *CompactEdit
	ClearThinking *ClearThinkingEdit
	ClearToolUses *ClearToolUsesEdit
	// Others are the raw edits other than compact_20260112, in order: what an upstream that
	// supports context editing is sent.
	Others [][]byte
}

// CompactEdit is compact_20260112.
type CompactEdit struct {
	Trigger      int // input tokens
	Pause        bool
	Instructions string
}

// ClearThinkingEdit is clear_thinking_20251015: keep the thinking blocks of the newest
// KeepTurns assistant turns (all of them when KeepAll).
type ClearThinkingEdit struct {
	KeepAll   bool
	KeepTurns int
}

// ClearToolUsesEdit is clear_tool_uses_20250919.
type ClearToolUsesEdit struct {
	// Exactly one trigger applies: input tokens (default 100000) or a number of tool uses.
	TriggerInputTokens, TriggerToolUses int
	Keep                                int // tool uses kept, newest first
	ClearAtLeast                        int // input tokens; 0 = no minimum
	ExcludeTools                        []string
	// ClearInputs clears the inputs of every cleared tool use; ClearInputsOf only those of the
	// named tools.
	ClearInputs   bool
	ClearInputsOf []string
}

// badRequest is a 400 at path; Anthropic's envelope renders it pydantic-style ("path: problem"),
// the form Anthropic's own validation errors take.
func badRequest(path, format string, a ...any) *fault.Fault {
	return fault.InvalidParam(path, "", fmt.Sprintf(format, a...))
}

// ParseMessagesContextManagement validates `context_management` (raw value; nil when absent)
// exactly: an object whose only field is `edits`, a list of edits with known types, each at
// most once, with no unknown fields, and values in range.
func ParseMessagesContextManagement(raw []byte) (*ContextManagement, *fault.Fault) {
	v := gjson.ParseBytes(raw)
	if len(raw) == 0 || v.Type == gjson.Null {
		return nil, nil
	}
	const p = "context_management"
	if !v.IsObject() {
		return nil, badRequest(p, "Input should be a valid dictionary")
	}
	if e := onlyFields(v, p, "edits"); e != nil {
		return nil, e
	}
	edits := v.Get("edits")
	if edits.Exists() && edits.Type != gjson.Null && !edits.IsArray() {
		return nil, badRequest(p+".edits", "Input should be a valid list")
	}
	cm := &ContextManagement{}
	seen := map[string]bool{}
	var err *fault.Fault
	i := 0
	edits.ForEach(func(_, e gjson.Result) bool {
		ep := p + ".edits." + strconv.Itoa(i)
		i++
		if !e.IsObject() {
			err = badRequest(ep, "Input should be a valid dictionary")
			return false
		}
		typ := e.Get("type").Str
		if seen[typ] {
			err = badRequest(ep+".type", "edit type '%s' may appear only once", typ)
			return false
		}
		seen[typ] = true
		switch typ {
		case EditCompact:
			cm.Compact, err = parseCompactEdit(e, ep)
		case EditClearThinking:
			cm.ClearThinking, err = parseClearThinking(e, ep)
			cm.Others = append(cm.Others, []byte(e.Raw))
		case EditClearToolUses:
			cm.ClearToolUses, err = parseClearToolUses(e, ep)
			cm.Others = append(cm.Others, []byte(e.Raw))
		default:
			err = badRequest(ep, "Input tag '%s' found using 'type' does not match any of the expected tags: '%s', '%s', '%s'",
				typ, EditClearToolUses, EditClearThinking, EditCompact)
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return cm, nil
}

// OthersJSON renders the context_management to forward to an upstream that applies the
// non-compaction edits itself, or nil when there are none.
func (cm *ContextManagement) OthersJSON() []byte {
	if cm == nil || len(cm.Others) == 0 {
		return nil
	}
	return append(append([]byte(`{"edits":`), JSONArray(cm.Others)...), '}')
}

func parseCompactEdit(e gjson.Result, p string) (*CompactEdit, *fault.Fault) {
	if err := onlyFields(e, p, "type", "trigger", "pause_after_compaction", "instructions"); err != nil {
		return nil, err
	}
	ce := &CompactEdit{Trigger: DefaultCompactTrigger}
	if t := e.Get("trigger"); t.Exists() && t.Type != gjson.Null {
		n, err := parseCounter(t, p+".trigger", "input_tokens")
		if err != nil {
			return nil, err
		}
		if n < MinCompactTrigger {
			return nil, badRequest(p+".trigger.value", "Input should be greater than or equal to %d", MinCompactTrigger)
		}
		ce.Trigger = n
	}
	if v := e.Get("pause_after_compaction"); v.Exists() && v.Type != gjson.Null {
		if v.Type != gjson.True && v.Type != gjson.False {
			return nil, badRequest(p+".pause_after_compaction", "Input should be a valid boolean")
		}
		ce.Pause = v.Type == gjson.True
	}
	if v := e.Get("instructions"); v.Exists() && v.Type != gjson.Null {
		if v.Type != gjson.String {
			return nil, badRequest(p+".instructions", "Input should be a valid string")
		}
		ce.Instructions = strings.TrimSpace(v.Str)
	}
	return ce, nil
}

func parseClearThinking(e gjson.Result, p string) (*ClearThinkingEdit, *fault.Fault) {
	if err := onlyFields(e, p, "type", "keep"); err != nil {
		return nil, err
	}
	ct := &ClearThinkingEdit{KeepTurns: 1}
	k := e.Get("keep")
	switch {
	case !k.Exists() || k.Type == gjson.Null:
	case k.Type == gjson.String && k.Str == "all":
		ct.KeepAll = true
	case k.IsObject() && k.Get("type").Str == "all":
		if err := onlyFields(k, p+".keep", "type"); err != nil {
			return nil, err
		}
		ct.KeepAll = true
	case k.IsObject():
		n, err := parseCounter(k, p+".keep", "thinking_turns")
		if err != nil {
			return nil, err
		}
		if n < 1 {
			return nil, badRequest(p+".keep.value", "Input should be greater than or equal to 1")
		}
		ct.KeepTurns = n
	default:
		return nil, badRequest(p+".keep", "Input should be 'all' or an object with type 'thinking_turns' or 'all'")
	}
	return ct, nil
}

func parseClearToolUses(e gjson.Result, p string) (*ClearToolUsesEdit, *fault.Fault) {
	if err := onlyFields(e, p, "type", "trigger", "keep", "clear_at_least", "exclude_tools", "clear_tool_inputs"); err != nil {
		return nil, err
	}
	ct := &ClearToolUsesEdit{TriggerInputTokens: DefaultClearToolUsesTrigger, Keep: DefaultClearToolUsesKeep}
	if t := e.Get("trigger"); t.Exists() && t.Type != gjson.Null {
		n, err := parseCounter(t, p+".trigger", "input_tokens", "tool_uses")
		if err != nil {
			return nil, err
		}
		if n < 1 {
			return nil, badRequest(p+".trigger.value", "Input should be greater than or equal to 1")
		}
		ct.TriggerInputTokens = 0
		if t.Get("type").Str == "tool_uses" {
			ct.TriggerToolUses = n
		} else {
			ct.TriggerInputTokens = n
		}
	}
	if k := e.Get("keep"); k.Exists() && k.Type != gjson.Null {
		n, err := parseCounter(k, p+".keep", "tool_uses")
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, badRequest(p+".keep.value", "Input should be greater than or equal to 0")
		}
		ct.Keep = n
	}
	if c := e.Get("clear_at_least"); c.Exists() && c.Type != gjson.Null {
		n, err := parseCounter(c, p+".clear_at_least", "input_tokens")
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, badRequest(p+".clear_at_least.value", "Input should be greater than or equal to 0")
		}
		ct.ClearAtLeast = n
	}
	var err *fault.Fault
	if x := e.Get("exclude_tools"); x.Exists() && x.Type != gjson.Null {
		if ct.ExcludeTools, err = stringList(x, p+".exclude_tools"); err != nil {
			return nil, err
		}
	}
	if c := e.Get("clear_tool_inputs"); c.Exists() && c.Type != gjson.Null {
		switch {
		case c.Type == gjson.True || c.Type == gjson.False:
			ct.ClearInputs = c.Type == gjson.True
		case c.IsArray():
			if ct.ClearInputsOf, err = stringList(c, p+".clear_tool_inputs"); err != nil {
				return nil, err
			}
		default:
			return nil, badRequest(p+".clear_tool_inputs", "Input should be a valid boolean or a list of strings")
		}
	}
	return ct, nil
}

// parseCounter reads {"type": one of types, "value": integer}.
func parseCounter(v gjson.Result, p string, types ...string) (int, *fault.Fault) {
	if !v.IsObject() {
		return 0, badRequest(p, "Input should be a valid dictionary")
	}
	if err := onlyFields(v, p, "type", "value"); err != nil {
		return 0, err
	}
	t := v.Get("type")
	if t.Exists() || len(types) > 1 {
		ok := false
		for _, want := range types {
			ok = ok || t.Str == want
		}
		if !ok || t.Type != gjson.String {
			return 0, badRequest(p+".type", "Input should be '%s'", strings.Join(types, "' or '"))
		}
	}
	val := v.Get("value")
	if !val.Exists() {
		return 0, badRequest(p+".value", "Field required")
	}
	n, ok := integer(val)
	if !ok {
		return 0, badRequest(p+".value", "Input should be a valid integer")
	}
	return n, nil
}

// integer accepts JSON numbers written as integers (no fraction, no exponent).
func integer(v gjson.Result) (int, bool) {
	if v.Type != gjson.Number {
		return 0, false
	}
	n, err := strconv.Atoi(v.Raw)
	return n, err == nil
}

func stringList(v gjson.Result, p string) ([]string, *fault.Fault) {
	if !v.IsArray() {
		return nil, badRequest(p, "Input should be a valid list")
	}
	var out []string
	var err *fault.Fault
	v.ForEach(func(k, s gjson.Result) bool {
		if s.Type != gjson.String {
			err = badRequest(p+"."+k.String(), "Input should be a valid string")
			return false
		}
		out = append(out, s.Str)
		return true
	})
	return out, err
}

// onlyFields rejects members of obj other than the allowed ones, as Anthropic's strict schemas do.
func onlyFields(obj gjson.Result, p string, allowed ...string) *fault.Fault {
	var err *fault.Fault
	obj.ForEach(func(k, _ gjson.Result) bool {
		for _, a := range allowed {
			if k.Str == a {
				return true
			}
		}
		err = badRequest(p+"."+k.Str, "Extra inputs are not permitted")
		return false
	})
	return err
}

// ParseCompactionConfig validates the on-demand `compaction` field (raw value):
// {"type":"summarize","instructions":string|null}. It returns the instructions ("" when absent,
// empty or whitespace-only).
func ParseCompactionConfig(raw []byte) (string, *fault.Fault) {
	v := gjson.ParseBytes(raw)
	const p = "compaction"
	if !v.IsObject() {
		return "", badRequest(p, "Input should be a valid dictionary")
	}
	if err := onlyFields(v, p, "type", "instructions"); err != nil {
		return "", err
	}
	if t := v.Get("type"); t.Str != "summarize" || t.Type != gjson.String {
		return "", badRequest(p+".type", "Input tag '%s' found using 'type' does not match any of the expected tags: 'summarize'", t.String())
	}
	in := v.Get("instructions")
	switch {
	case !in.Exists() || in.Type == gjson.Null:
		return "", nil
	case in.Type != gjson.String:
		return "", badRequest(p+".instructions", "Input should be a valid string")
	}
	return strings.TrimSpace(in.Str), nil
}
