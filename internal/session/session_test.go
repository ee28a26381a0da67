package session

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

type fixtureCase struct {
	name   string
	path   string
	format Format
	story  story
}

func fixtureCases() []fixtureCase {
	return []fixtureCase{
		{"codex", codexFixture, FormatCodex, gatewayStory()},
		{"claude", claudeFixture, FormatClaude, exportStory()},
	}
}

func mustParse(t testing.TB, path string, f Format) Session {
	t.Helper()
	s, err := ParseSessionFile(path, f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDetectSessionFormat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Format
	}{
		{"codex meta", `{"timestamp":"t","type":"session_meta","payload":{"id":"x"}}`, FormatCodex},
		{"codex item first", `{"timestamp":"t","type":"response_item","payload":{"type":"message"}}`, FormatCodex},
		{"claude summary first", `{"type":"summary","summary":"x","leafUuid":"u"}`, FormatClaude},
		{"claude user", `{"type":"user","sessionId":"s","message":{"role":"user","content":"hi"}}`, FormatClaude},
		{"claude snapshot then user", "{\"type\":\"file-history-snapshot\",\"messageId\":\"m\"}\n{\"type\":\"user\",\"sessionId\":\"s\",\"message\":{}}", FormatClaude},
		{"garbage then codex", "not json\n{\"type\":\"turn_context\",\"payload\":{}}", FormatCodex},
		{"unknown", `{"type":"other","x":1}`, FormatAuto},
		{"empty", ``, FormatAuto},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines, _, err := readSessionLines(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := DetectSessionFormat(lines); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	for _, fc := range fixtureCases() {
		s := mustParse(t, fc.path, FormatAuto)
		if s.Format != fc.format {
			t.Errorf("%s: detected %q, want %q", fc.path, s.Format, fc.format)
		}
	}
	if _, err := ParseSession(strings.NewReader(`{"a":1}`), FormatAuto); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("unknown input: err = %v, want ErrUnknownFormat", err)
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"": FormatAuto, "auto": FormatAuto, "codex": FormatCodex, "Claude": FormatClaude} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseFormat("gemini"); err == nil {
		t.Error("ParseFormat(gemini) succeeded")
	}
}

// TestReduceFixtures checks the reduction against the stories the fixtures were generated from.
func TestReduceFixtures(t *testing.T) {
	for _, fc := range fixtureCases() {
		t.Run(fc.name, func(t *testing.T) {
			s := mustParse(t, fc.path, FormatAuto)
			if s.ID != fc.story.id || s.CWD != fc.story.cwd {
				t.Errorf("id/cwd = %q/%q, want %q/%q", s.ID, s.CWD, fc.story.id, fc.story.cwd)
			}
			r := Reduce(s)
			want := fc.story.wantUserMessages()
			if len(r.UserMessages) != len(want) {
				t.Fatalf("%d user messages, want %d (tool results or injected context counted?)", len(r.UserMessages), len(want))
			}
			if r.Goal != want[0] {
				t.Errorf("goal = %q, want the first user message", r.Goal)
			}
			if !reflect.DeepEqual(r.FilesModified, fc.story.wantFiles()) {
				t.Errorf("files modified:\n got %q\nwant %q", r.FilesModified, fc.story.wantFiles())
			}
			var lastPlan []PlanStep
			var lastSay, lastCompact string
			for _, st := range fc.story.steps {
				switch st.kind {
				case stPlan:
					lastPlan = st.plan
				case stSay:
					lastSay = st.text
				case stCompact:
					lastCompact = st.text
				}
			}
			if !reflect.DeepEqual(r.Plan, lastPlan) {
				t.Errorf("plan = %v, want %v", r.Plan, lastPlan)
			}
			if r.LastAssistant != lastSay {
				t.Errorf("last assistant = %q, want %q", r.LastAssistant, lastSay)
			}
			if r.EarlierSummary != lastCompact {
				t.Errorf("earlier summary = %q, want %q", r.EarlierSummary, lastCompact)
			}
			if len(r.Failures) == 0 || len(r.Errors) == 0 {
				t.Errorf("no failures/errors recorded: %d/%d", len(r.Failures), len(r.Errors))
			}
			for _, f := range r.Failures {
				if !f.Failed {
					t.Errorf("failure %q not marked failed", f.Command)
				}
			}
		})
	}
}

func TestMarkdownKeepsUserMessagesAndFiles(t *testing.T) {
	for _, fc := range fixtureCases() {
		t.Run(fc.name, func(t *testing.T) {
			md := Reduce(mustParse(t, fc.path, FormatAuto)).Markdown()
			truncated := 0
			for _, m := range fc.story.wantUserMessages() {
				if CountTokens(m) <= DefaultReduceOptions.MessageTokens {
					if !strings.Contains(md, m) {
						t.Errorf("user message missing verbatim: %.80q", m)
					}
					continue
				}
				truncated++
				head, tail := m[:80], m[len(m)-80:]
				if !strings.Contains(md, head) || !strings.Contains(md, tail) {
					t.Errorf("truncated user message lost its head or tail: %.80q", m)
				}
			}
			if fc.name == "codex" && (truncated != 1 || !strings.Contains(md, "tokens elided")) {
				t.Errorf("expected the pasted panic log to be middle-truncated (truncated=%d)", truncated)
			}
			for _, f := range fc.story.wantFiles() {
				if !strings.Contains(md, "`"+f+"`") {
					t.Errorf("modified file %q missing", f)
				}
			}
			for _, section := range []string{"## User messages", "## Files modified", "## Commands run", "## Failures", "## Errors seen", "## Plan", "## Last assistant message", "## Sessions"} {
				if !strings.Contains(md, "\n"+section+"\n") {
					t.Errorf("section %q missing", section)
				}
			}
		})
	}
}

func TestReductionRatio(t *testing.T) {
	for _, fc := range fixtureCases() {
		s := mustParse(t, fc.path, FormatAuto)
		md := Reduce(s).Markdown()
		saved := 1 - float64(len(md))/float64(s.RawBytes)
		t.Logf("%s: %d -> %d bytes (-%.1f%%)", fc.name, s.RawBytes, len(md), 100*saved)
		if saved < 0.95 {
			t.Errorf("%s: reduction %.1f%% < 95%%", fc.name, 100*saved)
		}
	}
}

// TestHeaderByteStable: resumes of different sessions share every byte up to the goal, and the
// same input always renders the same output.
func TestHeaderByteStable(t *testing.T) {
	a := Reduce(mustParse(t, codexFixture, FormatAuto)).Markdown()
	b := Reduce(mustParse(t, claudeFixture, FormatAuto)).Markdown()
	if !strings.HasPrefix(a, ResumeHeader) || !strings.HasPrefix(b, ResumeHeader) {
		t.Fatal("resume does not start with ResumeHeader")
	}
	common := 0
	for common < len(a) && common < len(b) && a[common] == b[common] {
		common++
	}
	if common < len(ResumeHeader) {
		t.Errorf("resumes diverge at byte %d, inside the %d-byte header", common, len(ResumeHeader))
	}
	if again := Reduce(mustParse(t, codexFixture, FormatAuto)).Markdown(); again != a {
		t.Error("two reductions of the same session differ")
	}
	for _, v := range []string{"2026", "bytes", "019a7c1e"} {
		if i := strings.Index(a, v); i >= 0 && i < len(ResumeHeader) {
			t.Errorf("variable content %q inside the header", v)
		}
	}
}

func TestReduceMultipleSessions(t *testing.T) {
	c, cl := mustParse(t, codexFixture, FormatAuto), mustParse(t, claudeFixture, FormatAuto)
	r := Reduce(c, cl)
	if r.Goal != gatewayStory().wantUserMessages()[0] {
		t.Error("goal should come from the first session")
	}
	if n := len(gatewayStory().wantUserMessages()) + len(exportStory().wantUserMessages()); len(r.UserMessages) != n {
		t.Errorf("%d user messages, want %d", len(r.UserMessages), n)
	}
	if len(r.Sessions) != 2 || r.LastAssistant != exportStory().steps[len(exportStory().steps)-1].text {
		t.Error("sessions or last assistant message not taken in order")
	}
}

func TestFencesSurviveBackticks(t *testing.T) {
	r := Resume{Goal: "goal with ```go\ncode\n``` inside", UserMessages: []string{"goal with ```go\ncode\n``` inside"}}
	md := r.Markdown()
	if !strings.Contains(md, "````text\ngoal with ```go\ncode\n``` inside\n````\n") {
		t.Errorf("goal not fenced with a longer fence:\n%s", md[len(ResumeHeader):])
	}
}

func TestRedirectFiles(t *testing.T) {
	tests := []struct {
		cmd  string
		want []string
	}{
		{"go test ./... > out.txt", []string{"out.txt"}},
		{"echo hi >> log/a.log && cat x", []string{"log/a.log"}},
		{"echo hi>x.txt", []string{"x.txt"}},
		{"make 2>&1 | tee build.log", []string{"build.log"}},
		{"make 2> err.log", nil},
		{"go test >/dev/null 2>&1", nil},
		{"echo '>' not a redirect", nil},
		{`echo "a > b" > "my file.txt"`, []string{"my file.txt"}},
		{"cmd | tee -a one.txt two.txt | grep x", []string{"one.txt", "two.txt"}},
		{"cat > docs/x.md <<'EOF'\nline with > arrow\nEOF\necho done > done.txt", []string{"docs/x.md", "done.txt"}},
		{"cat <<EOF > notes.md\n# a > b\nEOF", []string{"notes.md"}},
		{"echo $x > $OUT", nil},
		{"ls -la # > not this", nil},
	}
	for _, tt := range tests {
		if got := redirectFiles(tt.cmd); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("redirectFiles(%q) = %q, want %q", tt.cmd, got, tt.want)
		}
	}
}

