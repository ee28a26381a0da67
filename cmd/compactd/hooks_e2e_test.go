package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
)

// The end-to-end tests of the hooks and of the MCP registration that the done-when
// lists beyond agents_e2e_test.go: the PreToolUse guard, a failing hook, Codex's project scope,
// and `hooks install --mcp` with the real agents' CLIs. Same pinned releases, same isolated
// environment (newAgentEnv), nothing beyond loopback.

// envValue is the last value of key in env (exec.Cmd keeps the last duplicate too).
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// try runs an agent command that may fail, returning its combined output and error.
func (e agentEnv) try(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = e.work, e.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (e agentEnv) hooksLog(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.state, "compactd", "hooks", "hooks.log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// refusingCompaction puts a loopback proxy in front of the fake upstream that, while refuse is
// set, answers Claude Code's compaction request with a 400 (not retried) and forwards the rest:
// a compaction that fails after its PreCompact hook ran, which leaves the handover open.
func refusingCompaction(t *testing.T, e *agentEnv) *atomic.Bool {
	t.Helper()
	target, err := url.Parse(envValue(e.env, "ANTHROPIC_BASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	refuse := new(atomic.Bool)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if refuse.Load() && bytes.Contains(body, []byte("create a detailed summary of the conversation so far")) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"e2e: compaction refused"}}`)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	e.env = append(e.env, "ANTHROPIC_BASE_URL="+srv.URL)
	return refuse
}

// lastToolResult is the content of the last tool_result block the fake upstream received.
func lastToolResult(fake *fakeupstream.Server) string {
	var result string
	for _, b := range messagesBodies(fake) {
		for _, m := range gjson.Get(b, "messages").Array() {
			for _, c := range m.Get("content").Array() {
				if c.Get("type").Str == "tool_result" {
					result = c.Get("content").Raw
				}
			}
		}
	}
	return result
}

// TestClaudeCodeGuardEndToEnd: with `hooks install claude --guard`, a compaction whose PreCompact
// hook ran but which has not completed (here the upstream refuses the summary request) leaves the
// handover open, and real Claude Code's Write is denied by the PreToolUse hook: the file is not
// written and the model reads compactd's reason as the tool result. Once a compaction completes
// (SessionStart source compact), the same Write goes through.
func TestClaudeCodeGuardEndToEnd(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	claude, exe, fake, e := claudeE2E(t)
	refuse := refusingCompaction(t, &e)
	e.run(t, exe, "hooks", "install", "claude", "--guard")
	id := e.claudeTurn(t, claude, e.readPrompt())
	target := filepath.Join(e.work, "out.txt")
	write := fmt.Sprintf(`Write the port down [[call:Write {"file_path":%q,"content":"7431\n"}]]`, target)

	refuse.Store(true)
	if out, err := e.try(claude, "-p", "--resume", id, "/compact"); err == nil && !strings.Contains(out, "refused") {
		t.Logf("the refused /compact did not report an error: %s", out)
	}
	refuse.Store(false)
	if log := e.hooksLog(t); !strings.Contains(log, "claude PreCompact: ok") {
		t.Fatalf("the PreCompact hook did not run before the refused compaction:\n%s", log)
	}

	fake.Reset()
	e.claudeTurn(t, claude, "--resume", id, "--allowedTools=Write", write)
	if _, err := os.Stat(target); err == nil {
		t.Fatal("Write went through while the handover was open")
	}
	if r := lastToolResult(fake); !strings.Contains(r, "compactd: a handover (compaction) is being prepared") {
		t.Fatalf("the model did not get the guard's reason as the tool result: %s", r)
	}
	if log := e.hooksLog(t); !strings.Contains(log, "claude PreToolUse: ok; session "+id+", denied Write") {
		t.Errorf("hooks.log lacks the denial:\n%s", log)
	}

	e.claudeTurn(t, claude, "--resume", id, "/compact")
	e.claudeTurn(t, claude, "--resume", id, "--allowedTools=Write", write)
	if b, err := os.ReadFile(target); err != nil || string(b) != "7431\n" {
		t.Fatalf("after the compaction completed, Write was still blocked: %q, %v\n%s", b, err, e.hooksLog(t))
	}
}

// TestClaudeCodeFailingHookDoesNotBlockCompaction: a compactd hook that fails (here its
// transcript_path is made unreadable on the way in) answers nothing and exits 0, so real Claude
// Code's /compact completes exactly as without compactd, and hooks.log says the hook was skipped.
// The control case, a hook that exits 2, shows that the test would see a blocked compaction.
func TestClaudeCodeFailingHookDoesNotBlockCompaction(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	for _, tc := range []struct {
		name, script string
		compacts     bool
	}{
		{"compactd hook failing", `sed 's#"transcript_path":"#"transcript_path":"/nonexistent#' | exec %s hooks run "$3" "$4"`, true},
		{"control: a hook that exits 2", `cat >/dev/null; echo blocked >&2; exit 2`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claude, exe, fake, e := claudeE2E(t)
			// The wrapper's name starts with compactd: install records it as compactd's own.
			wrapper := filepath.Join(t.TempDir(), "compactd-wrapper")
			script := "#!/bin/sh\n" + strings.ReplaceAll(tc.script, "%s", exe) + "\n"
			if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			e.run(t, exe, "hooks", "install", "claude", "--exe", wrapper)
			id := e.claudeTurn(t, claude, e.readPrompt())
			e.try(claude, "-p", "--resume", id, "/compact")
			e.claudeTurn(t, claude, "--resume", id, "what was the port?")
			bodies := messagesBodies(fake)
			asked, compacted := false, false
			for _, b := range bodies {
				asked = asked || strings.Contains(b, "create a detailed summary of the conversation so far")
				if strings.Contains(b, "compactd (PreCompact hook)") || strings.Contains(b, "compactd (SessionStart hook)") {
					t.Errorf("a failing hook still injected its output")
				}
			}
			if last := bodies[len(bodies)-1]; strings.Contains(last, fakeupstream.ClaudeCodeSummary) {
				compacted = true
			}
			if compacted != tc.compacts {
				t.Fatalf("compaction request sent %v, compacted %v; want compacted %v", asked, compacted, tc.compacts)
			}
			if tc.compacts {
				log := e.hooksLog(t)
				for _, want := range []string{"claude PreCompact: skipped: ", "claude SessionStart: skipped: "} {
					if !strings.Contains(log, want) {
						t.Errorf("hooks.log lacks %q:\n%s", want, log)
					}
				}
			}
		})
	}
}

// codexE2E sets up a real-Codex test against a fresh fake upstream: CODEX_HOME with a provider not
// named "OpenAI" pointing at it.
func codexE2E(t *testing.T) (codex, exe string, fake *fakeupstream.Server, e agentEnv) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the real Codex CLI")
	}
	codex = npmAgent(t, "codex", "@openai/codex", codexE2EVersion, "codex", "COMPACTD_CODEX_BIN")
	exe = builtBinary(t)
	fake, baseURL := startFake(t)
	e = newAgentEnv(t, baseURL)
	codexHome := filepath.Join(e.home, ".codex")
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`model = "gpt-5.4"
model_provider = "fake"

[model_providers.fake]
name = "fake"
base_url = "%s/v1"
env_key = "COMPACTD_E2E_KEY"
wire_api = "responses"
supports_websockets = false
`, baseURL)
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	e.env = append(e.env, "COMPACTD_E2E_KEY=sk-e2e-not-a-real-key")
	return codex, exe, fake, e
}

