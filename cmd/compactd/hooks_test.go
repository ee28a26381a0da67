package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHooksCommand drives `compactd hooks install|status|uninstall` the way a user does, for both
// agents and both scopes, and checks which file each one edits.
func TestHooksCommand(t *testing.T) {
	for _, tc := range []struct {
		agent, scope, file string
	}{
		{"claude", "--user", "cfg/settings.json"},
		{"claude", "--project", "proj/.claude/settings.json"},
		{"codex", "--user", "codexhome/hooks.json"},
		{"codex", "--project", "proj/.codex/hooks.json"},
	} {
		t.Run(tc.agent+tc.scope, func(t *testing.T) {
			root := t.TempDir()
			t.Setenv("HOME", root)
			t.Setenv("CLAUDE_CONFIG_DIR", filepath.Join(root, "cfg"))
			t.Setenv("CODEX_HOME", filepath.Join(root, "codexhome"))
			proj := filepath.Join(root, "proj")
			if err := os.MkdirAll(proj, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Chdir(proj)
			exe := "/opt/compactd/bin/compactd"
			for _, args := range [][]string{
				{"install", tc.agent, tc.scope, "--exe", exe},
				{"status", tc.agent, tc.scope},
			} {
				if err := runHooks(args); err != nil {
					t.Fatalf("hooks %v: %v", args, err)
				}
			}
			path := filepath.Join(root, tc.file)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("install did not write %s: %v", tc.file, err)
			}
			if !strings.Contains(string(b), exe+" hooks run "+tc.agent+" SessionStart") {
				t.Errorf("%s lacks the SessionStart hook:\n%s", tc.file, b)
			}
			if err := runHooks([]string{"uninstall", tc.agent, tc.scope}); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(path); strings.Contains(string(b), "hooks run") {
				t.Errorf("uninstall left a hook:\n%s", b)
			}
		})
	}
	for _, bad := range [][]string{
		{"install"},
		{"install", "cursor"},
		{"frobnicate", "claude"},
		{"install", "claude", "--user", "--project"},
	} {
		if err := runHooks(bad); err == nil {
			t.Errorf("hooks %v: no error", bad)
		}
	}
}

// TestHooksInstallSays checks what install tells the user beyond the file it wrote: for Codex's
// project scope, that Codex reads it only in a trusted project; the command that registers
// `compactd mcp` (shell-quoted, scope included), and that --guard is Claude Code's only.
func TestHooksInstallSays(t *testing.T) {
	root := t.TempDir()
	t.Setenv("HOME", root)
	t.Setenv("CLAUDE_CONFIG_DIR", filepath.Join(root, "cfg"))
	t.Setenv("CODEX_HOME", filepath.Join(root, "codexhome"))
	t.Setenv("PATH", t.TempDir()) // no agent CLI: nothing is registered, only offered
	t.Chdir(root)
	exe := "/opt/my tools/compactd"
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"install", "codex", "--project"}, []string{"only once the project is trusted", "codex mcp add compactd -- '/opt/my tools/compactd' mcp", "no project scope"}},
		{[]string{"install", "codex"}, []string{"codex mcp add compactd -- '/opt/my tools/compactd' mcp"}},
		{[]string{"install", "claude", "--project"}, []string{"claude mcp add --scope project compactd -- '/opt/my tools/compactd' mcp"}},
		{[]string{"install", "claude"}, []string{"claude mcp add --scope user compactd", "hooks.log"}},
	} {
		out := captureStdout(t, func() error { return runHooks(append(tc.args, "--exe", exe)) })
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("hooks %v: output lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
	if out := captureStdout(t, func() error { return runHooks([]string{"uninstall", "claude", "--project"}) }); !strings.Contains(out, "claude mcp remove --scope project compactd") {
		t.Errorf("uninstall does not say how to remove the MCP registration:\n%s", out)
	}
	if err := runHooks([]string{"install", "codex", "--guard", "--exe", exe}); err == nil || !strings.Contains(err.Error(), "Claude Code only") {
		t.Errorf("install codex --guard: %v, want a refusal", err)
	}
}
