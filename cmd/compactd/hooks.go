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
$CODEX_HOME or ~/.codex/hooks.json, .codex/hooks.json with --project),
keeping every other setting; a second install changes nothing; uninstall removes only compactd's
entries; status says what is installed. The hooks call 'compactd hooks run AGENT EVENT', which is
bounded in time and answers nothing (exit 0) on any failure of its own. 'hooks run' reads
COMPACTD_SUMMARIZER_URL, COMPACTD_SUMMARIZER_MODEL and COMPACTD_SUMMARIZER_KEY for the gap check.`

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
	mcp := fs.Bool("mcp", false, "also register `compactd mcp` with the agent (runs `claude mcp add` / `codex mcp add`)")
	exe := fs.String("exe", "", "compactd binary the hooks call (default: this binary)")
	if err := parseFlags(fs, args, withArgs(2, 2)); err != nil {
		return err
	}
	pos := fs.Args()
	if *user && *project {
		return errors.New("--user and --project are exclusive")
	}
	agent, err := agenthooks.ParseAgent(pos[1])
	if err != nil {
		return err
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
			fmt.Println("Codex asks you to review new hooks before it runs them (or pass --dangerously-bypass-hook-trust).")
		}
		return registerMCP(agent, scope, *exe, *mcp)
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
// `compactd mcp`: the agent's CLI owns its MCP configuration format.
func registerMCP(agent agenthooks.Agent, scope agenthooks.Scope, exe string, run bool) error {
	var argv []string
	switch agent {
	case agenthooks.Claude:
		s := "user"
		if scope == agenthooks.ScopeProject {
			s = "project"
		}
		argv = []string{"claude", "mcp", "add", "--scope", s, "compactd", "--", exe, "mcp"}
	case agenthooks.Codex:
		argv = []string{"codex", "mcp", "add", "compactd", "--", exe, "mcp"}
	}
	if !run {
		fmt.Printf("recall over MCP (search past sessions, resume prompt): run\n  %s\nor install again with --mcp\n", strings.Join(argv, " "))
		return nil
	}
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
		SummarizerModel: os.Getenv("COMPACTD_SUMMARIZER_MODEL"), Now: time.Now, Log: os.Stderr,
	})
	os.Exit(code)
	return nil
}
