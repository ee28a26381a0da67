package agenthooks

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"

	"github.com/compactd/compactd/internal/jsonx"
)

// MCPName is the name compactd's MCP server is registered under.
const MCPName = "compactd"

// MCPRegistration is what an agent has registered under MCPName.
type MCPRegistration struct {
	Found   bool
	Command string
	Args    []string
}

// Is reports whether the registration runs exe with args (`mcp` when none are given).
func (r MCPRegistration) Is(exe string, args ...string) bool {
	if len(args) == 0 {
		args = []string{"mcp"}
	}
	return r.Found && r.Command == exe && slices.Equal(r.Args, args)
}

// ClaudeMCPConfig is the file `claude mcp add --scope user|project` writes (observed with
// 2.1.332): $CLAUDE_CONFIG_DIR/.claude.json, else ~/.claude.json, for the user; .mcp.json in the
// project.
func ClaudeMCPConfig(s Scope, home, project string, getenv func(string) string) string {
	if s == ScopeProject {
		return filepath.Join(project, ".mcp.json")
	}
	if d := getenv("CLAUDE_CONFIG_DIR"); d != "" {
		return filepath.Join(d, ".claude.json")
	}
	return filepath.Join(home, ".claude.json")
}

// ClaudeMCPRegistration reads compactd's entry from a Claude Code MCP config file
// ({"mcpServers": {"compactd": {"command": …, "args": […]}}). A missing or unreadable file is
// "not registered": `claude mcp add` then says what is wrong.
func ClaudeMCPRegistration(path string) MCPRegistration {
	info, err := os.Stat(path)
	if err != nil || info.Size() > maxSettingsBytes {
		return MCPRegistration{}
	}
	b, err := os.ReadFile(path)
	if err != nil || jsonx.CheckDepth(b, jsonx.MaxDepth) != nil {
		return MCPRegistration{}
	}
	var v struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	if json.Unmarshal(b, &v) != nil {
		return MCPRegistration{}
	}
	e, ok := v.MCPServers[MCPName]
	return MCPRegistration{Found: ok, Command: e.Command, Args: e.Args}
}

// CodexMCPRegistration reads the output of `codex mcp get compactd --json` (0.169.0:
// {"name": …, "transport": {"type": "stdio", "command": …, "args": […]}}).
func CodexMCPRegistration(out []byte) MCPRegistration {
	if jsonx.CheckDepth(out, jsonx.MaxDepth) != nil {
		return MCPRegistration{}
	}
	var v struct {
		Name      string `json:"name"`
		Transport struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"transport"`
	}
	if json.Unmarshal(out, &v) != nil || v.Name != MCPName {
		return MCPRegistration{}
	}
	return MCPRegistration{Found: true, Command: v.Transport.Command, Args: v.Transport.Args}
}

// ShellQuote quotes s for a POSIX shell when it needs it (for command lines compactd prints).
func ShellQuote(s string) string { return shellQuote(s) }
