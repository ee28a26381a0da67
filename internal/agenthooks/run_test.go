package agenthooks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/session"
)

// claudeLine writes one Claude Code transcript record.
func claudeLine(t *testing.T, w io.Writer, v map[string]any) {
	t.Helper()
	v["sessionId"] = "sess-1"
	v["cwd"] = "/work"
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(append(b, '\n'))
}

// transcript is a Claude Code session where the fact lives only in a Read tool result, plus
// filler tool outputs to make it as large as wanted.
func transcript(t *testing.T, dir string, filler int) string {
	t.Helper()
	var b bytes.Buffer
	msg := func(role string, content any) map[string]any {
		return map[string]any{"type": role, "message": map[string]any{"role": role, "content": content}}
	}
	claudeLine(t, &b, msg("user", "Read the notes and fix the failing test"))
	claudeLine(t, &b, msg("assistant", []any{map[string]any{"type": "tool_use", "id": "t1", "name": "Read", "input": map[string]any{"file_path": "/work/notes.txt"}}}))
	claudeLine(t, &b, msg("user", []any{map[string]any{"type": "tool_result", "tool_use_id": "t1", "content": "     1\tlisten_port: 7431 (SECRET_FACT_PORT=7431)\n"}}))
	claudeLine(t, &b, msg("assistant", []any{map[string]any{"type": "tool_use", "id": "t2", "name": "Bash", "input": map[string]any{"command": "go test ./pkg/"}}}))
	claudeLine(t, &b, msg("user", []any{map[string]any{"type": "tool_result", "tool_use_id": "t2", "is_error": true, "content": "Exit code 1\n--- FAIL: TestX\nFAIL pkg 0.1s"}}))
	claudeLine(t, &b, msg("assistant", []any{map[string]any{"type": "tool_use", "id": "t3", "name": "Edit", "input": map[string]any{"file_path": "/work/pkg/x.go", "old_string": "a", "new_string": "b"}}}))
	claudeLine(t, &b, msg("user", []any{map[string]any{"type": "tool_result", "tool_use_id": "t3", "content": "ok"}}))
	for i := range filler {
		out := fmt.Sprintf("VALUE_%d=%d %s\n", i, i, strings.Repeat("é", 300))
		claudeLine(t, &b, msg("assistant", []any{map[string]any{"type": "tool_use", "id": fmt.Sprint("f", i), "name": "Bash", "input": map[string]any{"command": fmt.Sprint("cat f", i)}}}))
		claudeLine(t, &b, msg("user", []any{map[string]any{"type": "tool_result", "tool_use_id": fmt.Sprint("f", i), "content": out}}))
	}
	p := filepath.Join(dir, "sess-1.jsonl")
	if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func hookInput(event, transcriptPath, source string) string {
	b, _ := json.Marshal(map[string]any{"session_id": "sess-1", "transcript_path": transcriptPath, "cwd": "/work",
		"hook_event_name": event, "trigger": "manual", "custom_instructions": nil, "source": source, "tool_name": "Edit"})
	return string(b)
}

func runHook(t *testing.T, o RunOptions, stdin string) (string, int, string) {
	t.Helper()
	var out, log bytes.Buffer
	o.Log = &log
	code := Run(context.Background(), strings.NewReader(stdin), &out, o)
	return out.String(), code, log.String()
}

func TestPreCompactOutput(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		filler int
	}{
		{"small session", 0},
		{"output over the cap is bounded", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := transcript(t, dir, tc.filler)
			out, code, log := runHook(t, RunOptions{Agent: Claude, Event: "PreCompact", StateDir: dir}, hookInput("PreCompact", p, ""))
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			wants := []string{"compactd (PreCompact hook)", "## Facts ledger", "pkg/x.go", "go test ./pkg/"}
			if tc.filler == 0 {
				// With hundreds of newer facts the ledger's budget goes to the newest, by design.
				wants = append(wants, "SECRET_FACT_PORT=7431")
			}
			for _, want := range wants {
				if !strings.Contains(out, want) {
					t.Errorf("PreCompact output lacks %q:\n%s", want, out)
				}
			}
			if n := utf16Len(out); n > MaxOutputChars {
				t.Errorf("output is %d UTF-16 units, over Claude Code's %d cap", n, MaxOutputChars)
			}
			if !utf8.ValidString(out) {
				t.Error("output is not valid UTF-8")
			}
			if !strings.Contains(log, "claude PreCompact: ok") || strings.Contains(log, "7431") {
				t.Errorf("log line = %q (want the run, never content)", log)
			}
		})
	}
}

