package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestClaudeCodeMCPRecallCurrentSessionEndToEnd: two real Claude Code sessions, each of which read
// a different fact from a file, are compacted through `compactd serve`, which archives each under
// its session id. With `compactd mcp` registered (same archive and keys), the fake model's call of
// the recall tool in each resumed session gets back that session's fact verbatim, and not the
// other's: recall defaults to the current session, which Claude Code tells the MCP server
// (CLAUDE_CODE_SESSION_ID).
func TestClaudeCodeMCPRecallCurrentSessionEndToEnd(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	if testing.Short() {
		t.Skip("runs the real Claude Code")
	}
	rig := newClaudeRig(t)
	claude, fake, key, db, r, e := rig.claude, rig.fake, rig.key, rig.db, rig.r, rig.e
	const otherFact = "OTHER_FACT_PORT=9999"
	if err := os.WriteFile(filepath.Join(e.work, "other.txt"), []byte("listen_port: 9999 ("+otherFact+")\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	idA := e.claudeTurn(t, claude, e.readPrompt())
	e.claudeTurn(t, claude, "--resume", idA, "/compact")
	idB := e.claudeTurn(t, claude, fmt.Sprintf(`Read the other notes [[call:Read {"file_path":%q}]]`, filepath.Join(e.work, "other.txt")))
	e.claudeTurn(t, claude, "--resume", idB, "/compact")
	if !r.logged(`"trigger":"agent"`) {
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

// namespacedCalls puts a loopback proxy in front of the fake upstream that turns the fake
// model's call of "mcp__compactd__TOOL" into the Responses API's namespaced form Codex 0.169.0
// expects for MCP tools (its tools list offers them as a "namespace" tool mcp__compactd holding
// functions; a call names the function and its namespace). The fake only knows flat names.
func namespacedCalls(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		b = regexp.MustCompile(`"name":"mcp__compactd__([a-z_]+)"`).ReplaceAll(b, []byte(`"name":"$1","namespace":"mcp__compactd"`))
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestCodexMCPEndToEnd is done-when (c) for Codex: `compactd hooks install codex --mcp` registers
// `compactd mcp` through `codex mcp add`; in a later session the fake model calls the search
// tool, and the tool output Codex sends back holds the fact an earlier session of this project
// read with a shell command, and not the one a session of another project read.
func TestCodexMCPEndToEnd(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	codex, exe, fake, e := codexE2E(t)
	cfgPath := filepath.Join(e.home, ".codex", "config.toml")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	fakeURL := strings.TrimSuffix(envValue(e.env, "ANTHROPIC_BASE_URL"), "/")
	cfg = bytes.ReplaceAll(cfg, []byte(fakeURL+"/v1"), []byte(namespacedCalls(t, fakeURL)+"/v1"))
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"exec", "--skip-git-repo-check"}
	e.run(t, codex, append(base, `Read the notes [[call:exec_command {"cmd":"cat notes.txt"}]]`)...)
	other := e
	other.work = t.TempDir()
	other.run(t, codex, append(base, `Read the other notes [[call:exec_command {"cmd":"echo listen_port: 9999 OTHER_FACT_PORT=9999"}]]`)...)

	e.env = append(e.env, "PATH="+filepath.Dir(codex)+string(os.PathListSeparator)+os.Getenv("PATH"))
	e.run(t, exe, "hooks", "install", "codex", "--mcp")
	e.run(t, exe, "hooks", "uninstall", "codex") // the MCP server alone

	fake.Reset()
	// codex exec never asks: compactd's tools (read-only) are approved for this run.
	e.run(t, codex, append(base, "-c", `mcp_servers.compactd.default_tools_approval_mode="approve"`,
		`Find the port [[call:mcp__compactd__search_sessions {"query":"listen_port"}]]`)...)
	var output string
	for _, r := range fake.Requests() {
		for _, it := range gjson.GetBytes(r.Body, "input").Array() {
			if it.Get("type").Str == "function_call_output" {
				output = it.Get("output").Raw
			}
		}
	}
	if !strings.Contains(output, agentFact) || strings.Contains(output, "OTHER_FACT_PORT") {
		t.Fatalf("the search tool's output does not carry this project's fact alone:\n%s", output)
	}
}
