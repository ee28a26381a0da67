package agenthooks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/session"
)

// Essentials is what a compacted session must not lose, taken from the agent's own transcript:
// the facts ledger (hard facts of tool outputs, commands, errors, user decisions), the files
// modified, the failing commands, the open plan and, when a summariser is configured, the gap
// check's findings.
type Essentials struct {
	SessionID string
	Ledger    string
	Resume    session.Resume
	GapErr    error
	rawBytes  int
}

// ledgerBudget bounds the facts ledger inside the 10,000-character hook output.
const ledgerBudget = 6000

// OpenTranscript opens a session log for reading, positioned at its last MaxTranscriptBytes:
// transcripts can be hundreds of megabytes, and the hook must stay fast and bounded.
func OpenTranscript(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if off := info.Size() - transcriptLimit; off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			f.Close()
			return nil, err
		}
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(f, transcriptLimit), f}, nil
}

// transcriptLimit is MaxTranscriptBytes; tests lower it to exercise the tail read cheaply.
var transcriptLimit int64 = MaxTranscriptBytes

// Gather parses the transcript (bounded, see OpenTranscript) and extracts the essentials. A
// checker, when given, runs the gap check within ctx; its failure is recorded, not returned.
func Gather(ctx context.Context, transcript string, a Agent, checker session.GapChecker) (Essentials, error) {
	if transcript == "" {
		return Essentials{}, errors.New("no transcript_path in the hook input")
	}
	r, err := OpenTranscript(transcript)
	if err != nil {
		return Essentials{}, err
	}
	defer r.Close()
	format := session.FormatClaude
	if a == Codex {
		format = session.FormatCodex
	}
	s, err := session.ParseSession(r, format)
	if err != nil {
		return Essentials{}, err
	}
	if err := ctx.Err(); err != nil {
		return Essentials{}, err
	}
	e := Essentials{SessionID: s.ID, rawBytes: s.RawBytes}
	e.Resume = session.Reduce(s)
	items := SessionItems(s)
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	e.Ledger = compact.Ledger(items, idx, ledgerBudget)
	if checker != nil {
		// The gap check (a model call) gets at most 60% of the time left, so that a slow
		// summariser costs the findings, never the ledger and reduction already in hand.
		gctx := ctx
		if dl, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			gctx, cancel = context.WithTimeout(ctx, time.Until(dl)*3/5)
			defer cancel()
		}
		findings, err := session.GapCheck(gctx, checker, []session.Session{s}, session.GapCheckOptions{Checkers: len(session.GapCategories)})
		if err != nil {
			e.GapErr = err
		} else {
			e.Resume.GapChecked, e.Resume.Findings = true, findings
		}
	}
	return e, nil
}

func (e Essentials) note() string {
	s := fmt.Sprintf(", transcript %d bytes, ledger %d bytes", e.rawBytes, len(e.Ledger))
	if e.Resume.GapChecked {
		s += fmt.Sprintf(", %d gap findings", len(e.Resume.Findings))
	} else if e.GapErr != nil {
		s += ", gap check failed"
	}
	return s
}

// SessionItems renders a parsed session as Responses items (user messages, tool calls and their
// outputs), the form compact.Ledger reads, so the hooks extract facts exactly as the proxy does.
func SessionItems(s session.Session) []api.Item {
	var items []api.Item
	add := func(typ, role string, v any) {
		b, err := json.Marshal(v)
		if err == nil {
			items = append(items, api.Item{Raw: b, Type: typ, Role: role})
		}
	}
	for i, ev := range s.Events {
		switch ev.Kind {
		case session.EventUser:
			add("message", "user", map[string]any{"type": "message", "role": "user",
				"content": []map[string]string{{"type": "input_text", "text": ev.Text}}})
		case session.EventTool:
			id := "call_" + strconv.Itoa(i)
			args := ev.Input
			if ev.Command != "" {
				b, _ := json.Marshal(map[string]string{"command": ev.Command})
				args = string(b)
			}
			// compact.Ledger walks arguments and JSON-looking outputs with gjson, which
			// recurses: a hostile transcript's nesting stops here (jsonx bound).
			if jsonx.CheckDepth([]byte(args), jsonx.MaxDepth) != nil {
				args = "{}"
			}
			add("function_call", "", map[string]string{"type": "function_call", "name": ev.Tool, "arguments": args, "call_id": id})
			if ev.HasResult {
				out := ev.Output
				if ev.Tool == "Read" {
					out = readLineNumbers.ReplaceAllString(out, "")
				}
				if ev.HasExit && ev.Command != "" {
					out = "Exit code: " + strconv.Itoa(ev.ExitCode) + "\n" + out
				}
				if strings.HasPrefix(out, "{") && jsonx.CheckDepth([]byte(out), jsonx.MaxDepth) != nil {
					out = "[output nested too deeply; left out]"
				}
				add("function_call_output", "", map[string]string{"type": "function_call_output", "call_id": id, "output": out})
			}
		}
	}
	return items
}

