package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/mcpserver"
)

// multiFlag collects a repeated string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runMCP(args []string) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	var af archiveFlags
	af.register(fs)
	var dirs multiFlag
	fs.Var(&dirs, "sessions", "`DIR` of session logs to search (repeatable; default: this project's Claude Code and Codex logs)")
	conv := fs.String("conversation", "", "compaction archive conversation the recall tool searches by default (default: the agent's current session, $CLAUDE_CODE_SESSION_ID)")
	project := fs.String("project", "", "project directory (default: $CLAUDE_PROJECT_DIR, else the working directory)")
	codexHome := fs.String("codex-home", "", "Codex home whose sessions/ are searched for this project's rollouts (default: $CODEX_HOME, else ~/.codex)")
	if err := parseFlags(fs, args, withEnv(archiveEnv...)); err != nil {
		return err
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	*project, *conv = mcpDefaults(*project, *conv, wd, os.Getenv)
	var shared []string
	if len(dirs) == 0 {
		dirs, shared = defaultSessionDirs(*project, *codexHome)
	}
	store, err := openMCPArchive(af)
	if err != nil {
		return err
	}
	defer store.Close()
	srv := mcpserver.New(mcpserver.Options{
		Store: store, Tenant: af.tenant, SessionDirs: dirs, SharedSessionDirs: shared, Project: *project,
		Conversation: *conv, Version: version,
		StatePath: filepath.Join(af.dataDir, "mcp-index", claudeProjectName(*project)+".json"),
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Not mcp.StdioTransport, which ends the session at the first bad frame: LineTransport answers
	// it with a JSON-RPC error and reads on.
	return srv.Run(ctx, &mcpserver.LineTransport{In: os.Stdin, Out: os.Stdout})
}

// mcpDefaults fills in the project and the recall conversation from what the agent tells the
// server it starts: Claude Code 2.1.332 gives MCP servers CLAUDE_PROJECT_DIR and
// CLAUDE_CODE_SESSION_ID (observed), and compactd's proxy archives Claude Code's compactions
// under that session id, so recall defaults to the current session.
func mcpDefaults(project, conv, wd string, getenv func(string) string) (string, string) {
	switch {
	case project != "":
		if !filepath.IsAbs(project) {
			project = filepath.Join(wd, project)
		}
	case filepath.IsAbs(getenv("CLAUDE_PROJECT_DIR")):
		project = getenv("CLAUDE_PROJECT_DIR")
	default:
		project = wd
	}
	project = filepath.Clean(project)
	if conv == "" {
		conv = cleanConversation(getenv("CLAUDE_CODE_SESSION_ID"))
	}
	return project, conv
}

// cleanConversation keeps an id that could be an archive conversation (as the proxy's cleanID:
// short, printable ASCII, no spaces), else "".
func cleanConversation(s string) string {
	if len(s) > 128 {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return ""
		}
	}
	return s
}

// claudeProjectName is Claude Code's directory name for a project under ~/.claude/projects: the
// absolute path with every character outside [A-Za-z0-9] replaced by '-' (observed with 2.1.332:
// /work/x/.cache → -work-x--cache).
func claudeProjectName(dir string) string {
	return nonAlnum.ReplaceAllString(dir, "-")
}

var nonAlnum = regexp.MustCompile(`[^A-Za-z0-9]`)

// defaultSessionDirs is where this project's sessions live: Claude Code's per-project directory,
// and Codex's sessions tree, which holds every project's rollouts (shared: only those whose
// session_meta cwd is this project count). Codex 0.169.0 starts MCP servers with HOME and PATH
// only, so a CODEX_HOME of the user's reaches the server as --codex-home (hooks install --mcp
// adds it).
func defaultSessionDirs(project, codexHome string) (dirs, shared []string) {
	home, _ := os.UserHomeDir()
	cfg := os.Getenv("CLAUDE_CONFIG_DIR")
	if cfg == "" {
		cfg = filepath.Join(home, ".claude")
	}
	codexHome = cmp.Or(codexHome, os.Getenv("CODEX_HOME"), filepath.Join(home, ".codex"))
	return []string{filepath.Join(cfg, "projects", claudeProjectName(project))}, []string{filepath.Join(codexHome, "sessions")}
}

// openMCPArchive opens the archive like the other archive commands, except that a missing
// keyring is generated (as serve does): an agent that registers `compactd mcp` before ever
// running the proxy still gets a working, encrypted sessions index.
func openMCPArchive(a archiveFlags) (archive.Store, error) {
	if a.dsn == "off" {
		return nil, errors.New("the archive is off (--archive off); the MCP tools need it")
	}
	ring, _, err := crypto.LoadKeyring(crypto.LoadOptions{Env: a.keys, File: a.keyFile, DataDir: a.dataDir, Generate: true})
	if err != nil {
		return nil, err
	}
	sealer, err := archive.KeyringSealer(ring, a.indexKey)
	if err != nil {
		return nil, err
	}
	return archive.Open(context.Background(), archiveDSN(a.dsn, a.dataDir), sealer)
}
