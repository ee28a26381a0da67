package session

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ResumeHeader opens every resume prompt. It is a constant, and nothing that varies between
// sessions (dates, sizes, ids) is rendered before the goal, so the successor's prompt prefix is
// byte-identical across handovers and stays in the provider's prompt cache.
const ResumeHeader = `# Resume: continuing earlier agent sessions

You are taking over work that earlier coding-agent sessions started. This resume was generated
from their logs by compactd. It keeps what the user said verbatim and reduces the rest: the
agent's reasoning in excerpts, the files it modified, the commands it ran and how they ended, the
errors it saw, its last plan and its last message. Tool output is mostly left out; where a
gap check ran, its findings list what the reduction would otherwise have missed.

How to use it: the user's messages are the authority on what is wanted. Everything else is the
earlier agent's record and may be stale; re-read a file before editing it, and re-run a command
before relying on its result. Continue from the plan and the last message rather than starting
over, and do not redo work that the file and command lists show as done.

Sections, always in this order: Goal, User messages, Earlier summary, Reasoning excerpts, Files
modified, Commands run, Failures, Errors seen, Plan, Last assistant message, Gap check findings
(when run), Sessions.

## Goal

`

// ReduceOptions bounds each part of a resume. Zero fields take the defaults of
// DefaultReduceOptions.
type ReduceOptions struct {
	// MessageTokens is the per-user-message budget; longer messages lose their middle.
	MessageTokens int
	// ReasoningTokens bounds each reasoning excerpt, MaxReasoning their number (first few and
	// the latest are kept: the start holds the approach, the end the current state).
	ReasoningTokens int
	MaxReasoning    int
	// MaxCommands bounds the command list (the latest are kept); MaxFailures the failure list.
	MaxCommands int
	MaxFailures int
	// FailureLines is how many trailing output lines are quoted per failure.
	FailureLines int
	// SummaryTokens bounds the agent's own latest compaction summary.
	SummaryTokens int
}

// DefaultReduceOptions are sized so a long session's resume stays in the low thousands of tokens.
var DefaultReduceOptions = ReduceOptions{
	MessageTokens:   1500,
	ReasoningTokens: 200,
	MaxReasoning:    30,
	MaxCommands:     60,
	MaxFailures:     15,
	FailureLines:    12,
	SummaryTokens:   2000,
}

func (o ReduceOptions) withDefaults() ReduceOptions {
	d := DefaultReduceOptions
	pick := func(v, def int) int {
		if v > 0 {
			return v
		}
		return def
	}
	return ReduceOptions{
		MessageTokens:   pick(o.MessageTokens, d.MessageTokens),
		ReasoningTokens: pick(o.ReasoningTokens, d.ReasoningTokens),
		MaxReasoning:    pick(o.MaxReasoning, d.MaxReasoning),
		MaxCommands:     pick(o.MaxCommands, d.MaxCommands),
		MaxFailures:     pick(o.MaxFailures, d.MaxFailures),
		FailureLines:    pick(o.FailureLines, d.FailureLines),
		SummaryTokens:   pick(o.SummaryTokens, d.SummaryTokens),
	}
}

// CommandRun is one shell command of the session (consecutive identical runs are folded).
type CommandRun struct {
	Command  string
	ExitCode int
	HasExit  bool
	Failed   bool
	// Repeat counts consecutive identical runs with the same outcome (1 for a single run).
	Repeat int
	// Output is the tail of the output; kept for failures only.
	Output string
}

// SessionInfo describes one input log; rendered last because it varies.
type SessionInfo struct {
	ID, Path, CWD, Start string
	Format               Format
	RawBytes             int
	Events               int
	BadLines             int
}

// Finding is one merged gap-check result.
type Finding struct {
	Category string
	Text     string
}

// Resume is the reduction of one or more sessions. Markdown renders it.
type Resume struct {
	Goal             string
	UserMessages     []string
	EarlierSummary   string
	Reasoning        []string
	ReasoningOmitted int
	FilesModified    []string
	Commands         []CommandRun
	CommandsOmitted  int
	Failures         []CommandRun
	FailuresOmitted  int
	Errors           []string
	Plan             []PlanStep
	LastAssistant    string
	// GapChecked is set once a gap check has run (even if it found nothing); Findings are its
	// merged, de-duplicated results in category order.
	GapChecked bool
	Findings   []Finding
	Sessions   []SessionInfo
}

