package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Flag parsing for every command. One function, parseFlags, so that every command gets the same
// behaviour: flags are accepted anywhere (before, between and after positional arguments, `--`
// ends them), stray arguments are a usage error, -h/--help prints the command's help on stdout,
// and COMPACTD_* variables are read only where a command asks for them.
//
// Environment policy: only `serve` reads every COMPACTD_* variable. A few commands read the
// variables of the serve settings they share, so that they find the same server or archive in
// the same container or shell: healthcheck (listen, ops-listen), archive/recall/sessions (the
// archive and keyring settings) and handoff (the summariser). Every other command ignores the
// environment, so a COMPACTD_RETAIN_TOKENS meant for serve cannot change what `demo` does.
//
// Off convention: a numeric limit, size, count, duration or threshold that can be turned off is
// turned off with 0; a feature is turned off with its boolean flag set to false (--metrics=false,
// --recall=false); --archive off is the one string setting (a DSN has no zero).

// errHelp is returned after a command's help was printed (exit status 0).
var errHelp = flag.ErrHelp

// usageError is a command-line mistake: printed with a pointer to the help, exit status 2.
type usageError struct {
	cmd string // the command, e.g. "archive"
	msg string
}

func (e *usageError) Error() string { return e.msg }

// flagNameInError is how the flag package names a flag in its errors: one dash.
var flagNameInError = regexp.MustCompile(`(: |flag )-([A-Za-z0-9][A-Za-z0-9-]*)`)

// longFlagSpelling respells the flag package's "-name" as "--name", the spelling compactd's help
// and README use, so `--nosuch` is reported as --nosuch.
func longFlagSpelling(msg string) string {
	return flagNameInError.ReplaceAllString(msg, "$1--$2")
}

func usageErrorf(cmd, format string, args ...any) *usageError {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, args...)}
}

// envName is the environment variable of a flag: COMPACTD_ + the flag name in upper case with
// dashes as underscores (--max-body-bytes -> COMPACTD_MAX_BODY_BYTES).
func envName(flagName string) string {
	return "COMPACTD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseOptions are parseFlags' options; the zero value takes no positional arguments and reads
// no environment variable.
type parseOptions struct {
	minArgs, maxArgs int               // positional arguments allowed (maxArgs < 0: no limit)
	env              func(string) bool // flag names that read COMPACTD_<NAME>
	warn             func(string)      // deprecation warnings (default: printed to stderr)
}

type parseOption func(*parseOptions)

// withArgs allows between min and max positional arguments (max < 0: any number).
func withArgs(min, max int) parseOption {
	return func(o *parseOptions) { o.minArgs, o.maxArgs = min, max }
}

// withEnvAll makes every flag read its COMPACTD_* variable (serve).
func withEnvAll() parseOption {
	return func(o *parseOptions) { o.env = func(string) bool { return true } }
}

// withEnv makes the named flags read their COMPACTD_* variables: the serve settings a command
// shares.
func withEnv(names ...string) parseOption {
	return func(o *parseOptions) { o.env = func(n string) bool { return slices.Contains(names, n) } }
}

// withWarnings hands deprecation warnings to warn instead of printing them, e.g. to a logger.
func withWarnings(warn func(string)) parseOption {
	return func(o *parseOptions) { o.warn = warn }
}

// parseFlags parses a command's arguments. Afterwards fs.Args() holds the positional arguments
// (in order, wherever they stood among the flags). Flags on the command line win over the
// environment, which wins over the defaults; a current name wins over its deprecated alias.
func parseFlags(fs *flag.FlagSet, args []string, opts ...parseOption) error {
	var o parseOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.env == nil {
		o.env = func(string) bool { return false }
	}
	if o.warn == nil {
		o.warn = func(msg string) { fmt.Fprintf(os.Stderr, "compactd %s: warning: %s\n", fs.Name(), msg) }
	}
	// The flag package would print errors and usage itself, to stderr; compactd prints both.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}

	// Go's flag package stops at the first non-flag argument: take it as a positional argument
	// and parse on, so `archive prune --max-age 24h` sets --max-age.
	var pos []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			printHelp(os.Stdout, fs, o)
			return errHelp
		}
		if err != nil {
			return usageErrorf(fs.Name(), "%s", longFlagSpelling(err.Error()))
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...) // everything after -- is positional
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	// Make fs.Args() the positional arguments ("--" ends flag parsing, so nothing else is set).
	if err := fs.Parse(append([]string{"--"}, pos...)); err != nil {
		return err
	}
	switch {
	case len(pos) < o.minArgs:
		return usageErrorf(fs.Name(), "missing arguments")
	case o.maxArgs >= 0 && len(pos) > o.maxArgs:
		return usageErrorf(fs.Name(), "unexpected argument %q", pos[o.maxArgs])
	}

	set := map[string]bool{} // flags given on the command line, aliases resolved to their target
	var warnings []string
	fs.Visit(func(f *flag.Flag) {
		set[f.Name] = true
		if a, ok := f.Value.(*aliasValue); ok {
			set[a.target] = true
			warnings = append(warnings, fmt.Sprintf("--%s is deprecated: use --%s", f.Name, a.hint()))
		}
	})
	var err error
	setFromEnv := func(f *flag.Flag, target string) {
		if err != nil || set[target] || !o.env(target) {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = usageErrorf(fs.Name(), "$%s: %v", envName(f.Name), e)
			return
		}
		set[target] = true
		if a, ok := f.Value.(*aliasValue); ok {
			warnings = append(warnings, fmt.Sprintf("$%s is deprecated: use $%s", envName(f.Name), envName(a.target)))
		}
	}
	// Current names first, so that their variables win over deprecated ones.
	fs.VisitAll(func(f *flag.Flag) {
		if _, alias := f.Value.(*aliasValue); !alias {
			setFromEnv(f, f.Name)
		}
	})
	fs.VisitAll(func(f *flag.Flag) {
		if a, alias := f.Value.(*aliasValue); alias {
			setFromEnv(f, a.target)
		}
	})
	for _, w := range warnings {
		o.warn(w)
	}
	return err
}

