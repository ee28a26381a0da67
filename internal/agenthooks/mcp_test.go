package agenthooks

import (
	"path/filepath"
	"testing"
)

// TestMCPRegistration reads the registrations the agents write (the shapes observed with
// Claude Code 2.1.332's .claude.json / .mcp.json and Codex 0.169.0's `codex mcp get --json`), so
// that `hooks install --mcp` can tell "already registered" from "registered elsewhere" and
// "not registered".
func TestMCPRegistration(t *testing.T) {
	dir := t.TempDir()
	claude := func(s string) MCPRegistration {
		p := filepath.Join(dir, "c.json")
		writeFile(t, p, s)
		return ClaudeMCPRegistration(p)
	}
	for _, tc := range []struct {
		name      string
		reg       MCPRegistration
		found, is bool
	}{
		{"claude registered", claude(`{"userID":"x","mcpServers":{"compactd":{"type":"stdio","command":"/opt/compactd","args":["mcp"],"env":{}}}}`), true, true},
		{"claude other path", claude(`{"mcpServers":{"compactd":{"type":"stdio","command":"/old/compactd","args":["mcp"]}}}`), true, false},
		{"claude other args", claude(`{"mcpServers":{"compactd":{"command":"/opt/compactd","args":["mcp","--project","/x"]}}}`), true, false},
		{"claude other server", claude(`{"mcpServers":{"github":{"command":"gh"}}}`), false, false},
		{"claude no file", ClaudeMCPRegistration(filepath.Join(dir, "none.json")), false, false},
		{"claude not JSON", claude(`{mcpServers`), false, false},
		{"codex registered", CodexMCPRegistration([]byte(`{"name":"compactd","enabled":true,"transport":{"type":"stdio","command":"/opt/compactd","args":["mcp"],"env":null}}`)), true, true},
		{"codex other path", CodexMCPRegistration([]byte(`{"name":"compactd","transport":{"type":"stdio","command":"/old/compactd","args":["mcp"]}}`)), true, false},
		{"codex error output", CodexMCPRegistration([]byte("Error: No MCP server named 'compactd' found.")), false, false},
	} {
		if tc.reg.Found != tc.found || tc.reg.Is("/opt/compactd") != tc.is {
			t.Errorf("%s: %+v, want found %v, is %v", tc.name, tc.reg, tc.found, tc.is)
		}
	}
	for _, tc := range []struct {
		scope     Scope
		env, want string
	}{
		{ScopeUser, "", "/home/u/.claude.json"},
		{ScopeUser, "/cfg", "/cfg/.claude.json"},
		{ScopeProject, "/cfg", "/proj/.mcp.json"},
	} {
		got := ClaudeMCPConfig(tc.scope, "/home/u", "/proj", func(k string) string {
			if k == "CLAUDE_CONFIG_DIR" {
				return tc.env
			}
			return ""
		})
		if got != tc.want {
			t.Errorf("ClaudeMCPConfig(%s, %q) = %s, want %s", tc.scope, tc.env, got, tc.want)
		}
	}
}
