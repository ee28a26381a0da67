package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
)

// claudeCodeVersion is the Claude Code release the hook and MCP end-to-end tests pin; .ci/run
// installs exactly this one.
const claudeCodeVersion = "2.1.337"

// codexE2EVersion is the pinned Codex CLI (as in proxy/codex_e2e_test.go).
const codexE2EVersion = "0.171.0"

// agentFact lives only in a file the agent reads: it reaches the conversation as a tool output.
const (
	agentFactLine = "listen_port: 7431 (SECRET_FACT_PORT=7431)"
	agentFact     = "SECRET_FACT_PORT=7431"
)

// npmAgent finds or installs an npm-packaged agent CLI under .cache/<dir>. Without Node/npm the
// test is skipped locally; under CI it fails, because .ci/run installs them.
var npmMu sync.Mutex

func npmAgent(t *testing.T, dir, pkg, version, bin, env string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(root, ".cache", dir)
	path := filepath.Join(prefix, "node_modules", ".bin", bin)
	if out, err := exec.Command(path, "--version").Output(); err == nil && strings.Contains(string(out), version) {
		return path
	}
	missing := func(msg string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (CI must run this test: .ci/run installs Node.js and %s)", msg, pkg)
		}
		t.Skipf("skipping the %s end-to-end test: %s; install Node.js and npm, or set %s", pkg, msg, env)
	}
	for _, tool := range []string{"npm", "node"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(tool + " is not installed")
		}
	}
	// The end-to-end tests run in parallel: one npm install into a prefix at a time.
	npmMu.Lock()
	defer npmMu.Unlock()
	if out, err := exec.Command(path, "--version").Output(); err == nil && strings.Contains(string(out), version) {
		return path // installed by another test while this one waited
	}
	cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--prefix", prefix, pkg+"@"+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		missing(fmt.Sprintf("npm install %s@%s failed: %v\n%s", pkg, version, err, out))
	}
	return path
}

// buildCompactd is the compactd binary the hooks and `claude mcp add` run as a separate
// process, exactly as a user's agent would: builtBinary's, built once per test run.
func buildCompactd(t *testing.T) string { return builtBinary(t) }

// agentEnv is a private HOME for one agent run, with the network traffic that is not the model
// turned off. ANTHROPIC_BASE_URL points Claude Code straight at the fake upstream (no proxy).
type agentEnv struct {
	home, work, state string
	env               []string
}

func newAgentEnv(t *testing.T, baseURL string) agentEnv {
	t.Helper()
	home, work := t.TempDir(), t.TempDir()
	e := agentEnv{home: home, work: work, state: filepath.Join(home, "state")}
	e.env = append(os.Environ(),
		"HOME="+home, "CLAUDE_CONFIG_DIR="+filepath.Join(home, ".claude"), "XDG_STATE_HOME="+e.state,
		"XDG_DATA_HOME="+filepath.Join(home, "data"), "XDG_CONFIG_HOME="+filepath.Join(home, "config"),
		"ANTHROPIC_BASE_URL="+baseURL, "ANTHROPIC_API_KEY=sk-ant-e2e-not-a-real-key",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1", "NO_COLOR=1",
		// Anything but the loopback fake goes to a closed loopback port: nothing reaches the
		// internet even if a release starts a request the switches above do not cover.
		"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "https_proxy=http://127.0.0.1:9",
		"http_proxy=http://127.0.0.1:9", "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost", "COMPACTD_SUMMARIZER_MODEL=", "CODEX_HOME="+filepath.Join(home, ".codex"),
	)
	if err := os.WriteFile(filepath.Join(work, "notes.txt"), []byte(agentFactLine+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e agentEnv) run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = e.work, e.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout: %s\nstderr: %s", filepath.Base(bin), strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// claudeTurn runs `claude -p` and returns its session id.
func (e agentEnv) claudeTurn(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out := e.run(t, bin, append([]string{"-p", "--output-format", "json"}, args...)...)
	id := gjson.Get(out, "session_id").Str
	if id == "" || gjson.Get(out, "is_error").Bool() {
		t.Fatalf("claude %s: %s", strings.Join(args, " "), out)
	}
	return id
}

// readPrompt makes the fake model Read the notes file (fakeupstream's [[call:…]] directive).
func (e agentEnv) readPrompt() string {
	return fmt.Sprintf(`Read the notes [[call:Read {"file_path":%q}]]`, filepath.Join(e.work, "notes.txt"))
}

// messagesBodies are the Messages API request bodies the fake upstream received, in order.
func messagesBodies(fake *fakeupstream.Server) []string {
	var out []string
	for _, r := range fake.Requests() {
		if r.Kind == dialect.Messages {
			out = append(out, string(r.Body))
		}
	}
	return out
}

// section returns what follows marker in s (up to n bytes), or "" without the marker.
func section(s, marker string, n int) string {
	i := strings.Index(s, marker)
	if i < 0 {
		return ""
	}
	s = s[i:]
	return s[:min(len(s), n)]
}

// claudeE2E sets up a real-Claude-Code test: the pinned Claude Code, a compactd binary, the fake
// upstream (stopped at cleanup) and an isolated agent environment pointed at it. It skips in
// -short mode.
func claudeE2E(t *testing.T) (claude, exe string, fake *fakeupstream.Server, e agentEnv) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the real Claude Code")
	}
	claude = npmAgent(t, "claude", "@anthropic-ai/claude-code", claudeCodeVersion, "claude", "COMPACTD_CLAUDE_BIN")
	exe = buildCompactd(t)
	fake, baseURL := startFake(t)
	return claude, exe, fake, newAgentEnv(t, baseURL)
}