func TestCodexOutput(t *testing.T) {
	tests := []struct {
		name     string
		raw      string
		wantText string
		wantExit int
		wantHas  bool
	}{
		{"metadata json", `"{\"output\":\"boom\\n\",\"metadata\":{\"exit_code\":2,\"duration_seconds\":0.1}}"`, "boom\n", 2, true},
		{"exit code header", `"Exit code: 1\nWall time: 0.2 seconds\nOutput:\nFAIL"`, "Exit code: 1\nWall time: 0.2 seconds\nOutput:\nFAIL", 1, true},
		{"unified exec", `"Chunk ID: 1\nWall time: 1 seconds\nProcess exited with code 0\nOutput:\nok"`, "Chunk ID: 1\nWall time: 1 seconds\nProcess exited with code 0\nOutput:\nok", 0, true},
		{"still running", `"Process running with session ID 3\nOutput:\n"`, "Process running with session ID 3\nOutput:\n", 0, false},
		{"content items", `[{"type":"input_text","text":"hello"}]`, "hello", 0, false},
		{"plain", `"Plan updated"`, "Plan updated", 0, false},
	}
	for _, tt := range tests {
		text, exit, has := codexOutput([]byte(tt.raw))
		if text != tt.wantText || exit != tt.wantExit || has != tt.wantHas {
			t.Errorf("%s: got (%q, %d, %v), want (%q, %d, %v)", tt.name, text, exit, has, tt.wantText, tt.wantExit, tt.wantHas)
		}
	}
}

