package session

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/compactd/compactd/internal/agentlog"
)

// codexRecord is one rollout line: {"timestamp","type","payload"}.
type codexRecord struct {
	Timestamp string          `json:"timestamp"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload"`
}

// codexPayload holds the union of the payload fields the reduction reads. Unknown fields are
// ignored, so newer Codex versions parse as long as these keep their names.
type codexPayload struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	CWD       string          `json:"cwd"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Summary   json.RawMessage `json:"summary"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"`
	CallID    string          `json:"call_id"`
	Output    json.RawMessage `json:"output"`
	Action    json.RawMessage `json:"action"`
	Message   string          `json:"message"`
	Text      string          `json:"text"`
	ExitCode  *int            `json:"exit_code"`
	Success   *bool           `json:"success"`
}

// codexInjectedRe matches the context Codex injects as user-role messages (environment, AGENTS.md,
// permissions, aborted-turn notes): they are not things the human said.
var codexInjectedRe = regexp.MustCompile(`^(?s)\s*(<[a-z_ ]+>|# AGENTS\.md instructions)`)

func parseCodexLines(lines [][]byte) Session {
	var s Session
	recs := make([]codexRecord, 0, len(lines))
	pays := make([]codexPayload, 0, len(lines))
	// Newer rollouts log the same user text, reasoning and assistant text twice: as response
	// items and as event_msg UI events. Prefer the events (they hold exactly what the user typed,
	// without injected context) when present, and fall back to the items for older logs.
	var haveUserEv, haveReasonEv, haveAgentEv bool
	for _, line := range lines {
		var r codexRecord
		var p codexPayload
		if json.Unmarshal(line, &r) != nil || r.Type == "" {
			s.BadLines++
			continue
		}
		_ = json.Unmarshal(r.Payload, &p)
		if r.Type == "event_msg" {
			switch p.Type {
			case "user_message":
				haveUserEv = true
			case "agent_reasoning":
				haveReasonEv = true
			case "agent_message":
				haveAgentEv = true
			}
		}
		recs = append(recs, r)
		pays = append(pays, p)
	}
	pending := map[string]int{} // call_id -> index into s.Events
	for i, r := range recs {
		p := pays[i]
		if s.Start == "" {
			s.Start = r.Timestamp
		}
		switch r.Type {
		case "session_meta":
			if s.ID == "" {
				s.ID = p.ID
			}
			if s.CWD == "" {
				s.CWD = p.CWD
			}
		case "turn_context":
			if s.CWD == "" {
				s.CWD = p.CWD
			}
		case "compacted":
			s.Events = append(s.Events, Event{Kind: EventCompaction, Text: p.Message})
		case "event_msg":
			switch p.Type {
			case "user_message":
				if t := strings.TrimSpace(p.Message); t != "" && !codexInjectedRe.MatchString(t) {
					s.Events = append(s.Events, Event{Kind: EventUser, Text: p.Message})
				}
			case "agent_message":
				s.Events = append(s.Events, Event{Kind: EventAssistant, Text: p.Message})
			case "agent_reasoning":
				s.Events = append(s.Events, Event{Kind: EventReasoning, Text: p.Text})
			case "error", "stream_error":
				s.Events = append(s.Events, Event{Kind: EventError, Text: p.Message})
			case "context_compacted":
				s.Events = append(s.Events, Event{Kind: EventCompaction})
			case "exec_command_end":
				if j, ok := pending[p.CallID]; ok && p.ExitCode != nil && !s.Events[j].HasExit {
					codexSetResult(&s.Events[j], s.Events[j].Output, *p.ExitCode, true)
				}
			case "patch_apply_end":
				if j, ok := pending[p.CallID]; ok && p.Success != nil && !*p.Success {
					codexFail(&s.Events[j])
				}
			}
		case "response_item":
			switch p.Type {
			case "message":
				text := textOf(p.Content)
				switch p.Role {
				case "user":
					if !haveUserEv && strings.TrimSpace(text) != "" && !codexInjectedRe.MatchString(text) {
						s.Events = append(s.Events, Event{Kind: EventUser, Text: text})
					}
				case "assistant":
					if !haveAgentEv && text != "" {
						s.Events = append(s.Events, Event{Kind: EventAssistant, Text: text})
					}
				}
			case "reasoning":
				if haveReasonEv {
					continue
				}
				text := textOf(p.Summary)
				if text == "" {
					text = textOf(p.Content)
				}
				if text != "" {
					s.Events = append(s.Events, Event{Kind: EventReasoning, Text: text})
				}
			case "function_call", "custom_tool_call", "local_shell_call":
				args := p.Arguments
				if p.Type == "custom_tool_call" {
					args = p.Input
				}
				if p.Type == "local_shell_call" {
					args = string(p.Action)
					p.Name = "local_shell"
				}
				s.Events = append(s.Events, codexCall(p.Name, args, s.CWD))
				if p.CallID != "" {
					pending[p.CallID] = len(s.Events) - 1
				}
			case "function_call_output", "custom_tool_call_output", "local_shell_call_output":
				j, ok := pending[p.CallID]
				if !ok {
					continue
				}
				text, exit, hasExit := codexOutput(p.Output)
				codexSetResult(&s.Events[j], text, exit, hasExit)
			}
		}
	}
	return s
}