// TestClaudeCodeHooksEndToEnd is the hooks-only way: Claude Code talks straight to the fake
// upstream, `compactd hooks install claude` is the only connection to compactd. The fact lives
// only in a file the agent Read. After /compact, the compaction request's instructions carry the
// PreCompact hook's ledger with the fact, and the first request after the compaction carries the
// SessionStart hook's context with the fact.
func TestClaudeCodeHooksEndToEnd(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	claude, exe, fake, e := claudeE2E(t)
	e.run(t, exe, "hooks", "install", "claude")
	if out := e.run(t, exe, "hooks", "install", "claude"); !strings.Contains(out, "already installed") {
		t.Errorf("second install was not a no-op: %s", out)
	}

	id := e.claudeTurn(t, claude, e.readPrompt())
	e.claudeTurn(t, claude, "--resume", id, "/compact")
	e.claudeTurn(t, claude, "--resume", id, "what was the port?")

	bodies := messagesBodies(fake)
	compaction := -1
	for i, b := range bodies {
		if strings.Contains(b, "create a detailed summary of the conversation so far") {
			compaction = i
			break
		}
	}
	if compaction < 0 {
		t.Fatalf("no compaction request among %d Messages requests", len(bodies))
	}
	// The instructions are the last user message of the compaction request.
	msgs := gjson.Get(bodies[compaction], "messages").Array()
	instr := msgs[len(msgs)-1].Get("content").Raw
	pre := section(instr, "compactd (PreCompact hook)", 4000)
	if pre == "" {
		t.Fatalf("the compaction instructions do not contain the PreCompact hook's output:\n%s", instr[max(0, len(instr)-2000):])
	}
	if !strings.Contains(pre, "Facts ledger") || !strings.Contains(pre, agentFact) {
		t.Errorf("the PreCompact output in the compaction instructions lacks the ledger fact %q:\n%s", agentFact, pre)
	}
	after := ""
	for _, b := range bodies[compaction+1:] {
		if strings.Contains(b, fakeupstream.ClaudeCodeSummary) {
			after = b
		}
	}
	if after == "" {
		t.Fatal("no request after the compaction carries the compaction summary")
	}
	ctx := section(after, "compactd (SessionStart hook)", 4000)
	if ctx == "" {
		t.Fatal("the post-compaction request does not contain the SessionStart hook's context")
	}
	if !strings.Contains(ctx, agentFact) {
		t.Errorf("the SessionStart context lacks the fact %q:\n%s", agentFact, ctx)
	}
	// The operator can see that the hooks ran.
	log, err := os.ReadFile(filepath.Join(e.state, "compactd", "hooks", "hooks.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"claude PreCompact: ok", "claude SessionStart: ok"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("hooks.log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(string(log), agentFact) {
		t.Error("hooks.log contains session content")
	}
}

// TestClaudeCodeMCPEndToEnd registers `compactd mcp` with `claude mcp add`; in a later session the
// fake model calls the search tool, and the tool result that reaches the model holds the fact an
// earlier session read from a file.
func TestClaudeCodeMCPEndToEnd(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	claude, exe, fake, e := claudeE2E(t)
	e.claudeTurn(t, claude, e.readPrompt())
	e.run(t, claude, "mcp", "add", "compactd", "--", exe, "mcp")

	fake.Reset()
	e.claudeTurn(t, claude, "--allowedTools=mcp__compactd__search_sessions",
		`Find the port [[call:mcp__compactd__search_sessions {"query":"SECRET_FACT_PORT"}]]`)
	bodies := messagesBodies(fake)
	if len(bodies) < 2 {
		t.Fatalf("want a tool call and a follow-up, got %d Messages requests", len(bodies))
	}
	var result string
	for _, m := range gjson.Get(bodies[len(bodies)-1], "messages").Array() {
		for _, b := range m.Get("content").Array() {
			if b.Get("type").Str == "tool_result" {
				result = b.Get("content").Raw
			}
		}
	}
	if strings.Contains(result, "No such tool") || !strings.Contains(result, "7431") {
		t.Fatalf("the search tool's result does not carry the fact:\n%s", result)
	}
}

// TestCodexSessionStartHookEndToEnd: Codex's hooks can only inject at SessionStart. After
// `compactd hooks install codex`, the fact an earlier turn read with a shell command comes back in
// the SessionStart context: when the session resumes (`codex exec resume`), and right after
// Codex's own compaction (a non-OpenAI provider compacts locally, with SessionStart source
// "compact").
func TestCodexSessionStartHookEndToEnd(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	if testing.Short() {
		t.Skip("runs the real Codex CLI")
	}
	codex := npmAgent(t, "codex", "@openai/codex", codexE2EVersion, "codex", "COMPACTD_CODEX_BIN")
	exe := buildCompactd(t)
	for _, tc := range []struct {
		name, extraConfig string
	}{
		{"resume", ""},
		{"after compaction", "model_auto_compact_token_limit = 2000\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := fakeupstream.New(fakeupstream.Options{})
			fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
			baseURL, stop, err := fake.Start()
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			e := newAgentEnv(t, baseURL)
			codexHome := filepath.Join(e.home, ".codex")
			if err := os.MkdirAll(codexHome, 0o700); err != nil {
				t.Fatal(err)
			}
			config := fmt.Sprintf(`model = "gpt-5.4"
model_provider = "fake"
%s
[model_providers.fake]
name = "fake"
base_url = "%s/v1"
env_key = "COMPACTD_E2E_KEY"
wire_api = "responses"
supports_websockets = false
`, tc.extraConfig, baseURL)
			if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o600); err != nil {
				t.Fatal(err)
			}
			e.env = append(e.env, "COMPACTD_E2E_KEY=sk-e2e-not-a-real-key")
			e.run(t, exe, "hooks", "install", "codex")

			base := []string{"exec", "--skip-git-repo-check", "--dangerously-bypass-hook-trust"}
			e.run(t, codex, append(base, `Read the notes [[call:exec_command {"cmd":"cat notes.txt"}]]`)...)
			var bodies []string
			if tc.extraConfig == "" {
				// Resumed twice: each resume's requests carry the essentials exactly once (issue
				// 23, defect 5: Codex replays the first resume's injection on the second, which
				// injected again beside it).
				for i, q := range []string{"what was the port?", "and again?"} {
					fake.Reset()
					e.run(t, codex, append(base, "resume", "--last", q)...)
					for _, r := range fake.Requests() {
						if n := strings.Count(string(r.Body), "compactd (SessionStart hook)"); r.Kind == dialect.Responses && n != 1 {
							t.Errorf("resume %d: a request carries the SessionStart essentials %d times, want once", i+1, n)
						}
					}
				}
			}
			for _, r := range fake.Requests() {
				if r.Kind == dialect.Responses {
					bodies = append(bodies, string(r.Body))
				}
			}
			if tc.extraConfig != "" {
				// Look only at the request right after Codex's first compaction request.
				k := -1
				for i, b := range bodies {
					if strings.Contains(b, "CONTEXT CHECKPOINT COMPACTION") {
						k = i
						break
					}
				}
				if k < 0 || k+1 >= len(bodies) {
					t.Fatalf("Codex did not compact (or nothing followed): %d requests", len(bodies))
				}
				if strings.Contains(bodies[k], "compactd (SessionStart hook)") {
					t.Fatal("the context was there before the compaction: the test cannot tell")
				}
				bodies = bodies[k+1 : k+2]
			}
			found := false
			for _, b := range bodies {
				if ctx := section(b, "compactd (SessionStart hook)", 4000); strings.Contains(ctx, agentFact) {
					found = true
				}
			}
			log, _ := os.ReadFile(filepath.Join(e.state, "compactd", "hooks", "hooks.log"))
			t.Logf("hooks.log:\n%s", log)
			if !found {
				t.Fatalf("the request does not carry the SessionStart context with %q", agentFact)
			}
		})
	}
}