// Reduce reduces sessions (in the order given, oldest first) with DefaultReduceOptions.
func Reduce(sessions ...Session) Resume { return ReduceWith(DefaultReduceOptions, sessions...) }

// ReduceWith reduces sessions with explicit bounds.
func ReduceWith(opts ReduceOptions, sessions ...Session) Resume {
	opts = opts.withDefaults()
	var r Resume
	seenFile := map[string]bool{}
	seenErr := map[string]bool{}
	var reasoning []string
	addErr := func(s string) {
		s = strings.TrimSpace(s)
		if s != "" && !seenErr[s] {
			seenErr[s] = true
			r.Errors = append(r.Errors, s)
		}
	}
	for _, s := range sessions {
		r.Sessions = append(r.Sessions, SessionInfo{ID: s.ID, Path: s.Path, CWD: s.CWD, Start: s.Start,
			Format: s.Format, RawBytes: s.RawBytes, Events: len(s.Events), BadLines: s.BadLines})
		for _, e := range s.Events {
			switch e.Kind {
			case EventUser:
				msg := truncateMiddle(e.Text, opts.MessageTokens)
				if r.Goal == "" && substantive(e.Text) {
					r.Goal = msg
				}
				r.UserMessages = append(r.UserMessages, msg)
			case EventAssistant:
				r.LastAssistant = e.Text
			case EventReasoning:
				reasoning = append(reasoning, e.Text)
			case EventCompaction:
				if strings.TrimSpace(e.Text) != "" {
					r.EarlierSummary = e.Text
				}
			case EventError:
				addErr(firstLines(e.Text, 3, 400))
			case EventTool:
				for _, f := range e.Files {
					if !seenFile[f] {
						seenFile[f] = true
						r.FilesModified = append(r.FilesModified, f)
					}
				}
				if e.Plan != nil {
					r.Plan = e.Plan
				}
				if e.Command != "" {
					run := CommandRun{Command: e.Command, ExitCode: e.ExitCode, HasExit: e.HasExit, Failed: e.Failed, Repeat: 1}
					if n := len(r.Commands); n > 0 && sameRun(r.Commands[n-1], run) {
						r.Commands[n-1].Repeat++
					} else {
						r.Commands = append(r.Commands, run)
					}
					if e.Failed {
						run.Output = truncateMiddle(lastLines(stripExecHeader(e.Output), opts.FailureLines), opts.MessageTokens/2)
						r.Failures = append(r.Failures, run)
					}
				}
				if e.Failed {
					what := e.Tool
					if e.Command != "" {
						what = oneLine(e.Command, 80)
					}
					addErr(what + ": " + errorLine(e.Output))
				}
			}
		}
	}
	if r.Goal == "" && len(r.UserMessages) > 0 {
		r.Goal = r.UserMessages[0]
	}
	r.LastAssistant = truncateMiddle(r.LastAssistant, opts.MessageTokens)
	r.EarlierSummary = truncateMiddle(r.EarlierSummary, opts.SummaryTokens)
	r.Reasoning, r.ReasoningOmitted = keepEnds(reasoning, opts.MaxReasoning, 3)
	for i, t := range r.Reasoning {
		r.Reasoning[i] = truncateMiddle(t, opts.ReasoningTokens)
	}
	if n := len(r.Commands); n > opts.MaxCommands {
		r.CommandsOmitted = n - opts.MaxCommands
		r.Commands = r.Commands[n-opts.MaxCommands:]
	}
	if n := len(r.Failures); n > opts.MaxFailures {
		r.FailuresOmitted = n - opts.MaxFailures
		r.Failures = r.Failures[n-opts.MaxFailures:]
	}
	return r
}

func sameRun(a, b CommandRun) bool {
	return a.Command == b.Command && a.ExitCode == b.ExitCode && a.HasExit == b.HasExit && a.Failed == b.Failed
}

// substantive rejects acknowledgements ("ok", "continue") and slash commands as the goal.
func substantive(s string) bool {
	t := strings.TrimSpace(s)
	if strings.HasPrefix(t, "/") && !strings.ContainsAny(t, " \n") {
		return false
	}
	return len(strings.Fields(t)) >= 3 || utf8.RuneCountInString(t) >= 20
}

// keepEnds keeps the first head items and the latest ones, up to max in all.
func keepEnds(xs []string, maxN, head int) ([]string, int) {
	if len(xs) <= maxN {
		return append([]string(nil), xs...), 0
	}
	head = min(head, maxN)
	out := append([]string(nil), xs[:head]...)
	out = append(out, xs[len(xs)-(maxN-head):]...)
	return out, len(xs) - maxN
}

