package agenthooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/session"
)

// Input is what both agents write to a command hook's stdin (the fields compactd reads).
type Input struct {
	SessionID          string  `json:"session_id"`
	TranscriptPath     *string `json:"transcript_path"` // Codex sends null when there is none
	CWD                string  `json:"cwd"`
	HookEventName      string  `json:"hook_event_name"`
	Trigger            string  `json:"trigger"`             // PreCompact: manual | auto
	CustomInstructions *string `json:"custom_instructions"` // PreCompact
	Source             string  `json:"source"`              // SessionStart: startup | resume | clear | compact | fork
	ToolName           string  `json:"tool_name"`           // PreToolUse
}

func (in Input) transcript() string {
	if in.TranscriptPath == nil {
		return ""
	}
	return *in.TranscriptPath
}

// MaxOutputChars is Claude Code's cap on PreCompact stdout (QDe = 1e4 in 2.1.332: longer output
// is cut). It counts JavaScript string length, UTF-16 code units, so Bound does too. The same
// bound is used for SessionStart additionalContext, which the resumed model reads on every turn.
const MaxOutputChars = 10000

// Limits on what a hook reads: its stdin and the transcript's tail. A transcript larger than
// MaxTranscriptBytes is read from its last MaxTranscriptBytes (the newest work; the cut first
// line is dropped as a bad record).
const (
	maxStdinBytes      = 1 << 20
	MaxTranscriptBytes = 32 << 20
)

// DefaultTimeout bounds each hook's work. The installed agent-side timeouts are higher, so the
// hook always answers (possibly with nothing) before the agent would kill it.
const DefaultTimeout = 20 * time.Second

// RunOptions configures one hook run.
type RunOptions struct {
	Agent   Agent
	Event   string
	Timeout time.Duration // DefaultTimeout when zero
	// StateDir holds the handover markers and hooks.log (see DefaultStateDir).
	StateDir string
	// Summariser for the PreCompact gap check; off when Model is "".
	SummarizerURL, SummarizerKey, SummarizerModel string
	// Now is time.Now outside tests.
	Now func() time.Time
	// Log receives one line per run (also appended to StateDir/hooks.log); never prompt content.
	Log io.Writer
}

// DefaultStateDir is $XDG_STATE_HOME/compactd/hooks, else ~/.local/state/compactd/hooks.
func DefaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "compactd", "hooks")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "compactd-hooks")
	}
	return filepath.Join(home, ".local", "state", "compactd", "hooks")
}

// Run is one hook invocation: it reads the agent's JSON from stdin, writes the hook's answer to
// stdout and returns the exit code. It never returns 2 (which would block compaction) and never
// fails loudly: on any error, panic or timeout it writes nothing and returns 0, so the agent
// carries on exactly as without compactd. The only denial it ever issues is the PreToolUse
// guard's, and that is a JSON permissionDecision with exit 0.
func Run(ctx context.Context, stdin io.Reader, stdout io.Writer, o RunOptions) int {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	start := o.Now()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	type result struct {
		out  string
		note string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: fmt.Errorf("panic: %v", p)}
			}
		}()
		out, note, err := dispatch(ctx, stdin, o)
		done <- result{out, note, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		r = result{err: fmt.Errorf("timed out after %s; answered with nothing", o.Timeout)}
	}
	status := "ok"
	if r.err != nil {
		status, r.out = "skipped: "+r.err.Error(), ""
	}
	if r.out != "" {
		if _, err := io.WriteString(stdout, r.out); err != nil {
			status = "write failed: " + err.Error()
		}
	}
	o.logLine(fmt.Sprintf("%s compactd hook %s %s: %s; %s; %d chars out in %s",
		start.UTC().Format(time.RFC3339), o.Agent, o.Event, status, r.note, utf16Len(r.out), o.Now().Sub(start).Round(time.Millisecond)))
	return 0
}