func TestSessionStart(t *testing.T) {
	dir := t.TempDir()
	p := transcript(t, dir, 0)
	for _, tc := range []struct {
		agent  Agent
		source string
		inject bool
	}{
		{Claude, "compact", true},
		{Claude, "startup", false},
		{Claude, "resume", false},
		{Codex, "compact", true},
		{Codex, "resume", true},
		{Codex, "startup", false},
	} {
		t.Run(string(tc.agent)+"/"+tc.source, func(t *testing.T) {
			out, code, _ := runHook(t, RunOptions{Agent: tc.agent, Event: "SessionStart", StateDir: dir}, hookInput("SessionStart", claudeOnly(tc.agent, p), tc.source))
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			if !tc.inject {
				if out != "" {
					t.Errorf("source %s: want no output, got %s", tc.source, out)
				}
				return
			}
			var v struct {
				HookSpecificOutput struct {
					HookEventName, AdditionalContext string
				}
			}
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("not JSON: %v: %s", err, out)
			}
			if v.HookSpecificOutput.HookEventName != "SessionStart" || !strings.Contains(v.HookSpecificOutput.AdditionalContext, "SECRET_FACT_PORT=7431") {
				t.Errorf("SessionStart output = %s", out)
			}
		})
	}
}

// claudeOnly: the Codex rows use a Codex rollout; a Claude transcript parsed as Codex has no
// events, so give those rows a minimal rollout with the fact in a tool output.
func claudeOnly(a Agent, claudePath string) string {
	if a == Claude {
		return claudePath
	}
	p := filepath.Join(filepath.Dir(claudePath), "rollout.jsonl")
	lines := []string{
		`{"type":"session_meta","payload":{"id":"sess-1","cwd":"/work"}}`,
		`{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"read the notes"}]}}`,
		`{"type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"cat notes.txt\"}","call_id":"c1"}}`,
		`{"type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"listen_port: 7431 (SECRET_FACT_PORT=7431)\n"}}`,
	}
	os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	return p
}

// TestHookFailuresAnswerNothing: whatever goes wrong, the hook exits 0 with empty stdout, so the
// agent compacts or starts exactly as without compactd; it never exits 2 (which would block).
func TestHookFailuresAnswerNothing(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, event, stdin string }{
		{"not JSON", "PreCompact", "{not json"},
		{"too deep", "PreCompact", strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100)},
		{"over 1 MiB", "PreCompact", `{"x":"` + strings.Repeat("a", 2<<20) + `"}`},
		{"missing transcript", "PreCompact", hookInput("PreCompact", filepath.Join(dir, "nope.jsonl"), "")},
		{"no transcript path", "SessionStart", `{"session_id":"s","source":"compact","transcript_path":null}`},
		{"transcript is a directory", "PreCompact", hookInput("PreCompact", dir, "")},
		{"unknown event", "Stop", hookInput("Stop", "", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code, log := runHook(t, RunOptions{Agent: Claude, Event: tc.event, StateDir: dir}, tc.stdin)
			if code != 0 || out != "" {
				t.Errorf("exit %d, stdout %q; want 0 and nothing", code, out)
			}
			if !strings.Contains(log, "skipped") {
				t.Errorf("log = %q, want the failure reported", log)
			}
		})
	}
}

// blockingReader never returns: a hook whose input (or work) hangs must still answer in time.
type blockingReader struct{ ch chan struct{} }

func (b blockingReader) Read([]byte) (int, error) { <-b.ch; return 0, io.EOF }

func TestHookTimeBound(t *testing.T) {
	r := blockingReader{make(chan struct{})}
	defer close(r.ch)
	var out, log bytes.Buffer
	code := Run(context.Background(), r, &out, RunOptions{Agent: Claude, Event: "PreCompact", Timeout: 50 * time.Millisecond, Log: &log})
	if code != 0 || out.Len() != 0 || !strings.Contains(log.String(), "timed out") {
		t.Errorf("exit %d, stdout %q, log %q; want 0, nothing, a timeout line", code, out.String(), log.String())
	}
}

