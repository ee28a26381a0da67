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
