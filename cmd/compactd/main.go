// Command compactd is an HTTP proxy that gives OpenAI-style server-side context compaction to any
// Responses or Messages API backend.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// command is one row of the command table.
type command struct {
	name  string
	usage string // what follows "compactd NAME" in the synopsis; one line per form
	short string // one-line description, for `compactd help`
	long  string // optional: more help for `compactd help NAME`
	// run parses args with parseFlags (which prints -h/--help) and runs the command.
	run func(args []string) error
}

// commandTable is every command of the binary, in the order `compactd help` lists them.
//
// To add a command: write its run function in its own file (define a flag.FlagSet named after
// the command and parse it with parseFlags, which gives flags-anywhere, stray-argument errors,
// help and the environment policy), then add one line here. To add a serve flag: one line in
// serveConfig.flags (it reads its COMPACTD_* variable by itself).
//
// It is a function rather than a package variable because parseFlags looks commands up in it for
// their help, which would make a variable's initialiser refer to itself.
func commandTable() []command {
	return []command{
		{"serve", "[flags]", "run the proxy (the default command)", serveHelp, runServe},
		{"demo", "[flags]", "run a conversation through compactd and a built-in fake model (no API key, no network)", "", runDemo},
		{"keygen", "", "print a new sealing key (id:secret) for COMPACTD_KEYS or a key file", "", runKeygen},
		{"hash-key", "< KEY", "hash a client key for the tenants file (reads the key from stdin)", "", runHashKey},
		{"healthcheck", "[flags]", "probe a running compactd's /healthz; exit non-zero if it is down or unhealthy", healthcheckHelp, runHealthcheck},
		{"recall", "[flags] --conversation ID QUERY...", "search a conversation's archived history", archiveEnvHelp, runRecall},
		{"archive", "list [flags]\ndelete [flags] CONVERSATION_ID\nprune [flags] [--tenant T] (--max-age D | --max-bytes N | --max-total-bytes N)", "list, delete or prune archived conversations", archiveEnvHelp, runArchive},
		{"handoff", "[flags] SESSION.jsonl...\n--watch DIR [--idle 2m] [--max-bytes N] [flags]", "write a resume prompt from agent session logs", handoffHelp, runHandoff},
		{"sessions", "index [flags] DIR...\nsearch [flags] QUERY...", "index agent session logs and search across them", archiveEnvHelp, runSessions},
		{"hooks", "install|uninstall|status [flags] claude|codex\nrun claude|codex EVENT", "install compactd's hooks into Claude Code or Codex settings (PreCompact, SessionStart, optional PreToolUse guard)", hooksHelp, runHooks},
		{"mcp", "[flags]", "MCP server over stdio for any agent: search past sessions, recall archived excerpts, resume prompt", archiveEnvHelp, runMCP},
		{"fake-upstream", "[flags]", "serve the built-in fake model (Responses, Chat, Messages) for demos and tests", "", runFakeUpstream},
		{"bench", "[flags]", "measure compactd's overhead against a bare reverse proxy, on loopback", "", runBenchCmd},
		{"eval", "[flags]", "measure what survives compaction: planted facts asked after 1, 3 and 10 compactions, four configurations", "", runEval},
		{"recall-bench", "[flags]", "measure how many planted facts survive chained compaction (summary, ledger, recall)", "", runRecallBench},
		{"version", "", "print the build version (also: compactd --version)", "", runVersion},
		{"help", "[COMMAND]", "show the commands, or a command's flags (also: compactd CMD -h)", "", nil}, // handled by run
	}
}

func lookupCommand(name string) (command, bool) {
	for _, c := range commandTable() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func main() { os.Exit(run(os.Args[1:])) }

// run runs the command line args and returns the exit status: 0, 1 when the command failed,
// 2 for a usage error. Help and the version go to stdout; errors to stderr.
func run(args []string) int {
	name := "serve"
	if len(args) > 0 {
		switch a := args[0]; {
		case a == "--version" || a == "-version":
			name, args = "version", args[1:]
		case a == "-h" || a == "-help" || a == "--help":
			name, args = "help", args[1:]
		case !strings.HasPrefix(a, "-"):
			name, args = a, args[1:]
		}
	}
	if name == "help" {
		return runHelp(args)
	}
	c, ok := lookupCommand(name)
	if !ok {
		return usageExit(usageErrorf("", "unknown command %q", name))
	}
	err := c.run(args)
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		if ue.cmd == "" {
			ue.cmd = name
		}
		return usageExit(ue)
	}
	fmt.Fprintf(os.Stderr, "compactd %s: %v\n", name, err)
	return 1
}

// runHelp is `compactd help [COMMAND]`; `compactd help CMD` is `compactd CMD -h`.
func runHelp(args []string) int {
	switch {
	case len(args) == 0:
		printCommands(os.Stdout)
		return 0
	case len(args) > 2:
		return usageExit(usageErrorf("help", "unexpected argument %q", args[2]))
	case args[0] == "help":
		printCommands(os.Stdout)
		return 0
	}
	c, ok := lookupCommand(args[0])
	if !ok {
		return usageExit(usageErrorf("help", "unknown command %q", args[0]))
	}
	// `help archive prune`: the subcommands are documented on their command's page.
	if len(args) == 2 && !hasSubcommand(c, args[1]) {
		return usageExit(usageErrorf("help", "unexpected argument %q", args[1]))
	}
	if err := c.run([]string{"-h"}); err != nil && !errors.Is(err, errHelp) {
		fmt.Fprintf(os.Stderr, "compactd help: %v\n", err)
		return 1
	}
	return 0
}

func printCommands(w io.Writer) {
	fmt.Fprintf(w, "usage: compactd [COMMAND] [flags] [arguments]\n\ncommands (default: serve):\n")
	for _, c := range commandTable() {
		fmt.Fprintf(w, "  %-14s %s\n", c.name, c.short)
	}
	fmt.Fprintf(w, "\nFlags may come before or after arguments. Run 'compactd help COMMAND' (or 'compactd COMMAND -h')\n"+
		"for a command's flags. COMPACTD_* environment variables are read by serve, and for the serve\n"+
		"settings they share with it by healthcheck, recall, archive, sessions, mcp, handoff and hooks run;\n"+
		"by no other command.\n")
}

// hasSubcommand reports whether sub is one of c's subcommands (the first word of a usage form).
func hasSubcommand(c command, sub string) bool {
	for _, u := range strings.Split(c.usage, "\n") {
		if strings.HasPrefix(u, sub+" ") && !strings.HasPrefix(sub, "-") && !strings.HasPrefix(sub, "[") {
			return true
		}
	}
	return false
}

// usageExit prints a usage error and returns exit status 2.
func usageExit(err *usageError) int {
	if err.cmd == "" {
		fmt.Fprintf(os.Stderr, "compactd: %s\nRun 'compactd help' for the commands.\n", err.msg)
	} else {
		fmt.Fprintf(os.Stderr, "compactd %s: %s\nRun 'compactd help %s' for usage.\n", err.cmd, err.msg, err.cmd)
	}
	return 2
}
