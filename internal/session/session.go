package session

// Session handover: coding agents (Codex CLI, Claude Code) keep each session as a JSONL log and a
// new session starts blind. The files session*.go reduce such logs to what a successor needs —
// user messages, reasoning, files touched, commands and their failures, the last plan — and
// render it as a resume prompt whose first bytes never change, so the successor's prompt prefix
// stays cached. Both formats are parsed into one event model so the reduction is written once.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Format names a session log dialect.
type Format string

const (
	// FormatAuto asks ParseSession to detect the dialect from the first records.
	FormatAuto Format = ""
	// FormatCodex is a Codex CLI rollout ($CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl).
	FormatCodex Format = "codex"
	// FormatClaude is a Claude Code transcript (~/.claude/projects/<project>/<session>.jsonl).
	FormatClaude Format = "claude"
)

// ParseFormat maps a --format flag value to a Format; "" and "auto" mean detection.
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return FormatAuto, nil
	case "codex":
		return FormatCodex, nil
	case "claude", "claude-code":
		return FormatClaude, nil
	}
	return FormatAuto, fmt.Errorf("unknown session format %q (want codex or claude)", s)
}

// EventKind classifies one step of a session.
type EventKind int

const (
	// EventUser is a message the human typed (never a tool result, never injected context).
	EventUser EventKind = iota + 1
	// EventAssistant is visible assistant text.
	EventAssistant
	// EventReasoning is a reasoning summary (Codex) or thinking block (Claude).
	EventReasoning
	// EventTool is one tool call paired with its result.
	EventTool
	// EventCompaction is the agent's own compaction summary or boundary marker.
	EventCompaction
	// EventError is an error the agent runtime reported outside any tool result.
	EventError
)

// PlanStep is one entry of a Codex update_plan or a Claude TodoWrite list.
type PlanStep struct {
	Step   string
	Status string // pending, in_progress, completed
}

// Event is one normalised step of a session. Tool calls and their results are joined by call id
// at parse time so the reduction never has to look ahead.
type Event struct {
	Kind EventKind
	// Text is the message, reasoning or compaction text.
	Text string
	// Tool is the tool name as the agent called it (shell, exec_command, apply_patch, Edit, Bash…).
	Tool string
	// Command is the shell command line for shell-like tools, "" otherwise.
	Command string
	// Input is the call's arguments rendered compactly (patch body, JSON input).
	Input string
	// Output is the tool result text; "" while no result has been seen.
	Output string
	// HasResult reports whether a result was logged for the call.
	HasResult bool
	// ExitCode is the command's exit status; meaningful only when HasExit.
	ExitCode int
	HasExit  bool
	// Failed marks a result the agent reported as an error (non-zero exit, is_error, failed patch).
	Failed bool
	// Files are the paths this call writes (patch targets, Edit/Write paths, shell redirections).
	Files []string
	// Plan is set for plan updates (update_plan, TodoWrite).
	Plan []PlanStep
}

// Session is one parsed agent session log.
type Session struct {
	Path   string
	Format Format
	ID     string
	CWD    string
	// Start is the first timestamp seen, verbatim; only rendered after the goal.
	Start  string
	Events []Event
	// RawBytes is the size of the log as read; BadLines counts records that did not parse
	// (typically a half-written last line of a live session).
	RawBytes int
	BadLines int
}

// ErrUnknownFormat is returned when auto-detection finds neither dialect.
var ErrUnknownFormat = errors.New("handoff: cannot tell the session format (use --format codex|claude)")

// ParseSessionFile reads and parses one session log.
func ParseSessionFile(path string, format Format) (Session, error) {
	f, err := os.Open(path)
	if err != nil {
		return Session{}, err
	}
	defer f.Close()
	s, err := ParseSession(f, format)
	s.Path = path
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// ParseSession parses a session log from r. With FormatAuto the dialect is detected from the first
// records that identify it.
func ParseSession(r io.Reader, format Format) (Session, error) {
	lines, size, err := readSessionLines(r)
	if err != nil {
		return Session{}, err
	}
	if format == FormatAuto {
		format = DetectSessionFormat(lines)
		if format == FormatAuto {
			return Session{RawBytes: size}, ErrUnknownFormat
		}
	}
	var s Session
	switch format {
	case FormatCodex:
		s = parseCodexLines(lines)
	case FormatClaude:
		s = parseClaudeLines(lines)
	default:
		return Session{}, fmt.Errorf("handoff: unsupported format %q", format)
	}
	s.Format = format
	s.RawBytes = size
	return s, nil
}

// readSessionLines splits a log into non-empty lines. It uses a Reader rather than a Scanner
// because Claude Code records carrying whole file contents routinely exceed any fixed line limit.
func readSessionLines(r io.Reader) ([][]byte, int, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var lines [][]byte
	size := 0
	for {
		line, err := br.ReadBytes('\n')
		size += len(line)
		if t := bytes.TrimSpace(line); len(t) > 0 {
			lines = append(lines, t)
		}
		if err == io.EOF {
			return lines, size, nil
		}
		if err != nil {
			return nil, size, err
		}
	}
}

// DetectSessionFormat looks at up to the first 50 records: Codex wraps everything in
// {"type","payload"} with its own record types, Claude Code records carry sessionId/message.
func DetectSessionFormat(lines [][]byte) Format {
	for i, line := range lines {
		if i >= 50 {
			break
		}
		var probe struct {
			Type      string          `json:"type"`
			Payload   json.RawMessage `json:"payload"`
			SessionID string          `json:"sessionId"`
			Message   json.RawMessage `json:"message"`
			Summary   json.RawMessage `json:"summary"`
		}
		if json.Unmarshal(line, &probe) != nil {
			continue
		}
		switch probe.Type {
		case "session_meta", "response_item", "event_msg", "turn_context", "compacted":
			if len(probe.Payload) > 0 {
				return FormatCodex
			}
		case "user", "assistant", "system":
			if probe.SessionID != "" || len(probe.Message) > 0 {
				return FormatClaude
			}
		case "summary":
			if len(probe.Summary) > 0 {
				return FormatClaude
			}
		}
		if probe.SessionID != "" {
			return FormatClaude
		}
	}
	return FormatAuto
}

// relPath shows a path relative to the session's working directory when it lies inside it, so
// Claude's absolute paths and Codex's relative ones de-duplicate against each other.
func relPath(cwd, p string) string {
	p = strings.TrimSpace(p)
	if p == "" {
		return ""
	}
	if cwd != "" && filepath.IsAbs(p) {
		if rel, err := filepath.Rel(cwd, p); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.ToSlash(rel)
		}
	}
	return filepath.ToSlash(filepath.Clean(p))
}

// textOf flattens a JSON string or an array of content parts ({type,text}) into text.
func textOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Text == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString(p.Text)
	}
	return b.String()
}