// claudeRig is the real Claude Code pointed at a `compactd serve` process (SQLite archive, one
// fresh key) in front of the fake upstream, which serves both APIs.
type claudeRig struct {
	claude string // the Claude Code binary
	fake   *fakeupstream.Server
	key    crypto.Key
	db     string // the archive
	r      *replica
	e      agentEnv
}

// newClaudeRig starts the fake upstream and compactd (extra: more serve flags) and prepares
// Claude Code's environment; everything stops when the test ends.
func newClaudeRig(t *testing.T, extra ...string) *claudeRig {
	t.Helper()
	c := &claudeRig{claude: npmAgent(t, "claude", "@anthropic-ai/claude-code", claudeCodeVersion, "claude", "COMPACTD_CLAUDE_BIN")}
	var baseURL string
	c.fake, baseURL = startFake(t)
	var err error
	if c.key, err = crypto.GenerateKey(); err != nil {
		t.Fatal(err)
	}
	c.db = filepath.Join(t.TempDir(), "archive.db")
	c.r = startReplica(t, "compactd", baseURL, c.key.String(), append([]string{"--anthropic-upstream", baseURL, "--archive", c.db}, extra...)...)
	c.e = newAgentEnv(t, "http://"+c.r.addr)
	return c
}

// startFake starts a fake upstream with the default options for one test (stopped at cleanup)
// and returns it with its base URL.
func startFake(t *testing.T) (*fakeupstream.Server, string) {
	t.Helper()
	fake := fakeupstream.New(fakeupstream.Options{})
	fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	baseURL, stop, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return fake, baseURL
}
