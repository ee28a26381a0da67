package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/handoff"
)

// codexVersion is the Codex CLI release these tests pin (wire-contracts.md §1.7).
const codexVersion = "0.171.0"

// codexBinary finds the real Codex CLI: $COMPACTD_CODEX_BIN, the copy .ci/run installs under
// .cache/codex, or a fresh `npm install` there. Without Node/npm the test is skipped locally;
// under CI it fails, because .ci/run installs them.
func codexBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("COMPACTD_CODEX_BIN"); p != "" {
		return p
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, ".cache", "codex")
	bin := filepath.Join(dir, "node_modules", ".bin", "codex")
	if out, err := exec.Command(bin, "--version").Output(); err == nil && strings.Contains(string(out), codexVersion) {
		return bin
	}
	missing := func(msg string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (CI must run this test: .ci/run installs Node.js and the Codex CLI)", msg)
		}
		t.Skipf("skipping the Codex CLI end-to-end test: %s; install Node.js and npm, or set COMPACTD_CODEX_BIN", msg)
	}
	if _, err := exec.LookPath("npm"); err != nil {
		missing("npm is not installed")
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing("node is not installed")
	}
	cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--prefix", dir, "@openai/codex@"+codexVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		missing(fmt.Sprintf("npm install @openai/codex@%s failed: %v\n%s", codexVersion, err, out))
	}
	return bin
}

// codexEnv is a private CODEX_HOME whose config points Codex at compactd as an OpenAI-named
// provider (remote compaction v2), with a low auto-compaction limit.
func codexEnv(t *testing.T, baseURL string) (home, work string, env []string) {
	t.Helper()
	home, work = t.TempDir(), t.TempDir()
	config := fmt.Sprintf(`model = "gpt-5.4"
model_provider = "compactd"
model_auto_compact_token_limit = 2000

[model_providers.compactd]
name = "OpenAI"
base_url = "%s/v1"
env_key = "COMPACTD_E2E_KEY"
wire_api = "responses"
supports_websockets = false
`, baseURL)
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	env = append(os.Environ(), "CODEX_HOME="+home, "HOME="+home, "COMPACTD_E2E_KEY=sk-e2e-not-a-real-key", "NO_COLOR=1")
	return home, work, env
}

func runCodex(t *testing.T, bin, work string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = work, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("codex %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func TestCodexCLIRemoteCompaction(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real Codex CLI")
	}
	bin := codexBinary(t)
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"pre-turn auto compaction", nil},
		{"post-turn compaction", []string{"-c", "model_post_turn_compact_threshold_percent=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, fakeupstream.Options{}, nil)
			_, work, env := codexEnv(t, h.proxyURL)
			base := append([]string{"exec", "--skip-git-repo-check"}, tc.extra...)
			runCodex(t, bin, work, env, append(base, "hello first turn")...)
			resume := append(append([]string{"exec", "--skip-git-repo-check"}, tc.extra...), "resume", "--last")
			runCodex(t, bin, work, env, append(resume, "second turn")...)
			runCodex(t, bin, work, env, append(resume, "third turn")...)
			assertCodexCompacted(t, h)
		})
	}
}

// assertCodexCompacted checks the fake upstream's request log: a compaction happened, the
// upstream model never saw a trigger, a compaction item or a blob, and the turn after the
// compaction reached it behind the handoff prefix with the summary.
func assertCodexCompacted(t *testing.T, h *harness) {
	t.Helper()
	if len(h.upstream(fakeupstream.KindSummary)) == 0 {
		t.Fatal("no compaction happened: the summariser was never called")
	}
	sawHandoff := false
	for i, r := range h.upstream(dialect.Responses) {
		body := string(r.Body)
		for _, bad := range []string{`"compaction_trigger"`, `"type":"compaction"`, `"compaction_summary"`, `"cmp_`} {
			if strings.Contains(body, bad) {
				t.Errorf("upstream request %d contains %s", i, bad)
			}
		}
		if strings.Contains(body, jsonText(handoff.Prefix)) && strings.Contains(body, fakeupstream.SummaryPrefix) {
			sawHandoff = true
		}
	}
	if !sawHandoff {
		t.Error("no turn after the compaction reached the upstream with the handoff prefix and the summary")
	}
}

// jsonText is s as it appears inside a JSON string (without quotes).
func jsonText(s string) string {
	b := api.AppendString(nil, s)
	return string(b[1 : len(b)-1])
}
