package proxy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
)

// TestCodexCLILocalCompactionUpgraded runs the real Codex with a provider not named "OpenAI", so
// it compacts locally, through compactd: compactd answers the compaction turn, the upstream
// model never sees Codex's compaction prompt, and the next turn carries compactd's summary
// behind Codex's own prefix.
func TestCodexCLILocalCompactionUpgraded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real Codex CLI")
	}
	bin := codexBinary(t)
	h := newHarness(t, fakeupstream.Options{}, nil)
	home, work, env := codexEnv(t, h.proxyURL)
	cfg, err := os.ReadFile(filepath.Join(home, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	local := strings.Replace(string(cfg), `name = "OpenAI"`, `name = "compactd-local"`, 1)
	if local == string(cfg) {
		t.Fatal("codexEnv's provider name changed; update this test")
	}
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(local), 0o600); err != nil {
		t.Fatal(err)
	}
	runCodex(t, bin, work, env, "exec", "--skip-git-repo-check", "hello first turn")
	resume := []string{"exec", "--skip-git-repo-check", "resume", "--last"}
	runCodex(t, bin, work, env, append(resume, "second turn")...)
	runCodex(t, bin, work, env, append(resume, "third turn")...)

	if len(h.upstream(fakeupstream.KindSummary)) == 0 {
		t.Fatal("compactd's summariser was never called")
	}
	after := false
	for i, r := range h.upstream(dialect.Responses) {
		body := string(r.Body)
		if strings.Contains(body, "CONTEXT CHECKPOINT COMPACTION") {
			t.Fatalf("upstream request %d carries Codex's compaction prompt: compactd did not answer it", i)
		}
		if strings.Contains(body, "Another language model started") && strings.Contains(body, fakeupstream.SummaryPrefix) {
			after = true
		}
	}
	if !after {
		t.Errorf("no turn after the compaction carries compactd's summary (%d Responses requests)", len(h.upstream(dialect.Responses)))
	}
}