func dispatch(ctx context.Context, stdin io.Reader, o RunOptions) (out, note string, err error) {
	data, err := io.ReadAll(io.LimitReader(stdin, maxStdinBytes+1))
	if err != nil {
		return "", "", err
	}
	if len(data) > maxStdinBytes {
		return "", "", errors.New("hook input over 1 MiB")
	}
	if err := jsonx.CheckDepth(data, 64); err != nil {
		return "", "", fmt.Errorf("hook input: %w", err)
	}
	var in Input
	if err := json.Unmarshal(data, &in); err != nil {
		return "", "", fmt.Errorf("hook input: %w", err)
	}
	note = "session " + safeID(in.SessionID)
	switch o.Event {
	case "PreCompact":
		if o.Agent != Claude {
			return "", note, errors.New("only Claude Code's PreCompact can add to the compaction instructions")
		}
		o.markHandover(in.SessionID)
		ess, err := Gather(ctx, in.transcript(), o.Agent, o.gapChecker())
		if err != nil {
			return "", note, err
		}
		return Bound(ess.PreCompactText(), MaxOutputChars), note + ess.note(), nil
	case "SessionStart":
		if !wantSource(o.Agent, in.Source) {
			return "", note + ", source " + in.Source + " ignored", nil
		}
		o.clearHandover(in.SessionID)
		if o.Agent == Codex && in.Source == "resume" {
			// One copy per context: the history Codex resumes may already carry them.
			carried, err := CarriesEssentials(in.transcript())
			if err != nil {
				return "", note, err
			}
			if carried {
				return "", note + ", source resume: the resumed history already carries the essentials", nil
			}
		}
		ess, err := Gather(ctx, in.transcript(), o.Agent, nil)
		if err != nil {
			return "", note, err
		}
		text := Bound(ess.SessionStartText(), MaxOutputChars)
		if text == "" {
			return "", note + ess.note(), nil
		}
		b, err := json.Marshal(map[string]any{"hookSpecificOutput": map[string]string{
			"hookEventName": "SessionStart", "additionalContext": text}})
		return string(b) + "\n", note + ", source " + in.Source + ess.note(), err
	case "PreToolUse":
		if !o.handoverActive(in.SessionID) {
			return "", note + ", allowed", nil
		}
		b, err := json.Marshal(map[string]any{"hookSpecificOutput": map[string]string{
			"hookEventName":            "PreToolUse",
			"permissionDecision":       "deny",
			"permissionDecisionReason": "compactd: a handover (compaction) is being prepared; file edits wait until the compacted session has resumed with its essentials. Re-read the file after resuming, then edit.",
		}})
		return string(b) + "\n", note + ", denied " + safeID(in.ToolName), err
	}
	return "", note, fmt.Errorf("unknown hook event %q", o.Event)
}

// wantSource: Claude Code's hook is installed with matcher "compact"; Codex's matcher semantics
// for SessionStart are not documented, so its hook is installed for every source and filters
// here. Codex 0.169.0 sends "compact" after its own compaction and "resume" for `codex exec
// resume` (both observed in cmd/compactd/agents_e2e_test.go). Codex 0.171 fires SessionStart
// once per `codex exec resume --last` (source "resume"; "startup" before the first turn of a new
// session), and records the injected context in the rollout as a developer message that every
// later resume replays: a resume whose history already carries the essentials gets none
// (CarriesEssentials).
func wantSource(a Agent, source string) bool {
	switch source {
	case "compact":
		return true
	case "resume":
		return a == Codex
	}
	return false
}

var unsafeID = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// safeID makes a session id or tool name safe for a file name and a log line.
func safeID(s string) string {
	s = unsafeID.ReplaceAllString(s, "_")
	if len(s) > 80 {
		s = s[:80]
	}
	if s == "" {
		return "unknown"
	}
	return s
}

// handoverTTL bounds how long a PreCompact marker holds the guard closed when no SessionStart
// clears it (compaction failed, agent killed).
const handoverTTL = 10 * time.Minute

func (o RunOptions) markerPath(session string) string {
	return filepath.Join(o.StateDir, "handover-"+safeID(session))
}

func (o RunOptions) markHandover(session string) {
	if o.StateDir == "" || os.MkdirAll(o.StateDir, 0o700) != nil {
		return
	}
	_ = os.WriteFile(o.markerPath(session), []byte(o.Now().UTC().Format(time.RFC3339Nano)), 0o600)
}

func (o RunOptions) clearHandover(session string) {
	if o.StateDir != "" {
		_ = os.Remove(o.markerPath(session))
	}
}

func (o RunOptions) handoverActive(session string) bool {
	if o.StateDir == "" {
		return false
	}
	info, err := os.Stat(o.markerPath(session))
	return err == nil && o.Now().Sub(info.ModTime()) < handoverTTL
}

// maxLogBytes: hooks.log is rotated to hooks.log.1 beyond this.
const maxLogBytes = 1 << 20

func (o RunOptions) logLine(line string) {
	if o.Log != nil {
		fmt.Fprintln(o.Log, line)
	}
	if o.StateDir == "" || os.MkdirAll(o.StateDir, 0o700) != nil {
		return
	}
	p := filepath.Join(o.StateDir, "hooks.log")
	if info, err := os.Stat(p); err == nil && info.Size() > maxLogBytes {
		_ = os.Rename(p, p+".1")
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

// utf16Len is the length JavaScript reports for s.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// Bound cuts s to at most max UTF-16 code units at a line boundary when there is one in the last
// quarter, marking the cut. Valid UTF-8 in, valid UTF-8 out.
func Bound(s string, max int) string {
	if utf16Len(s) <= max {
		return s
	}
	const mark = "\n[… cut by compactd to fit the hook output limit]"
	budget := max - utf16Len(mark)
	n, cut := 0, 0
	for i, r := range s {
		w := utf16.RuneLen(r)
		if w < 0 {
			w = 1
		}
		if n+w > budget {
			break
		}
		n += w
		cut = i + utf8.RuneLen(r)
	}
	out := s[:cut]
	if j := strings.LastIndexByte(out, '\n'); j > len(out)*3/4 {
		out = out[:j]
	}
	return out + mark
}

// gapChecker is the PreCompact gap checker, or nil when no summariser is configured: the gap
// check needs a model, the ledger and reduction do not.
func (o RunOptions) gapChecker() session.GapChecker {
	if o.SummarizerModel == "" {
		return nil
	}
	return session.NewOpenAIGapChecker(o.SummarizerURL, o.SummarizerKey, o.SummarizerModel)
}
