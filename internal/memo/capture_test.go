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
		if r.Kind != fakeupstream.KindMessages {
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