// TestCodexProjectHooksEndToEnd: `compactd hooks install codex --project` writes the project's
// .codex/hooks.json, which Codex 0.169.0 reads only in a trusted project, as the command says.
// Untrusted, the resumed session gets no SessionStart context; trusted (`codex exec --trust`), it
// gets the one with the fact an earlier turn read.
func TestCodexProjectHooksEndToEnd(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	codex, exe, fake, e := codexE2E(t)
	out := e.run(t, exe, "hooks", "install", "codex", "--project")
	if !strings.Contains(out, filepath.Join(e.work, ".codex", "hooks.json")) || !strings.Contains(out, "trusted") {
		t.Errorf("install --project does not say where it wrote and that Codex needs the project trusted:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(e.home, ".codex", "hooks.json")); err == nil {
		t.Errorf("--project wrote the user's hooks.json:\n%s", b)
	}
	base := []string{"exec", "--skip-git-repo-check", "--dangerously-bypass-hook-trust"}
	e.run(t, codex, append(base, `Read the notes [[call:exec_command {"cmd":"cat notes.txt"}]]`)...)
	hasContext := func() bool {
		for _, r := range fake.Requests() {
			if r.Kind == dialect.Responses && strings.Contains(section(string(r.Body), "compactd (SessionStart hook)", 4000), agentFact) {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		name  string
		flags []string
		want  bool
	}{
		{"untrusted project", nil, false},
		{"trusted project", []string{"--trust"}, true},
	} {
		fake.Reset()
		args := append(append(append([]string{}, base...), tc.flags...), "resume", "--last", "what was the port?")
		e.run(t, codex, args...)
		if got := hasContext(); got != tc.want {
			t.Errorf("%s: SessionStart context with the fact %v, want %v\nhooks.log:\n%s", tc.name, got, tc.want, e.hooksLog(t))
		}
	}
}

// TestHooksInstallRegistersMCPEndToEnd: `compactd hooks install AGENT --mcp` registers `compactd
// mcp` through the agent's own CLI (the real Claude Code and Codex), a second install changes
// nothing and says so, and an install from another binary path replaces the entry rather than
// failing (`claude mcp add` refuses a name it has) or adding a second one.
func TestHooksInstallRegistersMCPEndToEnd(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	if testing.Short() {
		t.Skip("runs the real Claude Code and Codex CLIs")
	}
	claude := npmAgent(t, "claude", "@anthropic-ai/claude-code", claudeCodeVersion, "claude", "COMPACTD_CLAUDE_BIN")
	codex := npmAgent(t, "codex", "@openai/codex", codexE2EVersion, "codex", "COMPACTD_CODEX_BIN")
	exe := builtBinary(t)
	other := filepath.Join(t.TempDir(), "compactd")
	if err := os.Link(exe, other); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		agent, scope string
		registered   func(e agentEnv) string // the registration as the agent keeps it
	}{
		{"claude", "--user", func(e agentEnv) string {
			b, _ := os.ReadFile(filepath.Join(e.home, ".claude", ".claude.json"))
			return gjson.GetBytes(b, "mcpServers.compactd").Raw
		}},
		{"claude", "--project", func(e agentEnv) string {
			b, _ := os.ReadFile(filepath.Join(e.work, ".mcp.json"))
			return gjson.GetBytes(b, "mcpServers.compactd").Raw
		}},
		{"codex", "--user", func(e agentEnv) string {
			b, _ := os.ReadFile(filepath.Join(e.home, ".codex", "config.toml"))
			return string(b)
		}},
	} {
		t.Run(tc.agent+tc.scope, func(t *testing.T) {
			e := newAgentEnv(t, "http://127.0.0.1:9")
			if err := os.MkdirAll(filepath.Join(e.home, ".codex"), 0o700); err != nil {
				t.Fatal(err)
			}
			e.env = append(e.env, "PATH="+filepath.Dir(claude)+string(os.PathListSeparator)+filepath.Dir(codex)+string(os.PathListSeparator)+os.Getenv("PATH"))
			install := func(bin string) string {
				return e.run(t, exe, "hooks", "install", tc.agent, tc.scope, "--mcp", "--exe", bin)
			}
			install(exe)
			first := tc.registered(e)
			if !strings.Contains(first, `"`+exe+`"`) || !strings.Contains(first, `"mcp"`) {
				t.Fatalf("not registered as %s mcp: %s", exe, first)
			}
			if out := install(exe); !strings.Contains(out, "already registered") {
				t.Errorf("second install did not say it was already registered:\n%s", out)
			}
			if again := tc.registered(e); again != first {
				t.Errorf("second install changed the registration:\n%s\n%s", first, again)
			}
			install(other)
			moved := tc.registered(e)
			if !strings.Contains(moved, `"`+other+`"`) || strings.Contains(moved, `"`+exe+`"`) || strings.Count(moved, "compactd]") > 1 {
				t.Errorf("install from another path did not replace the entry: %s", moved)
			}
		})
	}
}

// gapCheckModel is a loopback Responses API summariser for the PreCompact gap check: it answers
// each category's excerpt with one finding quoting the fact when the excerpt holds it, else
// "- none", so a finding that reaches Claude Code proves the gap check read the transcript.
func gapCheckModel(t *testing.T) (url string, calls *atomic.Int32) {
	t.Helper()
	calls = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.HasSuffix(r.URL.Path, "/responses") {
			http.NotFound(w, r)
			return
		}
		calls.Add(1)
		finding := "- none"
		if strings.Contains(gjson.GetBytes(body, "input").Str, agentFact) {
			finding = "- GAPCHECK-FINDING: the port " + agentFact + " was read from notes.txt"
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"resp_gap","object":"response","created_at":0,"status":"completed","model":"gap-model","output":[{"type":"message","id":"msg_gap","role":"assistant","status":"completed","content":[{"type":"output_text","text":%q,"annotations":[]}]}],"usage":{"input_tokens":10,"output_tokens":10,"total_tokens":20}}`, finding)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1", calls
}

// TestClaudeCodeHooksGapCheckEndToEnd is done-when (b) with the gap check on: with a summariser
// configured for the hooks (COMPACTD_SUMMARIZER_URL/_MODEL), the PreCompact hook's gap-check
// findings, quoting the fact that lives only in a file the agent read, are in real Claude Code's
// compaction instructions, ahead of the ledger.
func TestClaudeCodeHooksGapCheckEndToEnd(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	claude, exe, fake, e := claudeE2E(t)
	gapURL, calls := gapCheckModel(t)
	e.env = append(e.env, "COMPACTD_SUMMARIZER_URL="+gapURL, "COMPACTD_SUMMARIZER_MODEL=gap-model", "COMPACTD_SUMMARIZER_KEY=sk-gap-not-a-real-key")
	e.run(t, exe, "hooks", "install", "claude")
	id := e.claudeTurn(t, claude, e.readPrompt())
	e.claudeTurn(t, claude, "--resume", id, "/compact")
	var instr string
	for _, b := range messagesBodies(fake) {
		if strings.Contains(b, "create a detailed summary of the conversation so far") {
			msgs := gjson.Get(b, "messages").Array()
			instr = msgs[len(msgs)-1].Get("content").Raw
		}
	}
	pre := section(instr, "compactd (PreCompact hook)", 10000)
	if pre == "" {
		t.Fatalf("no compaction request with the PreCompact output (%d gap-check calls)", calls.Load())
	}
	findings := strings.Index(pre, "Gap check findings")
	finding := strings.Index(pre, "GAPCHECK-FINDING: the port "+agentFact)
	ledger := strings.Index(pre, "Facts ledger")
	if findings < 0 || finding < 0 || ledger < 0 || finding > ledger {
		t.Fatalf("the compaction instructions lack the gap check's finding ahead of the ledger (%d calls):\n%s", calls.Load(), pre)
	}
	if log := e.hooksLog(t); !strings.Contains(log, "gap findings") {
		t.Errorf("hooks.log does not report the gap check:\n%s", log)
	}
}
