package session

import (
	"encoding/json"
	"strings"

	"github.com/compactd/compactd/internal/agentlog"
)

// claudeRecord is one Claude Code transcript line. Only the fields the reduction reads are
// declared; the transcript format is undocumented and grows fields between versions.
type claudeRecord struct {
	Type             string `json:"type"`
	Subtype          string `json:"subtype"`
	SessionID        string `json:"sessionId"`
	Timestamp        string `json:"timestamp"`
	CWD              string `json:"cwd"`
	IsMeta           bool   `json:"isMeta"`
	IsSidechain      bool   `json:"isSidechain"`
	IsCompactSummary bool   `json:"isCompactSummary"`
	IsAPIError       bool   `json:"isApiErrorMessage"`
	Level            string `json:"level"`
	Content          string `json:"content"`
	Message          struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"message"`
}

type claudeBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// claudeNotTyped are user-record texts Claude Code writes itself: slash-command wrappers, local
// command output, interruption notes and the caveat it puts before them.
var claudeNotTyped = []string{
	"<command-name>", "<command-message>", "<command-args>", "<local-command-stdout>",
	"<local-command-stderr>", "<bash-input>", "<bash-stdout>", "<bash-stderr>",
	"[Request interrupted", "Caveat: The messages below were generated", "<system-reminder>",
}

func claudeTyped(text string) bool {
	t := strings.TrimSpace(text)
	if t == "" {
		return false
	}
	for _, p := range claudeNotTyped {
		if strings.HasPrefix(t, p) {
			return false
		}
	}
	return true
}

func parseClaudeLines(lines [][]byte) Session {
	var s Session
	pending := map[string]int{} // tool_use id -> index into s.Events
	for _, line := range lines {
		var r claudeRecord
		if json.Unmarshal(line, &r) != nil || r.Type == "" {
			s.BadLines++
			continue
		}
		if s.ID == "" {
			s.ID = r.SessionID
		}
		if s.CWD == "" {
			s.CWD = r.CWD
		}
		if s.Start == "" {
			s.Start = r.Timestamp
		}
		switch r.Type {
		case "system":
			switch {
			case r.Subtype == "compact_boundary":
				s.Events = append(s.Events, Event{Kind: EventCompaction})
			case r.Level == "error" && r.Content != "":
				s.Events = append(s.Events, Event{Kind: EventError, Text: r.Content})
			}
		case "user":
			if r.IsMeta {
				continue
			}
			if r.IsCompactSummary {
				s.Events = append(s.Events, Event{Kind: EventCompaction, Text: textOf(r.Message.Content)})
				continue
			}
			var blocks []claudeBlock
			if json.Unmarshal(r.Message.Content, &blocks) != nil {
				// A plain string: something the human typed (or a command wrapper).
				if t := textOf(r.Message.Content); claudeTyped(t) && !r.IsSidechain {
					s.Events = append(s.Events, Event{Kind: EventUser, Text: t})
				}
				continue
			}
			var typed []string
			for _, b := range blocks {
				switch b.Type {
				case "text":
					if claudeTyped(b.Text) {
						typed = append(typed, b.Text)
					}
				case "tool_result":
					// Tool results travel in user records but are not user messages.
					if j, ok := pending[b.ToolUseID]; ok {
						claudeSetResult(&s.Events[j], textOf(b.Content), b.IsError)
					}
				}
			}
			if len(typed) > 0 && !r.IsSidechain {
				s.Events = append(s.Events, Event{Kind: EventUser, Text: strings.Join(typed, "\n")})
			}
		case "assistant":
			var blocks []claudeBlock
			if json.Unmarshal(r.Message.Content, &blocks) != nil {
				continue
			}
			for _, b := range blocks {
				switch b.Type {
				case "text":
					if r.IsAPIError {
						s.Events = append(s.Events, Event{Kind: EventError, Text: b.Text})
					} else if strings.TrimSpace(b.Text) != "" {
						s.Events = append(s.Events, Event{Kind: EventAssistant, Text: b.Text})
					}
				case "thinking":
					if strings.TrimSpace(b.Thinking) != "" {
						s.Events = append(s.Events, Event{Kind: EventReasoning, Text: b.Thinking})
					}
				case "tool_use":
					s.Events = append(s.Events, claudeCall(b.Name, b.Input, s.CWD))
					pending[b.ID] = len(s.Events) - 1
				}
			}
		}
	}
	return s
}

// claudeCall builds the event for one tool_use block.
func claudeCall(name string, input json.RawMessage, cwd string) Event {
	e := Event{Kind: EventTool, Tool: name, Input: string(input)}
	var in struct {
		Command      string `json:"command"`
		FilePath     string `json:"file_path"`
		NotebookPath string `json:"notebook_path"`
		Todos        []struct {
			Content string `json:"content"`
			Status  string `json:"status"`
		} `json:"todos"`
	}
	_ = json.Unmarshal(input, &in)
	switch name {
	case "Bash":
		e.Command = in.Command
		e.Files = relPaths(cwd, redirectFiles(in.Command))
	case "Edit", "MultiEdit", "Write":
		e.Files = relPaths(cwd, []string{in.FilePath})
	case "NotebookEdit":
		e.Files = relPaths(cwd, []string{in.NotebookPath})
	case "TodoWrite":
		e.Plan = make([]PlanStep, 0, len(in.Todos))
		for _, t := range in.Todos {
			e.Plan = append(e.Plan, PlanStep{Step: t.Content, Status: t.Status})
		}
	}
	return e
}

// claudeSetResult records a tool_result. Claude Code logs no exit status for Bash: a failing
// command comes back as is_error with the text "Exit code N" first, a passing one as plain output.
func claudeSetResult(e *Event, text string, isError bool) {
	e.Output, e.HasResult, e.Failed = text, true, isError
	if e.Command != "" {
		first, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
		if n, ok := agentlog.ExitCode(first); ok {
			e.ExitCode, e.HasExit = n, true
		} else if !isError {
			e.ExitCode, e.HasExit = 0, true
		}
	}
	if isError && e.Command == "" {
		e.Files = nil
	}
}