var errorWordRe = regexp.MustCompile(`(?i)(error|fail|panic|exception|fatal|undefined|cannot|denied|not found|no such|traceback)`)

// errorLine picks the most telling line of a failed tool's output: the first that names an error,
// else the first non-empty one.
func errorLine(out string) string {
	first := ""
	out = strings.NewReplacer("<tool_use_error>", "", "</tool_use_error>", "").Replace(out)
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "Exit code") || strings.HasPrefix(l, "Wall time") ||
			strings.HasPrefix(l, "Process exited") || l == "Output:" || strings.HasPrefix(l, "Chunk ID") ||
			strings.HasPrefix(l, "Original token count") {
			continue
		}
		if first == "" {
			first = l
		}
		if errorWordRe.MatchString(l) && !strings.HasPrefix(l, "FAIL\t") && l != "FAIL" {
			return oneLine(l, 300)
		}
	}
	if first == "" {
		return "(no output)"
	}
	return oneLine(first, 300)
}

func oneLine(s string, n int) string {
	s = strings.TrimSpace(s)
	more := false
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s, more = s[:i], true
	}
	if len(s) > n {
		s, more = strings.ToValidUTF8(s[:n], ""), true
	}
	if more {
		s += " …"
	}
	return s
}

func firstLines(s string, n, maxBytes int) string {
	ls := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(ls) > n {
		ls = ls[:n]
	}
	out := strings.Join(ls, "\n")
	if len(out) > maxBytes {
		out = strings.ToValidUTF8(out[:maxBytes], "") + " …"
	}
	return out
}

var execHeaderRe = regexp.MustCompile(`^(Exit code:? -?\d+|Wall time: .*|Chunk ID: .*|Process exited with code -?\d+|Original token count: .*|Output:)$`)