func TestClaudeFiltersNonUserRecords(t *testing.T) {
	log := strings.Join([]string{
		`{"type":"user","sessionId":"s","isMeta":true,"message":{"role":"user","content":"Caveat: injected"}}`,
		`{"type":"user","sessionId":"s","message":{"role":"user","content":"<command-name>/clear</command-name>"}}`,
		`{"type":"user","sessionId":"s","message":{"role":"user","content":[{"type":"text","text":"real question here please"}]}}`,
		`{"type":"assistant","sessionId":"s","message":{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"false"}}]}}`,
		`{"type":"user","sessionId":"s","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"Exit code 1","is_error":true}]}}`,
		`{"type":"user","sessionId":"s","isSidechain":true,"message":{"role":"user","content":"subagent prompt text"}}`,
		`{"type":"user","sessionId":"s","isCompactSummary":true,"message":{"role":"user","content":"summary text"}}`,
		`{"type":"user","sessionId":"s","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user]"}]}}`,
		`{"type":"user","sessionId":"s","message":`, // half-written last line
	}, "\n")
	s, err := ParseSession(strings.NewReader(log), FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	r := Reduce(s)
	if !reflect.DeepEqual(r.UserMessages, []string{"real question here please"}) {
		t.Errorf("user messages = %q", r.UserMessages)
	}
	if len(r.Commands) != 1 || r.Commands[0].ExitCode != 1 || !r.Commands[0].HasExit {
		t.Errorf("commands = %+v", r.Commands)
	}
	if r.EarlierSummary != "summary text" || s.BadLines != 1 {
		t.Errorf("summary %q, bad lines %d", r.EarlierSummary, s.BadLines)
	}
}

func TestTruncateMiddle(t *testing.T) {
	short := "short message"
	if got := truncateMiddle(short, 100); got != short {
		t.Errorf("short message changed: %q", got)
	}
	long := strings.Repeat("alpha beta gamma delta ", 400) + "THE END"
	got := truncateMiddle(long, 50)
	if !strings.HasPrefix(got, "alpha beta") || !strings.HasSuffix(got, "THE END") || !strings.Contains(got, "tokens elided") {
		t.Errorf("bad truncation: %q", got)
	}
	if n := CountTokens(got); n > 50+2 { // the marker counts against the budget; the seams may add a token or two
		t.Errorf("truncated to %d tokens, budget 50", n)
	}
	umlauts := strings.Repeat("Grüße ", 300)
	if got := truncateMiddle(umlauts, 10); !bytes.Equal([]byte(got), []byte(strings.ToValidUTF8(got, "?"))) {
		t.Error("truncation produced invalid UTF-8")
	}
}

func TestFixtureSize(t *testing.T) {
	for _, fc := range fixtureCases() {
		info, err := os.Stat(fc.path)
		if err != nil {
			t.Fatal(err)
		}
		if info.Size() < 200<<10 {
			t.Errorf("%s is only %d bytes; fixtures should look like real, tool-output-heavy sessions", fc.path, info.Size())
		}
	}
}

func BenchmarkParseCodex(b *testing.B)  { benchParse(b, codexFixture) }
func BenchmarkParseClaude(b *testing.B) { benchParse(b, claudeFixture) }

func benchParse(b *testing.B, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseSession(bytes.NewReader(data), FormatAuto); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReduceMarkdown(b *testing.B) {
	s := mustParse(b, codexFixture, FormatAuto)
	CountTokens("warm the codec")
	b.ReportAllocs()
	for b.Loop() {
		_ = Reduce(s).Markdown()
	}
}