// codexCall builds the event for one tool call from its name and raw arguments.
func codexCall(name, args, cwd string) Event {
	e := Event{Kind: EventTool, Tool: name, Input: args}
	switch name {
	case "apply_patch":
		patch := args
		var a struct {
			Input string `json:"input"`
			Patch string `json:"patch"`
		}
		if strings.HasPrefix(strings.TrimSpace(args), "{") && json.Unmarshal([]byte(args), &a) == nil {
			patch = a.Input + a.Patch
		}
		e.Input = patch
		e.Files = relPaths(cwd, agentlog.PatchFiles(patch))
	case "update_plan":
		var a struct {
			Plan []struct {
				Step   string `json:"step"`
				Status string `json:"status"`
			} `json:"plan"`
		}
		if json.Unmarshal([]byte(args), &a) == nil {
			e.Plan = make([]PlanStep, 0, len(a.Plan))
			for _, st := range a.Plan {
				e.Plan = append(e.Plan, PlanStep{Step: st.Step, Status: st.Status})
			}
		}
	default:
		if !agentlog.IsShellTool(name) {
			break
		}
		// local_shell's action carries {"command":[…]} just like shell's arguments.
		cmd, argv := shellCommand(json.RawMessage(args))
		if len(argv) > 0 && agentlog.IsPatchTool(argv[0]) || agentlog.IsPatch(cmd) {
			// Codex models also send patches through the shell: ["apply_patch", "*** Begin Patch…"]
			// or a heredoc. Treat them as patches so their targets count as modified files.
			e.Tool = "apply_patch"
			e.Input = cmd
			if len(argv) > 1 && agentlog.IsPatchTool(argv[0]) {
				e.Input = argv[1]
			}
			e.Files = relPaths(cwd, agentlog.PatchFiles(e.Input))
			return e
		}
		e.Command = cmd
		e.Files = relPaths(cwd, redirectFiles(cmd))
	}
	return e
}

func relPaths(cwd string, ps []string) []string {
	out := ps[:0]
	for _, p := range ps {
		if r := relPath(cwd, p); r != "" {
			out = append(out, r)
		}
	}
	return out
}

// codexSetResult records a tool output. Patches that fail modify nothing, so their files are
// dropped; shell redirections have created their targets before the command ran, so they stay.
func codexSetResult(e *Event, text string, exit int, hasExit bool) {
	e.Output, e.HasResult = text, true
	if hasExit {
		e.ExitCode, e.HasExit = exit, true
		if exit != 0 {
			e.Failed = true
		}
	}
	if e.Tool == "apply_patch" {
		t := strings.TrimSpace(text)
		if strings.HasPrefix(t, "apply_patch verification failed") || strings.HasPrefix(t, "error") ||
			strings.Contains(t, "Failed to apply patch") {
			e.Failed = true
		}
	}
	if e.Failed && e.Command == "" {
		e.Files = nil
	}
}

func codexFail(e *Event) {
	e.Failed = true
	if e.Command == "" {
		e.Files = nil
	}
}
