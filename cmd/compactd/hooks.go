package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/compactd/compactd/internal/agenthooks"
)

// hooksHelp is the long help of `compactd help hooks`.
const hooksHelp = `install writes compactd's hook entries into the agent's settings (Claude Code:
$CLAUDE_CONFIG_DIR or ~/.claude/settings.json, .claude/settings.json with --project; Codex:
$CODEX_HOME or ~/.codex/hooks.json, .codex/hooks.json with --project, which Codex reads only in a
trusted project), keeping every other setting; a second install changes nothing; uninstall removes
only compactd's entries; status says what is installed. install also offers the agent's own
command that registers 'compactd mcp' (--mcp runs it; an existing registration is kept or, from
another binary path, replaced). The hooks call 'compactd hooks run AGENT EVENT', which gives up
after --timeout (20s), answers nothing (exit 0) on any failure of its own, and logs one line per
run to $XDG_STATE_HOME/compactd/hooks/hooks.log (~/.local/state/...) and to stderr. 'hooks run'
reads COMPACTD_SUMMARIZER_URL, COMPACTD_SUMMARIZER_MODEL and COMPACTD_SUMMARIZER_KEY for the gap
check.`

const hooksUsage = `usage: compactd hooks install|uninstall|status claude|codex [--user|--project] [--guard] [--mcp]
       compactd hooks run claude|codex PreCompact|SessionStart|PreToolUse   (called by the agent)`

