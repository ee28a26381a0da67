// Command compactd is an HTTP proxy that gives OpenAI-style server-side context compaction to any
// Responses or Messages API backend.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

// command is one subcommand of the compactd binary. Each lives in its own file and registers
// itself from init, so subcommands can be added without touching this file.
type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(args []string) error) {
	if _, dup := commands[name]; dup {
		panic("compactd: duplicate command " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: compactd [command] [flags]\n\ncommands (default: serve):\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'compactd COMMAND -h' for a command's flags.\n")
}

func main() {
	args := os.Args[1:]
	name := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if name == "help" {
		usage()
		return
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "compactd: unknown command %q\n\n", name)
		usage()
		os.Exit(2)
	}
	if err := cmd.run(args); errors.Is(err, flag.ErrHelp) {
		return
	} else if err != nil {
		fmt.Fprintf(os.Stderr, "compactd %s: %v\n", name, err)
		os.Exit(1)
	}
}