// PreCompactText is the PreCompact hook's stdout, which Claude Code appends to the compaction
// instructions: an order to keep the facts, then the facts, most valuable first, so that the
// 10,000-character cap cuts the least valuable.
func (e Essentials) PreCompactText() string {
	var b strings.Builder
	b.WriteString("compactd (PreCompact hook): the summary must keep the facts below verbatim — they come from tool outputs, commands and user messages of this session and are costly to rediscover. Copy the facts ledger into the summary as a section of its own.\n\n")
	e.body(&b)
	return b.String()
}

// sessionStartHeader starts every SessionStart text; CarriesEssentials looks for it.
const sessionStartHeader = "compactd (SessionStart hook):"

// SessionStartText is the additionalContext injected when the compacted session resumes.
func (e Essentials) SessionStartText() string {
	var b strings.Builder
	b.WriteString(sessionStartHeader + " resume essentials of this session before its compaction, taken from its transcript. The summary above may have lost them; prefer these facts, but re-read a file before editing it.\n\n")
	if !e.body(&b) {
		return ""
	}
	return b.String()
}

// body writes the sections that have content and reports whether any did.
func (e Essentials) body(b *strings.Builder) bool {
	wrote := false
	r := e.Resume
	if r.GapChecked && len(r.Findings) > 0 {
		b.WriteString("## Gap check findings (what a summary would miss)\n")
		for _, f := range r.Findings {
			fmt.Fprintf(b, "- [%s] %s\n", f.Category, f.Text)
		}
		b.WriteString("\n")
		wrote = true
	}
	if e.Ledger != "" {
		b.WriteString(e.Ledger)
		if !strings.HasSuffix(e.Ledger, "\n") {
			b.WriteString("\n")
		}
		b.WriteString("\n")
		wrote = true
	}
	if len(r.FilesModified) > 0 {
		b.WriteString("## Files modified\n")
		for _, f := range r.FilesModified {
			fmt.Fprintf(b, "- %s\n", f)
		}
		b.WriteString("\n")
		wrote = true
	}
	if len(r.Failures) > 0 {
		b.WriteString("## Failing commands\n")
		for _, f := range r.Failures {
			status := "failed"
			if f.HasExit {
				status = "exit " + strconv.Itoa(f.ExitCode)
			}
			fmt.Fprintf(b, "- `%s` (%s)\n", oneLine(f.Command, 200), status)
			if t := strings.TrimSpace(f.Output); t != "" {
				fmt.Fprintf(b, "  %s\n", oneLine(lastLine(t), 300))
			}
		}
		b.WriteString("\n")
		wrote = true
	}
	var open []session.PlanStep
	for _, p := range r.Plan {
		if p.Status != "completed" {
			open = append(open, p)
		}
	}
	if len(open) > 0 {
		b.WriteString("## Open work\n")
		for _, p := range open {
			fmt.Fprintf(b, "- [%s] %s\n", p.Status, oneLine(p.Step, 300))
		}
		b.WriteString("\n")
		wrote = true
	}
	return wrote
}

// CarriesEssentials reports whether a Codex rollout (read like Gather reads it, its newest
// MaxTranscriptBytes) already holds resume essentials that are still in the model's context: a
// developer message starting with the SessionStart header, written after the rollout's last
// compaction (a "compacted" record or a context_compacted event). Codex 0.171 records a
// SessionStart hook's additionalContext as such a message and replays it on every later resume,
// so injecting again would put a second copy beside it in the same request.
func CarriesEssentials(transcript string) (bool, error) {
	if transcript == "" {
		return false, errors.New("no transcript_path in the hook input")
	}
	r, err := OpenTranscript(transcript)
	if err != nil {
		return false, err
	}
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	header := []byte(sessionStartHeader)
	carried := false
	for {
		line, err := br.ReadBytes('\n')
		// Cheap filters first: most records are neither, and some are megabytes of tool output.
		if bytes.Contains(line, []byte("compacted")) || bytes.Contains(line, header) {
			switch codexRecordKind(line) {
			case "compaction":
				carried = false
			case "essentials":
				carried = true
			}
		}
		if err == io.EOF {
			return carried, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// codexRecordKind classifies one rollout line: "compaction", "essentials" (compactd's injected
// developer message) or "".
func codexRecordKind(line []byte) string {
	if jsonx.Valid(line) != nil {
		return "" // a half-written last line, or the cut first line of a tail read
	}
	rec := gjson.ParseBytes(line)
	payload := rec.Get("payload")
	switch {
	case rec.Get("type").Str == "compacted",
		rec.Get("type").Str == "event_msg" && payload.Get("type").Str == "context_compacted":
		return "compaction"
	case rec.Get("type").Str == "response_item" && payload.Get("type").Str == "message" && payload.Get("role").Str == "developer":
		found := false
		payload.Get("content").ForEach(func(_, c gjson.Result) bool {
			found = strings.HasPrefix(strings.TrimSpace(c.Get("text").Str), sessionStartHeader)
			return !found
		})
		if found {
			return "essentials"
		}
	}
	return ""
}

// readLineNumbers is the `cat -n` prefix Claude Code's Read tool puts before every line; it would
// hide `key: value` lines from the ledger.
var readLineNumbers = regexp.MustCompile(`(?m)^ *[0-9]+\t`)

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + " …"
	}
	return s
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
