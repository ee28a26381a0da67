package main

import "testing"

// TestMCPDefaults: the project and the recall conversation come from the flags, else from what
// Claude Code gives the MCP servers it starts (CLAUDE_PROJECT_DIR, CLAUDE_CODE_SESSION_ID), else
// the working directory and the whole archive.
func TestMCPDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, project, conv string
		env                 map[string]string
		wantProj, wantConv  string
	}{
		{"nothing set", "", "", nil, "/wd", ""},
		{"from Claude Code", "", "", map[string]string{"CLAUDE_PROJECT_DIR": "/proj", "CLAUDE_CODE_SESSION_ID": "fc140c96-4ad4"}, "/proj", "fc140c96-4ad4"},
		{"flags win", "/flagproj", "conv-1", map[string]string{"CLAUDE_PROJECT_DIR": "/proj", "CLAUDE_CODE_SESSION_ID": "s"}, "/flagproj", "conv-1"},
		{"relative flag", "sub/../x", "", nil, "/wd/x", ""},
		{"relative env ignored", "", "", map[string]string{"CLAUDE_PROJECT_DIR": "rel"}, "/wd", ""},
		{"unusable session id", "", "", map[string]string{"CLAUDE_CODE_SESSION_ID": "a b\n"}, "/wd", ""},
	} {
		p, c := mcpDefaults(tc.project, tc.conv, "/wd", func(k string) string { return tc.env[k] })
		if p != tc.wantProj || c != tc.wantConv {
			t.Errorf("%s: got (%q, %q), want (%q, %q)", tc.name, p, c, tc.wantProj, tc.wantConv)
		}
	}
}