// stripExecHeader drops the status lines Codex and Claude put before a command's output; the
// exit code is already shown beside the command.
func stripExecHeader(out string) string {
	for {
		line, rest, ok := strings.Cut(out, "\n")
		if !execHeaderRe.MatchString(strings.TrimSpace(line)) {
			return out
		}
		if !ok {
			return ""
		}
		out = rest
	}
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// Markdown renders the resume: ResumeHeader, the goal, then the fixed sequence of sections. Empty
// sections still appear (as "(none)") so the structure, and the cacheable prefix, never shifts.
func (r Resume) Markdown() string {
	var b strings.Builder
	b.WriteString(ResumeHeader)
	if r.Goal == "" {
		b.WriteString("(none found)\n")
	} else {
		writeFenced(&b, r.Goal)
	}

	b.WriteString("\n## User messages\n\n")
	if len(r.UserMessages) == 0 {
		b.WriteString("(none)\n")
	}
	for i, m := range r.UserMessages {
		fmt.Fprintf(&b, "%d.", i+1)
		if m == r.Goal {
			b.WriteString(" (the goal, above)\n")
			continue
		}
		b.WriteString("\n")
		writeFenced(&b, m)
	}

	b.WriteString("\n## Earlier summary\n\n")
	if r.EarlierSummary == "" {
		b.WriteString("(none: no compaction in these sessions)\n")
	} else {
		b.WriteString("The agent's own latest compaction summary:\n\n")
		writeFenced(&b, r.EarlierSummary)
	}

	b.WriteString("\n## Reasoning excerpts\n\n")
	if len(r.Reasoning) == 0 {
		b.WriteString("(none)\n")
	}
	for i, t := range r.Reasoning {
		if r.ReasoningOmitted > 0 && i == min(3, len(r.Reasoning)) {
			fmt.Fprintf(&b, "- [… %d excerpts omitted …]\n", r.ReasoningOmitted)
		}
		b.WriteString("- ")
		b.WriteString(indent(strings.TrimSpace(t), "  "))
		b.WriteString("\n")
	}

	b.WriteString("\n## Files modified\n\n")
	if len(r.FilesModified) == 0 {
		b.WriteString("(none)\n")
	}
	for _, f := range r.FilesModified {
		b.WriteString("- " + codeSpan(f) + "\n")
	}

	b.WriteString("\n## Commands run\n\n")
	if len(r.Commands) == 0 {
		b.WriteString("(none)\n")
	}
	if r.CommandsOmitted > 0 {
		fmt.Fprintf(&b, "(%d earlier commands omitted)\n", r.CommandsOmitted)
	}
	for _, c := range r.Commands {
		b.WriteString("- " + runStatus(c) + " " + codeSpan(oneLine(c.Command, 200)))
		if c.Repeat > 1 {
			fmt.Fprintf(&b, " ×%d", c.Repeat)
		}
		b.WriteString("\n")
	}

	b.WriteString("\n## Failures\n\n")
	if len(r.Failures) == 0 {
		b.WriteString("(none)\n")
	}
	if r.FailuresOmitted > 0 {
		fmt.Fprintf(&b, "(%d earlier failures omitted)\n", r.FailuresOmitted)
	}
	for _, c := range r.Failures {
		b.WriteString("- " + runStatus(c) + " " + codeSpan(oneLine(c.Command, 200)) + "\n")
		if strings.TrimSpace(c.Output) != "" {
			writeFencedIndented(&b, c.Output, "  ")
		}
	}

	b.WriteString("\n## Errors seen\n\n")
	if len(r.Errors) == 0 {
		b.WriteString("(none)\n")
	}
	for _, e := range r.Errors {
		b.WriteString("- " + indent(e, "  ") + "\n")
	}

	b.WriteString("\n## Plan\n\n")
	if len(r.Plan) == 0 {
		b.WriteString("(none)\n")
	}
	for _, p := range r.Plan {
		box := "[ ]"
		switch p.Status {
		case "completed":
			box = "[x]"
		case "in_progress":
			box = "[~]"
		}
		b.WriteString("- " + box + " " + oneLine(p.Step, 300) + "\n")
	}

	b.WriteString("\n## Last assistant message\n\n")
	if r.LastAssistant == "" {
		b.WriteString("(none)\n")
	} else {
		writeFenced(&b, r.LastAssistant)
	}

	if r.GapChecked {
		b.WriteString("\n## Gap check findings\n\n")
		if len(r.Findings) == 0 {
			b.WriteString("(nothing missing was found)\n")
		}
		cat := ""
		for _, f := range r.Findings {
			if f.Category != cat {
				cat = f.Category
				b.WriteString("\n### " + upperFirst(cat) + "\n\n")
			}
			b.WriteString("- " + indent(f.Text, "  ") + "\n")
		}
	}

	b.WriteString("\n## Sessions\n\n")
	for _, s := range r.Sessions {
		fmt.Fprintf(&b, "- %s session %s", s.Format, orDash(s.ID))
		if s.Path != "" {
			b.WriteString(" (" + codeSpan(s.Path) + ")")
		}
		if s.CWD != "" {
			b.WriteString(", cwd " + codeSpan(s.CWD))
		}
		if s.Start != "" {
			b.WriteString(", started " + s.Start)
		}
		fmt.Fprintf(&b, ", %d bytes, %d events", s.RawBytes, s.Events)
		if s.BadLines > 0 {
			fmt.Fprintf(&b, ", %d unreadable lines", s.BadLines)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func runStatus(c CommandRun) string {
	switch {
	case c.HasExit && c.ExitCode != 0:
		return "✗ exit " + strconv.Itoa(c.ExitCode)
	case c.HasExit && c.Failed:
		return "✗ failed"
	case c.HasExit:
		return "✓ exit 0"
	case c.Failed:
		return "✗ failed"
	}
	return "? no exit status"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func indent(s, pre string) string { return strings.ReplaceAll(s, "\n", "\n"+pre) }

// writeFenced writes s verbatim inside a code fence longer than any backtick run in s, so user
// text containing Markdown or code fences cannot break out of its block.
func writeFenced(b *strings.Builder, s string) { writeFencedIndented(b, s, "") }

func writeFencedIndented(b *strings.Builder, s, pre string) {
	fence := strings.Repeat("`", max(3, longestRun(s, '`')+1))
	b.WriteString(pre + fence + "text\n")
	if pre == "" {
		b.WriteString(s)
	} else {
		b.WriteString(pre + indent(s, pre))
	}
	if !strings.HasSuffix(s, "\n") {
		b.WriteString("\n")
	}
	b.WriteString(pre + fence + "\n")
}

func codeSpan(s string) string {
	n := longestRun(s, '`')
	if n == 0 {
		return "`" + s + "`"
	}
	f := strings.Repeat("`", n+1)
	return f + " " + s + " " + f
}

func longestRun(s string, c byte) int {
	best, cur := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			cur++
			best = max(best, cur)
		} else {
			cur = 0
		}
	}
	return best
}