func runHooks(args []string) error {
	if len(args) > 0 && args[0] == "run" {
		return runHookEvent(args[1:])
	}
	fs := flag.NewFlagSet("hooks", flag.ContinueOnError)
	user := fs.Bool("user", false, "install for the user, every project (default)")
	project := fs.Bool("project", false, "install into the current project's settings")
	guard := fs.Bool("guard", false, "Claude Code: also deny file edits while a handover is being prepared (PreToolUse)")
	mcp := fs.Bool("mcp", false, "also register compactd mcp with the agent through its CLI (claude mcp add, codex mcp add)")
	exe := fs.String("exe", "", "compactd binary the hooks call (default: this binary)")
	if err := parseFlags(fs, args, withArgs(2, 2)); err != nil {
		return err
	}
	pos := fs.Args()
	if *user && *project {
		return usageErrorf("hooks", "--user and --project are exclusive")
	}
	switch pos[0] {
	case "install", "uninstall", "status":
	default:
		return usageErrorf("hooks", "unknown subcommand %q (want install, uninstall, status or run)", pos[0])
	}
	agent, err := agenthooks.ParseAgent(pos[1])
	if err != nil {
		return usageErrorf("hooks", "%v", err)
	}
	if *guard && agent != agenthooks.Claude {
		return usageErrorf("hooks", "--guard is for Claude Code only: compactd installs no PreToolUse hook for Codex")
	}
	scope := agenthooks.ScopeUser
	if *project {
		scope = agenthooks.ScopeProject
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	path, err := agenthooks.SettingsPath(agent, scope, home, cwd, os.Getenv)
	if err != nil {
		return err
	}
	if *exe == "" {
		if *exe, err = os.Executable(); err != nil {
			return err
		}
	}
	if *exe, err = filepath.Abs(*exe); err != nil {
		return err
	}
	switch pos[0] {
	case "install":
		ch, err := agenthooks.Install(path, agent, *exe, *guard)
		if err != nil {
			return err
		}
		verb := "installed"
		if !ch.Changed {
			verb = "already installed"
		}
		fmt.Printf("compactd hooks %s in %s: %s\n", verb, path, strings.Join(ch.Events, ", "))
		fmt.Printf("each run is logged to %s\n", filepath.Join(agenthooks.DefaultStateDir(), "hooks.log"))
		if agent == agenthooks.Codex {
			if scope == agenthooks.ScopeProject {
				fmt.Println("Codex reads a project's .codex/hooks.json only once the project is trusted (trust it when Codex asks, or run `codex exec --trust` once).")
			}
			fmt.Println("Codex asks you to review new hooks before it runs them (or pass --dangerously-bypass-hook-trust).")
		}
		return registerMCP(agent, scope, home, cwd, *exe, *mcp)
	case "uninstall":
		ch, err := agenthooks.Uninstall(path)
		if err != nil {
			return err
		}
		if !ch.Changed {
			fmt.Printf("no compactd hooks in %s\n", path)
			return nil
		}
		fmt.Printf("removed compactd hooks from %s: %s\n", path, strings.Join(ch.Events, ", "))
		fmt.Println(mcpRemoveHint(agent, scope))
		return nil
	case "status":
		st, err := agenthooks.Status(path)
		if err != nil {
			return err
		}
		if len(st) == 0 {
			fmt.Printf("%s: no compactd hooks\n", path)
			return nil
		}
		events := make([]string, 0, len(st))
		for ev := range st {
			events = append(events, ev)
		}
		sort.Strings(events)
		fmt.Printf("%s:\n", path)
		for _, ev := range events {
			fmt.Printf("  %-13s %s\n", ev, strings.Join(st[ev], "; "))
		}
		return nil
	}
	return errors.New(hooksUsage)
}

// registerMCP offers (prints) or, with --mcp, runs the agent's own command that registers
// `compactd mcp`: the agent's CLI owns its MCP configuration format. It first reads what is
// registered under "compactd", so that installing again changes nothing (`claude mcp add` fails
// on a name it already has; `codex mcp add` would rewrite config.toml) and an entry left by an
// older binary path is replaced.
func registerMCP(agent agenthooks.Agent, scope agenthooks.Scope, home, project, exe string, run bool) error {
	var (
		reg    agenthooks.MCPRegistration
		add    []string // the agent's command, up to the server's command line
		args   = []string{"mcp"}
		remove []string // run before add when an older registration is in the way
		where  string
	)
	switch agent {
	case agenthooks.Claude:
		s := "user"
		if scope == agenthooks.ScopeProject {
			s = "project"
		}
		where = agenthooks.ClaudeMCPConfig(scope, home, project, os.Getenv)
		reg = agenthooks.ClaudeMCPRegistration(where)
		add = []string{"claude", "mcp", "add", "--scope", s, agenthooks.MCPName, "--", exe}
		remove = []string{"claude", "mcp", "remove", "--scope", s, agenthooks.MCPName}
	case agenthooks.Codex:
		// `codex mcp add` has no scope: it writes $CODEX_HOME/config.toml, for every project.
		where = "Codex's config.toml (every project)"
		if out, err := exec.Command("codex", "mcp", "get", agenthooks.MCPName, "--json").Output(); err == nil {
			reg = agenthooks.CodexMCPRegistration(out)
		}
		add = []string{"codex", "mcp", "add", agenthooks.MCPName, "--", exe}
		// Codex starts MCP servers with HOME and PATH only: a CODEX_HOME of the user's must be
		// passed on for the server to find this project's rollouts.
		if h := os.Getenv("CODEX_HOME"); h != "" {
			if abs, err := filepath.Abs(h); err == nil {
				args = append(args, "--codex-home", abs)
			}
		}
	}
	add = append(add, args...)
	if reg.Is(exe, args...) {
		fmt.Printf("compactd mcp is already registered with %s in %s\n", agent, where)
		return nil
	}
	quoted := make([]string, len(add))
	for i, a := range add {
		quoted[i] = agenthooks.ShellQuote(a)
	}
	if !run {
		fmt.Printf("recall over MCP (search past sessions, resume prompt): run\n  %s\nor install again with --mcp\n", strings.Join(quoted, " "))
		if agent == agenthooks.Codex && scope == agenthooks.ScopeProject {
			fmt.Println("(`codex mcp add` registers it for every project: Codex has no project scope for it)")
		}
		return nil
	}
	if reg.Found && remove != nil {
		if err := runAgentCLI(remove); err != nil {
			return err
		}
	}
	if err := runAgentCLI(add); err != nil {
		return err
	}
	if agent == agenthooks.Codex && scope == agenthooks.ScopeProject {
		fmt.Println("(registered for every project: `codex mcp add` has no project scope)")
	}
	return nil
}

// mcpRemoveHint: uninstall removes hooks only; the MCP registration belongs to the agent's CLI.
func mcpRemoveHint(agent agenthooks.Agent, scope agenthooks.Scope) string {
	if agent == agenthooks.Codex {
		return "a registration of compactd mcp stays; remove it with: codex mcp remove compactd"
	}
	s := "user"
	if scope == agenthooks.ScopeProject {
		s = "project"
	}
	return "a registration of compactd mcp stays; remove it with: claude mcp remove --scope " + s + " compactd"
}

func runAgentCLI(argv []string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return nil
}

// runHookEvent is what the installed hook command runs. It always exits 0 (see agenthooks.Run).
func runHookEvent(args []string) error {
	fs := flag.NewFlagSet("hooks run", flag.ContinueOnError)
	timeout := fs.Duration("timeout", agenthooks.DefaultTimeout, "bound on the hook's work; past it the hook answers with nothing")
	// A hook must never fail the agent's own step (for PreCompact, exit 2 would block the
	// compaction): a command line it does not understand is reported on stderr and answered with
	// nothing, exit 0, like every other failure of a hook.
	if err := parseFlags(fs, args, withArgs(2, 2)); err != nil {
		if errors.Is(err, errHelp) {
			return err // the help was printed, once
		}
		fmt.Fprintf(os.Stderr, "compactd hooks run: %v\n%s\n", err, hooksUsage)
		return nil
	}
	agent, err := agenthooks.ParseAgent(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "compactd hooks run: %v\n", err)
		return nil
	}
	key := os.Getenv("COMPACTD_SUMMARIZER_KEY")
	code := agenthooks.Run(context.Background(), os.Stdin, os.Stdout, agenthooks.RunOptions{
		Agent: agent, Event: fs.Arg(1), Timeout: *timeout, StateDir: agenthooks.DefaultStateDir(),
		SummarizerURL: os.Getenv("COMPACTD_SUMMARIZER_URL"), SummarizerKey: key,
		SummarizerModel: responsesModel(os.Getenv("COMPACTD_SUMMARIZER_MODEL")), Now: time.Now, Log: os.Stderr,
	})
	os.Exit(code)
	return nil
}