// TestPreToolUseGuard: between PreCompact and the compacted session's SessionStart, file edits are
// denied (JSON permissionDecision, exit 0); before and after, nothing is said. A stale marker
// (compaction never finished) stops denying after handoverTTL.
func TestPreToolUseGuard(t *testing.T) {
	dir := t.TempDir()
	p := transcript(t, dir, 0)
	now := time.Now()
	o := RunOptions{Agent: Claude, StateDir: dir, Now: func() time.Time { return now }}
	guard := func() string {
		o.Event = "PreToolUse"
		out, code, _ := runHook(t, o, hookInput("PreToolUse", p, ""))
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		return out
	}
	if out := guard(); out != "" {
		t.Fatalf("denied before any handover: %s", out)
	}
	o.Event = "PreCompact"
	runHook(t, o, hookInput("PreCompact", p, ""))
	out := guard()
	var v struct {
		HookSpecificOutput struct{ HookEventName, PermissionDecision, PermissionDecisionReason string }
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.HookSpecificOutput.PermissionDecision != "deny" || v.HookSpecificOutput.HookEventName != "PreToolUse" {
		t.Fatalf("during the handover: %q (%v)", out, err)
	}
	now = now.Add(handoverTTL + time.Minute)
	if out := guard(); out != "" {
		t.Errorf("a stale marker still denies: %s", out)
	}
	now = now.Add(-handoverTTL - time.Minute)
	o.Event = "SessionStart"
	runHook(t, o, hookInput("SessionStart", p, "compact"))
	if out := guard(); out != "" {
		t.Errorf("still denied after the compacted session started: %s", out)
	}
}

func TestBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    string
		max  int
	}{
		{"fits", "short", 100},
		{"ascii", strings.Repeat("abcdefghi\n", 2000), 10000},
		{"astral runes count twice", strings.Repeat("😀", 6000), 10000},
		{"no newline", strings.Repeat("é", 20000), 10000},
	} {
		got := Bound(tc.s, tc.max)
		if utf16Len(got) > tc.max || !utf8.ValidString(got) {
			t.Errorf("%s: %d units, valid %v", tc.name, utf16Len(got), utf8.ValidString(got))
		}
		if utf16Len(tc.s) <= tc.max && got != tc.s {
			t.Errorf("%s: a fitting string was changed", tc.name)
		}
	}
}

// TestTranscriptTailBound: a transcript past MaxTranscriptBytes is read from its tail, so the
// newest facts survive and the read stays bounded.
func TestTranscriptTailBound(t *testing.T) {
	defer func(old int64) { transcriptLimit = old }(transcriptLimit)
	transcriptLimit = 4 << 20
	dir := t.TempDir()
	p := filepath.Join(dir, "big.jsonl")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 1<<20)
	for range transcriptLimit/(1<<20) + 2 {
		fmt.Fprintf(f, `{"type":"user","sessionId":"s","message":{"role":"user","content":"%s"}}`+"\n", pad)
	}
	fmt.Fprintf(f, `{"type":"user","sessionId":"s","message":{"role":"user","content":"use NEWEST_FACT=1 from now on"}}`+"\n")
	f.Close()
	r, err := OpenTranscript(p)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, r)
	r.Close()
	if n > transcriptLimit {
		t.Errorf("read %d bytes, over the %d bound", n, transcriptLimit)
	}
	e, err := Gather(context.Background(), p, Claude, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.Resume.Markdown(), "NEWEST_FACT=1") {
		t.Error("the newest record was lost")
	}
}

// checkerFunc adapts a function to session.GapChecker.
type checkerFunc func(ctx context.Context, category, excerpt string) ([]string, error)

func (f checkerFunc) Check(ctx context.Context, c, e string) ([]string, error) { return f(ctx, c, e) }

// TestPreCompactGapCheck: findings of the gap check lead the PreCompact output; a failing or
// hanging summariser costs only the findings, never the ledger.
func TestPreCompactGapCheck(t *testing.T) {
	dir := t.TempDir()
	p := transcript(t, dir, 0)
	for _, tc := range []struct {
		name    string
		checker checkerFunc
		finding bool
	}{
		{"findings", func(context.Context, string, string) ([]string, error) {
			return []string{"the port is 7431, read from notes.txt"}, nil
		}, true},
		{"summariser fails", func(context.Context, string, string) ([]string, error) {
			return nil, fmt.Errorf("503 from the summariser")
		}, false},
		{"summariser hangs", func(ctx context.Context, _, _ string) ([]string, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			e, err := Gather(ctx, p, Claude, tc.checker)
			if err != nil {
				t.Fatal(err)
			}
			out := e.PreCompactText()
			if got := strings.Contains(out, "the port is 7431, read from notes.txt"); got != tc.finding {
				t.Errorf("finding present = %v, want %v:\n%s", got, tc.finding, out)
			}
			if !strings.Contains(out, "SECRET_FACT_PORT=7431") {
				t.Errorf("the ledger was lost:\n%s", out)
			}
		})
	}
}

