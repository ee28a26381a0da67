package memo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
)

// claudeCaptureDir holds what the real Claude Code 2.1.332 sent to the fake upstream over a
// four-turn session (-p, then three --resume turns, two of them with tool calls).
const claudeCaptureDir = "testdata/claude-code-2.1.332"

// TestCaptureClaudeCode re-records claudeCaptureDir. It runs only when COMPACTD_MEMO_CAPTURE=1
// and COMPACTD_CLAUDE_BIN points at the pinned Claude Code; the captures are committed, so the
// canonicalisation tests never need Node. Everything goes to the loopback fake upstream.
func TestCaptureClaudeCode(t *testing.T) {
	if os.Getenv("COMPACTD_MEMO_CAPTURE") != "1" {
		t.Skip("set COMPACTD_MEMO_CAPTURE=1 and COMPACTD_CLAUDE_BIN to re-record the Claude Code captures")
	}
	bin := os.Getenv("COMPACTD_CLAUDE_BIN")
	if bin == "" {
		t.Fatal("COMPACTD_CLAUDE_BIN is not set")
	}
	fake := fakeupstream.New(fakeupstream.Options{})
	fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	baseURL, stop, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	home, work := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "notes.txt"), []byte("listen_port: 7431\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "todo.txt"), []byte("1. rotate the keys\n2. ship the memo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(),
		"HOME="+home, "CLAUDE_CONFIG_DIR="+filepath.Join(home, ".claude"),
		"XDG_STATE_HOME="+filepath.Join(home, "state"), "XDG_DATA_HOME="+filepath.Join(home, "data"),
		"XDG_CONFIG_HOME="+filepath.Join(home, "config"),
		"ANTHROPIC_BASE_URL="+baseURL, "ANTHROPIC_API_KEY=sk-ant-capture-not-a-real-key",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1", "NO_COLOR=1",
		"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "https_proxy=http://127.0.0.1:9",
		"http_proxy=http://127.0.0.1:9", "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
	)
	turn := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"-p", "--output-format", "json"}, args...)...)
		cmd.Dir, cmd.Env = work, env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("claude %v: %v\n%s\n%s", args, err, out.String(), errb.String())
		}
		var res struct {
			SessionID string `json:"session_id"`
			IsError   bool   `json:"is_error"`
		}
		if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.SessionID == "" || res.IsError {
			t.Fatalf("claude %v: %s", args, out.String())
		}
		return res.SessionID
	}
	read := func(name string) string {
		return fmt.Sprintf(`[[call:Read {"file_path":%q}]]`, filepath.Join(work, name))
	}
	id := turn("Read the notes " + read("notes.txt"))
	turn("--resume", id, "what was the port?")
	turn("--resume", id, "Now read the todo list "+read("todo.txt"))
	turn("--resume", id, "thanks, that is all")

	if err := os.RemoveAll(claudeCaptureDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(claudeCaptureDir, 0o755); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range fake.Requests() {
		if r.Kind != dialect.Messages {
			continue
		}
		// The temporary directories differ per run; a fixed placeholder keeps re-recordings
		// comparable (the paths contain no JSON-special characters).
		body := strings.ReplaceAll(string(r.Body), work, "/capture/work")
		body = strings.ReplaceAll(body, home, "/capture/home")
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("request %d is not JSON after path substitution: %v", n, err)
		}
		n++
		name := filepath.Join(claudeCaptureDir, fmt.Sprintf("%02d_messages.json", n))
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d Messages request bodies to %s", n, claudeCaptureDir)
}

// codexCaptureDir holds what the real Codex CLI 0.169.0 sent over a four-turn session
// (`codex exec`, then three `exec resume --last` turns, one with a tool call).
const codexCaptureDir = "testdata/codex-0.169.0"

// TestCaptureCodex re-records codexCaptureDir; like TestCaptureClaudeCode it runs only when
// COMPACTD_MEMO_CAPTURE=1, with COMPACTD_CODEX_BIN pointing at the pinned Codex CLI.
func TestCaptureCodex(t *testing.T) {
	if os.Getenv("COMPACTD_MEMO_CAPTURE") != "1" {
		t.Skip("set COMPACTD_MEMO_CAPTURE=1 and COMPACTD_CODEX_BIN to re-record the Codex captures")
	}
	bin := os.Getenv("COMPACTD_CODEX_BIN")
	if bin == "" {
		t.Fatal("COMPACTD_CODEX_BIN is not set")
	}
	fake := fakeupstream.New(fakeupstream.Options{})
	fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	baseURL, stop, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	home, work := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "notes.txt"), []byte("listen_port: 7431\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A high auto-compact limit: this capture is about how Codex resends history, not about
	// its compaction (internal/fixtures has those requests).
	config := fmt.Sprintf(`model = "gpt-5.4"
model_provider = "capture"
model_auto_compact_token_limit = 10000000

[model_providers.capture]
name = "OpenAI"
base_url = "%s/v1"
env_key = "COMPACTD_CAPTURE_KEY"
wire_api = "responses"
supports_websockets = false
`, baseURL)
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "CODEX_HOME="+home, "HOME="+home, "COMPACTD_CAPTURE_KEY=sk-capture-not-a-real-key", "NO_COLOR=1",
		"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "https_proxy=http://127.0.0.1:9",
		"http_proxy=http://127.0.0.1:9", "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
	run := func(args ...string) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir, cmd.Env = work, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("codex %v: %v\n%s", args, err, out.String())
		}
	}
	resume := []string{"exec", "--skip-git-repo-check", "resume", "--last"}
	run("exec", "--skip-git-repo-check", "hello first turn")
	run(append(resume, `show the notes [[call:exec_command {"cmd":"cat notes.txt"}]]`)...)
	run(append(resume, "what was the port?")...)
	run(append(resume, "thanks, that is all")...)

	if err := os.RemoveAll(codexCaptureDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(codexCaptureDir, 0o755); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range fake.Requests() {
		if r.Kind != dialect.Responses {
			continue
		}
		body := strings.ReplaceAll(string(r.Body), work, "/capture/work")
		body = strings.ReplaceAll(body, home, "/capture/home")
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("request %d is not JSON after path substitution: %v", n, err)
		}
		n++
		name := filepath.Join(codexCaptureDir, fmt.Sprintf("%02d_responses.json", n))
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d Responses request bodies to %s", n, codexCaptureDir)
}
