package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/fakeupstream"
)

// TestClaudeCodeMCPRecallCurrentSessionEndToEnd: two real Claude Code sessions, each of which read
// a different fact from a file, are compacted through `compactd serve`, which archives each under
// its session id. With `compactd mcp` registered (same archive and keys), the fake model's call of
// the recall tool in each resumed session gets back that session's fact verbatim, and not the
// other's: recall defaults to the current session, which Claude Code tells the MCP server
// (CLAUDE_CODE_SESSION_ID).
func TestClaudeCodeMCPRecallCurrentSessionEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real Claude Code")
	}
	claude := npmAgent(t, "claude", "@anthropic-ai/claude-code", claudeCodeVersion, "claude", "COMPACTD_CLAUDE_BIN")
	fake := fakeupstream.New(fakeupstream.Options{})
	baseURL, stop, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "archive.db")
	r := startReplica(t, "compactd", baseURL, key.String(), "--anthropic-upstream", baseURL, "--archive", db)
	e := newAgentEnv(t, "http://"+r.addr)
	const otherFact = "OTHER_FACT_PORT=9999"
	if err := os.WriteFile(filepath.Join(e.work, "other.txt"), []byte("listen_port: 9999 ("+otherFact+")\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	idA := e.claudeTurn(t, claude, e.readPrompt())
	e.claudeTurn(t, claude, "--resume", idA, "/compact")
	idB := e.claudeTurn(t, claude, fmt.Sprintf(`Read the other notes [[call:Read {"file_path":%q}]]`, filepath.Join(e.work, "other.txt")))
	e.claudeTurn(t, claude, "--resume", idB, "/compact")
	if !strings.Contains(r.log.String(), `"trigger":"agent"`) {
		t.Fatalf("compactd did not answer the compactions:\n%s", r.log)
	}

	e.run(t, claude, "mcp", "add", "compactd", "-e", "COMPACTD_KEYS="+key.String(), "--", builtBinary(t), "mcp", "--archive", db)
	for _, tc := range []struct {
		id, want, other string
	}{
		{idA, agentFact, otherFact},
		{idB, otherFact, agentFact},
	} {
		fake.Reset()
		e.claudeTurn(t, claude, "--resume", tc.id, "--allowedTools=mcp__compactd__recall",
			`What was the port? [[call:mcp__compactd__recall {"query":"listen_port"}]]`)
		result := lastToolResult(fake)
		if !strings.Contains(result, tc.want) || strings.Contains(result, tc.other) {
			t.Errorf("session %s: recall returned %s; want %q and not %q", tc.id, result, tc.want, tc.other)
		}
	}
}