// TestHostileTranscript: deeply nested tool inputs and outputs, a huge line and junk lines do not
// crash the hook or reach the ledger's recursive walker unbounded.
func TestHostileTranscript(t *testing.T) {
	dir := t.TempDir()
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	deepObj := strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000)
	lines := []string{
		"not json at all",
		`{"type":"user","sessionId":"s","message":{"role":"user","content":"go"}}`,
		`{"type":"assistant","sessionId":"s","message":{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Grep","input":{"pattern":"x","deep":` + deep + `}}]}}`,
		`{"type":"user","sessionId":"s","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":` + jsonString(deepObj) + `}]}}`,
		`{"type":"user","sessionId":"s","message":{"role":"user","content":"` + strings.Repeat("z", 3<<20) + `"}}`,
		`{"type":"user","sessionId":"s","message":{"role":"user","content":"decided: always use PORT=7431"}}`,
	}
	p := filepath.Join(dir, "hostile.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	// This test is about hostile content, not time: a generous bound keeps a slow run (the race
	// detector, a loaded machine) from hitting the hook's own deadline and answering nothing.
	out, code, _ := runHook(t, RunOptions{Agent: Claude, Event: "PreCompact", StateDir: dir, Timeout: 5 * time.Minute}, hookInput("PreCompact", p, ""))
	if code != 0 || utf16Len(out) > MaxOutputChars {
		t.Fatalf("exit %d, %d units", code, utf16Len(out))
	}
	if !strings.Contains(out, "PORT=7431") {
		t.Errorf("the sane records were lost:\n%s", out)
	}
	// The nested input and output never reach the ledger's gjson walk.
	r, err := OpenTranscript(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := session.ParseSession(r, session.FormatClaude)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range SessionItems(s) {
		if err := jsonx.CheckDepth(it.Raw, 64); err != nil {
			t.Errorf("item handed to the ledger is nested too deeply: %.80s…", it.Raw)
		}
		var v struct{ Arguments, Output string }
		json.Unmarshal(it.Raw, &v)
		for _, inner := range []string{v.Arguments, v.Output} {
			// The ledger parses arguments, and outputs that look like JSON objects.
			if inner == v.Output && !strings.HasPrefix(inner, "{") {
				continue
			}
			if jsonx.CheckDepth([]byte(inner), jsonx.MaxDepth) != nil {
				t.Errorf("a nested string the ledger parses is over the depth bound: %.80s…", inner)
			}
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestCodexResumeInjectsOnce: issue 23, defect 5. Codex 0.171 records a SessionStart hook's
// additionalContext in the rollout as a developer message and replays it on every later resume,
// so injecting the essentials on each resume put two copies in the second resume's request (three
// in the third, as observed with `codex exec resume --last`). A resume whose history already
// carries them, after its last compaction, gets none; a compaction in between (the essentials are
// no longer in the model's context) or a source "compact" gets them again.
func TestCodexResumeInjectsOnce(t *testing.T) {
	const (
		meta      = `{"timestamp":"2026-12-01T23:21:07Z","type":"session_meta","payload":{"id":"sess-1","cwd":"/work"}}`
		user      = `{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"read the notes"}]}}`
		call      = `{"type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"cat notes.txt\"}","call_id":"c1"}}`
		output    = `{"type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"listen_port: 7431 (SECRET_FACT_PORT=7431)\n"}}`
		injected  = `{"type":"response_item","payload":{"type":"message","role":"developer","content":[{"type":"input_text","text":"compactd (SessionStart hook): resume essentials of this session before its compaction, taken from its transcript.\n\n## Facts ledger\n- SECRET_FACT_PORT=7431\n"}]}}`
		quoted    = `{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"compactd (SessionStart hook): pasted by the user"}]}}`
		compacted = `{"type":"compacted","payload":{"message":"summary","replacement_history":[]}}`
		event     = `{"type":"event_msg","payload":{"type":"context_compacted"}}`
		answer    = `{"type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"The port is 7431. Mentions compacted."}]}}`
	)
	base := []string{meta, user, call, output, answer}
	for _, tc := range []struct {
		name   string
		lines  []string
		source string
		inject bool
	}{
		{"first resume", base, "resume", true},
		{"second resume: the history carries them", append(base[:5:5], injected, user, answer), "resume", false},
		{"compacted since the last injection", append(base[:5:5], injected, user, compacted, answer), "resume", true},
		{"context_compacted event since the last injection", append(base[:5:5], injected, event, user), "resume", true},
		{"injected again after a compaction", append(base[:5:5], injected, compacted, injected, user), "resume", false},
		{"the header in a user message is not an injection", append(base[:5:5], quoted), "resume", true},
		{"after Codex's own compaction", append(base[:5:5], injected, compacted), "compact", true},
		{"a half-written last line", append(base[:5:5], injected, `{"type":"compacted","payl`), "resume", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "rollout.jsonl")
			if err := os.WriteFile(p, []byte(strings.Join(tc.lines, "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			out, code, log := runHook(t, RunOptions{Agent: Codex, Event: "SessionStart", StateDir: dir}, hookInput("SessionStart", p, tc.source))
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			if got := strings.Contains(out, "SECRET_FACT_PORT=7431"); got != tc.inject {
				t.Errorf("injected = %v, want %v\nout: %s\nlog: %s", got, tc.inject, out, log)
			}
		})
	}
}