// aliasValue is a deprecated flag name: setting it sets the target flag (inverted for a boolean
// whose meaning flipped, like --recall-off for --recall). Its COMPACTD_* variable is honoured too.
// parseFlags warns whenever one is used; help does not list them.
type aliasValue struct {
	fs     *flag.FlagSet
	target string
	invert bool
}

// deprecate adds old as a deprecated alias of the already defined flag current.
func deprecate(fs *flag.FlagSet, old, current string) {
	fs.Var(&aliasValue{fs: fs, target: current}, old, "deprecated: use --"+current)
}

// deprecateInverted adds old as a deprecated boolean alias meaning --current=false.
func deprecateInverted(fs *flag.FlagSet, old, current string) {
	fs.Var(&aliasValue{fs: fs, target: current, invert: true}, old, "deprecated: use --"+current+"=false")
}

func (a *aliasValue) hint() string {
	if a.invert {
		return a.target + "=false"
	}
	return a.target
}

func (a *aliasValue) String() string { return "" }

func (a *aliasValue) Set(v string) error {
	if a.invert {
		b, err := parseBool(v)
		if err != nil {
			return err
		}
		v = fmt.Sprint(!b)
	}
	return a.fs.Set(a.target, v)
}

// IsBoolFlag lets an alias of a boolean flag stand without a value, as the flag itself does.
func (a *aliasValue) IsBoolFlag() bool {
	f := a.fs.Lookup(a.target)
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func parseBool(v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("invalid boolean %q", v)
	}
	return b, nil
}

// printHelp writes a command's help: its synopsis, its description and its flags.
func printHelp(w io.Writer, fs *flag.FlagSet, o parseOptions) {
	name := fs.Name()
	c, ok := lookupCommand(strings.Fields(name)[0])
	if ok {
		for i, u := range strings.Split(c.usage, "\n") {
			lead := "usage:"
			if i > 0 {
				lead = "      "
			}
			fmt.Fprintf(w, "%s %s\n", lead, strings.TrimSpace("compactd "+c.name+" "+u))
		}
		fmt.Fprintf(w, "\n%s\n", c.short)
		if c.long != "" {
			fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.long))
		}
	} else {
		fmt.Fprintf(w, "usage: compactd %s [flags]\n", name)
	}
	var lines [][2]string
	width := 0
	fs.VisitAll(func(f *flag.Flag) {
		if _, alias := f.Value.(*aliasValue); alias {
			return
		}
		arg, usage := flag.UnquoteUsage(f)
		left := "--" + f.Name
		if len(f.Name) == 1 {
			left = "-" + f.Name // -k, -o, -v: the conventional spelling of one-letter flags
		}
		if arg != "" {
			left += " " + arg
		}
		if !isZeroDefault(f) {
			if fmt.Sprintf("%T", f.Value) == "*flag.stringValue" {
				usage += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				usage += fmt.Sprintf(" (default %s)", f.DefValue)
			}
		}
		if o.env(f.Name) {
			usage += fmt.Sprintf(" [$%s]", envName(f.Name))
		}
		width = max(width, len(left))
		lines = append(lines, [2]string{left, usage})
	})
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "\nflags:\n")
	for _, l := range lines {
		fmt.Fprintf(w, "  %-*s  %s\n", width, l[0], l[1])
	}
}

// isZeroDefault reports whether a flag's default is its type's zero value (not worth printing).
func isZeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return true
	}
	return false
}
