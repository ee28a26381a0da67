package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/proxy"
)

// captureOutput runs f with os.Stdout and os.Stderr redirected and returns what it printed.
func captureOutput(t *testing.T, f func()) (stdout, stderr string) {
	t.Helper()
	read := func(p **os.File) (restore func() string) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		old := *p
		*p = w
		done := make(chan string)
		go func() { b, _ := io.ReadAll(r); done <- string(b) }()
		return func() string { *p = old; w.Close(); return <-done }
	}
	outDone, errDone := read(&os.Stdout), read(&os.Stderr)
	defer func() { stdout, stderr = outDone(), errDone() }()
	f()
	return
}

func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	_, stderr := captureOutput(t, f)
	return stderr
}

// clearCompactdEnv unsets every COMPACTD_* variable of whoever runs the tests, for the test.
func clearCompactdEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "COMPACTD_") {
			unsetenv(t, k)
		}
	}
}

// runCLI runs a command line in-process and returns its exit status and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	stdout, stderr = captureOutput(t, func() { code = run(args) })
	return code, stdout, stderr
}

// TestArchivePrune runs `compactd archive prune` against a temporary SQLite archive holding one
// old and one new conversation. The prune must delete the old one whatever the position of its
// flags: before the fix, flags after the subcommand were never parsed, so the form the usage text
// shows deleted nothing and exited 0.
func TestArchivePrune(t *testing.T) {
	tests := []struct {
		name     string
		args     func(keys, dir string) []string
		env      func(keys, dir string) []string // KEY=value pairs
		wantCode int
		wantOld  bool // the old conversation survives
	}{
		{name: "flags after the subcommand (the documented form)", args: func(k, d string) []string {
			return []string{"archive", "prune", "--max-age", "24h", "--keys", k, "--data-dir", d}
		}},
		{name: "flags before the subcommand", args: func(k, d string) []string {
			return []string{"archive", "--keys", k, "--data-dir", d, "--max-age=24h", "prune"}
		}},
		{name: "flags on both sides", args: func(k, d string) []string {
			return []string{"archive", "--keys", k, "prune", "-max-age", "24h", "--data-dir", d}
		}},
		{name: "keyring and data dir from serve's variables", args: func(k, d string) []string {
			return []string{"archive", "prune", "--max-age", "24h"}
		}, env: func(k, d string) []string { return []string{"COMPACTD_KEYS=" + k, "COMPACTD_DATA_DIR=" + d} }},
		{name: "by size", args: func(k, d string) []string {
			return []string{"archive", "prune", "--keys", k, "--data-dir", d, "--max-bytes", "1"}
		}},
		{name: "no limit is a usage error, not a no-op", args: func(k, d string) []string {
			return []string{"archive", "prune", "--keys", k, "--data-dir", d}
		}, wantCode: 2, wantOld: true},
		{name: "prune flags on list are rejected", args: func(k, d string) []string {
			return []string{"archive", "list", "--max-age", "24h", "--keys", k, "--data-dir", d}
		}, wantCode: 2, wantOld: true},
		{name: "stray argument", args: func(k, d string) []string {
			return []string{"archive", "prune", "now", "--max-age", "24h", "--keys", k, "--data-dir", d}
		}, wantCode: 2, wantOld: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearCompactdEnv(t)
			key, err := crypto.GenerateKey()
			if err != nil {
				t.Fatal(err)
			}
			keys, dir := key.String(), t.TempDir()
			store := openTestArchive(t, keys, dir)
			for conv, age := range map[string]time.Duration{"conv-old": 72 * time.Hour, "conv-new": 0} {
				seg := archive.Segment{Tenant: archive.DefaultTenant, Conversation: conv, Kind: archive.KindSession,
					CreatedAt: time.Now().Add(-age), Items: []json.RawMessage{json.RawMessage(`{"type":"message","role":"user","content":"hello"}`)}}
				if _, err := store.Put(context.Background(), seg); err != nil {
					t.Fatal(err)
				}
			}
			store.Close()
			if tt.env != nil {
				for _, kv := range tt.env(keys, dir) {
					k, v, _ := strings.Cut(kv, "=")
					t.Setenv(k, v)
				}
			}
			code, stdout, stderr := runCLI(t, tt.args(keys, dir)...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, stdout, stderr)
			}
			if code == 0 && !strings.HasPrefix(stdout, "pruned ") {
				t.Errorf("stdout = %q", stdout)
			}
			if code == 2 && !strings.Contains(stderr, "compactd help archive") {
				t.Errorf("usage error without a pointer to the help: %q", stderr)
			}
			store = openTestArchive(t, keys, dir)
			defer store.Close()
			convs, err := store.Conversations(context.Background(), archive.DefaultTenant)
			if err != nil {
				t.Fatal(err)
			}
			old := false
			for _, c := range convs {
				old = old || c.ID == "conv-old"
			}
			if old != tt.wantOld {
				t.Errorf("old conversation kept = %v, want %v (stdout %q)", old, tt.wantOld, stdout)
			}
		})
	}
}

func openTestArchive(t *testing.T, keys, dir string) archive.Store {
	t.Helper()
	ring, err := crypto.ParseKeyring(keys)
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := archive.KeyringSealer(ring, "")
	if err != nil {
		t.Fatal(err)
	}
	store, err := archive.Open(context.Background(), "sqlite:"+filepath.Join(dir, "archive.db"), sealer)
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// TestHelpAndVersion: help and the version are output, not errors: stdout, exit 0, nothing on
// stderr. Every command has a synopsis line and a short description.
func TestHelpAndVersion(t *testing.T) {
	tests := []struct {
		args []string
		want []string // substrings of stdout
	}{
		{[]string{"help"}, []string{"usage: compactd [COMMAND]", "archive", "recall-bench"}},
		{[]string{"--help"}, []string{"commands (default: serve)"}},
		{[]string{"-h"}, []string{"commands (default: serve)"}},
		{[]string{"help", "serve"}, []string{"usage: compactd serve [flags]", "--ops-listen", "--summarizer-attempts", "[$COMPACTD_RETAIN_TOKENS]"}},
		{[]string{"serve", "--help"}, []string{"usage: compactd serve [flags]", "Off convention"}},
		{[]string{"--version"}, []string{"compactd " + version}},
		{[]string{"-version"}, []string{"compactd " + version}},
		{[]string{"version"}, []string{"compactd " + version}},
		{[]string{"help", "archive", "prune"}, []string{"compactd archive prune [flags] [--tenant T] (--max-age D | --max-bytes N | --max-total-bytes N)"}},
		{[]string{"help", "sessions", "search"}, []string{"compactd sessions search [flags] QUERY..."}},
		{[]string{"archive", "prune", "-h"}, []string{"--max-age duration"}},
		{[]string{"demo", "-h"}, []string{"--retain-tokens int"}},
	}
	for _, c := range commandTable() {
		if c.name != "help" {
			tests = append(tests, struct {
				args []string
				want []string
			}{[]string{c.name, "-h"}, []string{"usage: compactd " + c.name, c.short}})
		}
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			clearCompactdEnv(t)
			code, stdout, stderr := runCLI(t, tt.args...)
			if code != 0 || stderr != "" {
				t.Errorf("exit %d, stderr %q; want 0 and nothing", code, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			if strings.Contains(stdout, "--admin-listen") || strings.Contains(stdout, "--summarizer-retries") {
				t.Error("help lists deprecated names")
			}
		})
	}
	for _, c := range commandTable() {
		if c.short == "" || strings.Contains(c.short, "\n") {
			t.Errorf("%s: no one-line description", c.name)
		}
	}
}

// TestUsageErrors: stray arguments, unknown flags and commands, and values a package would
// silently replace are usage errors: exit 2, a message on stderr, nothing on stdout. Before, most
// commands ignored stray arguments and exited 0.
func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string // substring of stderr
	}{
		{[]string{"nosuch"}, `unknown command "nosuch"`},
		{[]string{"help", "nosuch"}, `unknown command "nosuch"`},
		{[]string{"serve", "extra"}, `unexpected argument "extra"`},
		{[]string{"serve", "--nosuch"}, "flag provided but not defined: --nosuch"},
		{[]string{"serve", "--retain-tokens", "x"}, "for flag --retain-tokens"},
		{[]string{"serve", "--upstream", "notaurl"}, `--upstream "notaurl" is not an absolute http(s) URL`},
		{[]string{"serve", "--anthropic-upstream", "ftp://x"}, "--anthropic-upstream"},
		{[]string{"serve", "--upstream", "https://api.openai.com/v1"}, `ends in /v1, but compactd adds /v1/… to it itself: use "https://api.openai.com"`},
		{[]string{"serve", "--upstream", "http://127.0.0.1:11434/v1/"}, "ends in /v1"},
		{[]string{"serve", "--log-content"}, "--log-content needs --log-level debug"},
		{[]string{"serve", "--log-level", "loud"}, "--log-level"},
		{[]string{"serve", "--log-format", "xml"}, "--log-format must be text or json"},
		{[]string{"serve", "--pprof"}, "--pprof needs --ops-listen"},
		{[]string{"serve", "--console"}, "--console needs --ops-listen"},
		{[]string{"serve", "--console", "--ops-listen", "127.0.0.1:0"}, "--console needs --admin-token"},
		{[]string{"serve", "--console-content"}, "--console-content needs --console"},
		{[]string{"hooks", "install", "bogus"}, `unknown agent "bogus"`},
		{[]string{"hooks", "install", "codex", "--guard"}, "--guard is for Claude Code only"},
		{[]string{"hooks", "install", "claude", "--user", "--project"}, "exclusive"},
		{[]string{"hooks", "frob", "claude"}, `unknown subcommand "frob"`},
		{[]string{"--listen", "127.0.0.1:0", "extra"}, `compactd serve: unexpected argument "extra"`},
		{[]string{"serve", "--retain-tokens", "0"}, "--retain-tokens must be positive"},
		{[]string{"serve", "--archive-max-age", "-1h"}, "--archive-max-age must not be negative"},
		{[]string{"serve", "--upstream-client", "h2"}, `--upstream-client must be compactd or go, not "h2"`},
		{[]string{"serve", "--compaction-min-saving", "1.5"}, "--compaction-min-saving must be a share"},
		{[]string{"serve", "--compact-threshold", "-1"}, "compact threshold"},
		{[]string{"serve", "--compact-threshold", "completions=1000"}, `route "completions"`},
		{[]string{"demo", "extra"}, `unexpected argument "extra"`},
		{[]string{"demo", "--threshold", "abc"}, "invalid value"},
		{[]string{"keygen", "extra"}, `unexpected argument "extra"`},
		{[]string{"hash-key", "sk-on-the-command-line"}, "unexpected argument"},
		{[]string{"version", "x"}, `unexpected argument "x"`},
		{[]string{"healthcheck", "x"}, `unexpected argument "x"`},
		{[]string{"fake-upstream", "x"}, `unexpected argument "x"`},
		{[]string{"bench", "x"}, `unexpected argument "x"`},
		{[]string{"recall-bench", "x"}, `unexpected argument "x"`},
		{[]string{"recall-bench", "--compactions", "0"}, "not a positive count"},
		{[]string{"archive"}, "missing arguments"},
		{[]string{"archive", "bogus"}, `unknown subcommand "bogus"`},
		{[]string{"archive", "list", "extra"}, `unexpected argument "extra"`},
		{[]string{"archive", "delete"}, "one CONVERSATION_ID"},
		{[]string{"archive", "delete", "a", "b"}, `unexpected argument "b"`},
		{[]string{"sessions"}, "missing arguments"},
		{[]string{"sessions", "index"}, "needs a DIR"},
		{[]string{"sessions", "search", "q", "--format", "codex"}, "--format is a flag of sessions index"},
		{[]string{"recall", "query"}, "--conversation is required"},
		{[]string{"recall", "--conversation", "c"}, "missing arguments"},
		{[]string{"handoff"}, "no session logs given"},
		{[]string{"handoff", "--format", "gemini", "a.jsonl"}, "unknown session format"},
		{[]string{"help", "archive", "prune", "x"}, `unexpected argument "x"`},
		{[]string{"help", "serve", "x"}, `unexpected argument "x"`},
		{[]string{"help", "archive", "purge"}, `unexpected argument "purge"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			clearCompactdEnv(t)
			data, home := t.TempDir(), t.TempDir()
			t.Setenv("COMPACTD_DATA_DIR", data) // nothing may touch the real data dir
			t.Setenv("HOME", home)
			code, stdout, stderr := runCLI(t, tt.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2; stderr %q", code, stderr)
			}
			// A usage error is found before anything is opened or written: no keyring, no
			// archive, no settings file.
			for _, dir := range []string{data, home} {
				if ents, _ := os.ReadDir(dir); len(ents) > 0 {
					t.Errorf("a usage error wrote %s", filepath.Join(dir, ents[0].Name()))
				}
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "Run 'compactd help") {
				t.Errorf("stderr = %q, want %q and a pointer to the help", stderr, tt.want)
			}
		})
	}
}

// TestParseFlagsInterleaved: flags are parsed wherever they stand among the positional
// arguments, and `--` ends them.
func TestParseFlagsInterleaved(t *testing.T) {
	tests := []struct {
		args    []string
		wantPos string
		wantN   int
		wantV   bool
	}{
		{[]string{"a", "b"}, "a,b", 0, false},
		{[]string{"a", "-n", "3", "b"}, "a,b", 3, false},
		{[]string{"a", "b", "--n=3", "-v"}, "a,b", 3, true},
		{[]string{"-v", "a", "--n", "3"}, "a", 3, true},
		{[]string{"a", "--", "-n", "3"}, "a,-n,3", 0, false},
		{[]string{"-", "-n", "1"}, "-", 1, false},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			n := fs.Int("n", 0, "")
			v := fs.Bool("v", false, "")
			if err := parseFlags(fs, tt.args, withArgs(0, -1)); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(fs.Args(), ","); got != tt.wantPos || *n != tt.wantN || *v != tt.wantV {
				t.Errorf("positional %q, n=%d, v=%v; want %q, %d, %v", got, *n, *v, tt.wantPos, tt.wantN, tt.wantV)
			}
		})
	}
}

// TestEnvironmentScope: a COMPACTD_* variable sets serve's setting, but not the same-named flag
// of a command that does not share it. Before, COMPACTD_RETAIN_TOKENS set for serve silently
// changed demo, and COMPACTD_LISTEN moved fake-upstream onto serve's port.
func TestEnvironmentScope(t *testing.T) {
	clearCompactdEnv(t)
	t.Setenv("COMPACTD_RETAIN_TOKENS", "1234")
	t.Setenv("COMPACTD_LISTEN", "127.0.0.1:7777")
	t.Setenv("COMPACTD_SHUTDOWN_GRACE", "1m")

	demo, err := parseDemoFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if demo.retainTokens != 600 {
		t.Errorf("demo --retain-tokens = %d, want its own default 600", demo.retainTokens)
	}
	fake, err := parseFakeUpstreamFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if fake.listen != "127.0.0.1:9090" || fake.grace != 5*time.Second {
		t.Errorf("fake-upstream took serve's environment: %+v", fake)
	}
	hc, err := parseHealthcheckFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if hc.listen != "127.0.0.1:7777" {
		t.Errorf("healthcheck --listen = %q, want serve's COMPACTD_LISTEN", hc.listen)
	}

	for _, tt := range []struct {
		args []string
		want int
	}{
		{nil, 1234},
		{[]string{"--retain-tokens", "99"}, 99}, // the command line wins
	} {
		c, _, err := parseServeFlags(tt.args)
		if err != nil {
			t.Fatal(err)
		}
		if c.retainTokens != tt.want || c.listen != "127.0.0.1:7777" || c.shutdownGrace != time.Minute {
			t.Errorf("serve %v: retain %d (want %d), listen %q, grace %s", tt.args, c.retainTokens, tt.want, c.listen, c.shutdownGrace)
		}
	}
	t.Setenv("COMPACTD_RETAIN_TOKENS", "lots")
	if _, _, err := parseServeFlags(nil); err == nil || !strings.Contains(err.Error(), "$COMPACTD_RETAIN_TOKENS") {
		t.Errorf("bad variable: err = %v", err)
	}
}

// TestDeprecatedAliases: the old names of renamed serve settings, as flags and as variables,
// still set the new ones, with a warning; the new names win over the old.
func TestDeprecatedAliases(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		check    func(c serveConfig) bool
		wantWarn string // "" = no warning
	}{
		{"--summarizer-retries", []string{"--summarizer-retries", "5"}, nil,
			func(c serveConfig) bool { return c.resilience.MaxAttempts == 5 }, "--summarizer-retries is deprecated: use --summarizer-attempts"},
		{"$COMPACTD_SUMMARIZER_RETRIES", nil, map[string]string{"COMPACTD_SUMMARIZER_RETRIES": "4"},
			func(c serveConfig) bool { return c.resilience.MaxAttempts == 4 }, "$COMPACTD_SUMMARIZER_RETRIES is deprecated: use $COMPACTD_SUMMARIZER_ATTEMPTS"},
		{"--summarizer-attempts", []string{"--summarizer-attempts", "2"}, nil,
			func(c serveConfig) bool { return c.resilience.MaxAttempts == 2 }, ""},
		{"new variable wins over old", nil, map[string]string{"COMPACTD_SUMMARIZER_ATTEMPTS": "2", "COMPACTD_SUMMARIZER_RETRIES": "9"},
			func(c serveConfig) bool { return c.resilience.MaxAttempts == 2 }, ""},
		{"old flag wins over new variable", []string{"--summarizer-retries", "6"}, map[string]string{"COMPACTD_SUMMARIZER_ATTEMPTS": "2"},
			func(c serveConfig) bool { return c.resilience.MaxAttempts == 6 }, "--summarizer-retries is deprecated"},
		{"--admin-listen", []string{"--admin-listen", "127.0.0.1:9464"}, nil,
			func(c serveConfig) bool { return c.obs.opsListen == "127.0.0.1:9464" }, "--admin-listen is deprecated: use --ops-listen"},
		{"$COMPACTD_ADMIN_LISTEN", nil, map[string]string{"COMPACTD_ADMIN_LISTEN": "0.0.0.0:9464"},
			func(c serveConfig) bool { return c.obs.opsListen == "0.0.0.0:9464" }, "$COMPACTD_ADMIN_LISTEN is deprecated: use $COMPACTD_OPS_LISTEN"},
		{"--recall-off", []string{"--recall-off"}, nil,
			func(c serveConfig) bool { return c.recallConfig.Disabled }, "--recall-off is deprecated: use --recall=false"},
		{"$COMPACTD_RECALL_OFF", nil, map[string]string{"COMPACTD_RECALL_OFF": "true"},
			func(c serveConfig) bool { return c.recallConfig.Disabled }, "$COMPACTD_RECALL_OFF is deprecated"},
		{"--recall-off=false", []string{"--recall-off=false"}, nil,
			func(c serveConfig) bool { return !c.recallConfig.Disabled }, "--recall-off is deprecated"},
		{"--recall=false", []string{"--recall=false"}, nil,
			func(c serveConfig) bool { return c.recallConfig.Disabled }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearCompactdEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, warnings, err := parseServeFlags(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("setting not applied: %+v", c)
			}
			got := strings.Join(warnings, "; ")
			if (tt.wantWarn == "") != (got == "") || !strings.Contains(got, tt.wantWarn) {
				t.Errorf("warnings %q, want %q", got, tt.wantWarn)
			}
		})
	}
	// Outside serve, the warning goes to stderr (healthcheck shares --ops-listen).
	clearCompactdEnv(t)
	if stderr := captureStderr(t, func() { _, _ = parseHealthcheckFlags([]string{"--admin-listen", ":1"}) }); !strings.Contains(stderr, "warning: --admin-listen is deprecated") {
		t.Errorf("healthcheck stderr = %q", stderr)
	}
}

// TestServeOffConvention: 0 turns a setting off, also where the package spells off as a
// negative number and reads 0 as "use the default" (before, --ledger-bytes 0 meant 6144 bytes
// and --compaction-queue 0 a queue of 32).
func TestServeOffConvention(t *testing.T) {
	clearCompactdEnv(t)
	c, _, err := parseServeFlags([]string{"--ledger-bytes", "0", "--speculative-fraction", "0", "--breaker-failures", "0", "--compaction-queue", "0", "--recall=false", "--compaction-min-saving", "0"})
	if err != nil {
		t.Fatal(err)
	}
	if c.minSaving != -1 {
		t.Errorf("--compaction-min-saving 0 maps to %v, want -1 (no minimum)", c.minSaving)
	}
	if c.ledgerBytes != -1 || c.speculative.Fraction != -1 || c.resilience.BreakerFailures != -1 || c.resilience.MaxQueue != -1 || !c.recallConfig.Disabled {
		t.Errorf("off not mapped: ledger %d, fraction %v, breaker %d, queue %d, recall disabled %v",
			c.ledgerBytes, c.speculative.Fraction, c.resilience.BreakerFailures, c.resilience.MaxQueue, c.recallConfig.Disabled)
	}
	d, _, err := parseServeFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.ledgerBytes != proxy.DefaultLedgerBytes || d.resilience.MaxQueue != summarizer.DefaultMaxQueue || d.recallConfig.Disabled ||
		d.resilience.MaxAttempts != summarizer.DefaultMaxAttempts || d.retainTokens != compact.DefaultRetainBudget {
		t.Errorf("defaults changed: %+v", d)
	}
}

// TestServeCompactThreshold: --compact-threshold takes one number for every route or one per
// route, and reaches the proxy's policy.
func TestServeCompactThreshold(t *testing.T) {
	for _, tt := range []struct {
		args      []string
		threshold int
		routes    map[dialect.Name]int
	}{
		{nil, 0, nil},
		{[]string{"--compact-threshold", "150000"}, 150000, nil},
		{[]string{"--compact-threshold", "responses=150000,messages=120000"}, 0, map[dialect.Name]int{"responses": 150000, "messages": 120000}},
		{[]string{"--compact-threshold", "chat=8000,messages=120000"}, 0, map[dialect.Name]int{"chat": 8000, "messages": 120000}},
	} {
		clearCompactdEnv(t)
		c, _, err := parseServeFlags(tt.args)
		if err != nil {
			t.Fatal(err)
		}
		if c.compactThreshold.threshold != tt.threshold || len(c.compactThreshold.routes) != len(tt.routes) {
			t.Errorf("%v: threshold %d routes %v", tt.args, c.compactThreshold.threshold, c.compactThreshold.routes)
		}
		for k, v := range tt.routes {
			if c.compactThreshold.routes[k] != v {
				t.Errorf("%v: route %s = %d, want %d", tt.args, k, c.compactThreshold.routes[k], v)
			}
		}
	}
	t.Setenv("COMPACTD_COMPACT_THRESHOLD", "messages=90000")
	c, _, err := parseServeFlags(nil)
	if err != nil || c.compactThreshold.routes["messages"] != 90000 {
		t.Errorf("from the environment: %v %v", err, c.compactThreshold.routes)
	}
}

// TestServeLogsDeprecatedNames starts the real binary with the old names and checks that they
// still take effect (the ops listener starts) and that serve logs a warning for each.
func TestServeLogsDeprecatedNames(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binary")
	}
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, "deprecated", "http://127.0.0.1:1", key.String(),
		"--admin-listen", "127.0.0.1:0", "--summarizer-retries", "2", "--archive", "off")
	defer r.stop(t)
	log := r.log.String()
	for _, want := range []string{
		`"level":"WARN","msg":"deprecated setting: --admin-listen is deprecated: use --ops-listen"`,
		`"level":"WARN","msg":"deprecated setting: --summarizer-retries is deprecated: use --summarizer-attempts"`,
		`"msg":"ops listener (metrics, health)"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
}

// TestRecallAndArchiveMessages: recall on a conversation the archive does not hold says so and
// exits 1 (it exited 0 with "no archived history matches"), a hit names its owner, counts are in
// English ("1 segment"), and sessions index works on a fresh machine (it failed asking to "enable
// generation", an option that does not exist).
func TestRecallAndArchiveMessages(t *testing.T) {
	clearCompactdEnv(t)
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	keys, dir := key.String(), t.TempDir()
	store := openTestArchive(t, keys, dir)
	if _, err := store.Put(context.Background(), archive.Segment{Conversation: "conv-1", Owner: strings.Repeat("ab", 16),
		Items: []json.RawMessage{json.RawMessage(`{"type":"message","role":"user","content":"the port is 7431"}`)}}); err != nil {
		t.Fatal(err)
	}
	store.Close()
	flags := []string{"--keys", keys, "--data-dir", dir}

	code, _, stderr := runCLI(t, append([]string{"recall", "--conversation", "nosuch", "port"}, flags...)...)
	if code != 1 || !strings.Contains(stderr, `no archived conversation "nosuch"`) {
		t.Errorf("recall on an unknown conversation: exit %d, stderr %q; want 1 and that it is unknown", code, stderr)
	}
	code, _, stderr = runCLI(t, append([]string{"recall", "--conversation", "conv-1", "zebra"}, flags...)...)
	if code != 0 || !strings.Contains(stderr, "no archived history of conv-1 matches") {
		t.Errorf("recall with no match in a known conversation: exit %d, stderr %q", code, stderr)
	}
	code, stdout, _ := runCLI(t, append([]string{"recall", "--conversation", "conv-1", "port"}, flags...)...)
	if code != 0 || !strings.Contains(stdout, "owner "+strings.Repeat("ab", 16)) || !strings.Contains(stdout, "7431") {
		t.Errorf("recall hit: exit %d, stdout %q; want the excerpt and its owner", code, stdout)
	}
	code, stdout, _ = runCLI(t, append([]string{"archive", "delete", "conv-1"}, flags...)...)
	if code != 0 || strings.TrimSpace(stdout) != "deleted 1 segment of conv-1" {
		t.Errorf("archive delete: exit %d, stdout %q; want \"deleted 1 segment of conv-1\"", code, stdout)
	}

	fresh, logs := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(logs, "s.jsonl"), []byte(`{"type":"session_meta","payload":{"id":"s1","cwd":"/w"}}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(t, "sessions", "index", "--data-dir", fresh, logs)
	if code != 0 || !strings.Contains(stderr, "indexed 1 session log\n") {
		t.Errorf("sessions index on a fresh machine: exit %d, stderr %q", code, stderr)
	}
}

// TestHelpFlagLines: every command's help lists each flag with one default at most and a
// one-word value placeholder (the flag package takes a backquoted phrase in the usage text as the
// placeholder: `help recall` once showed "--conversation compactd archive list"); and a
// subcommand's -h prints its help once, on stdout (`hooks run -h` printed a second usage line on
// stderr).
func TestHelpFlagLines(t *testing.T) {
	clearCompactdEnv(t)
	for _, c := range commandTable() {
		if c.run == nil {
			continue
		}
		args := [][]string{{c.name, "-h"}}
		if c.name == "hooks" {
			args = append(args, []string{"hooks", "run", "-h"})
		}
		for _, a := range args {
			code, stdout, stderr := runCLI(t, a...)
			if code != 0 || stderr != "" {
				t.Errorf("%v: exit %d, stderr %q; want 0 and nothing", a, code, stderr)
			}
			for _, line := range strings.Split(stdout, "\n") {
				f := strings.Fields(line)
				if len(f) == 0 || !strings.HasPrefix(f[0], "-") {
					continue
				}
				if n := strings.Count(line, "(default"); n > 1 {
					t.Errorf("%v: %d defaults on one flag line: %s", a, n, line)
				}
				// "--name placeholder  usage": the placeholder, if any, is one word, and the
				// column the usage starts in is two spaces after it.
				name, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
				if ph, _, ok := strings.Cut(strings.TrimLeft(rest, " "), "  "); ok && strings.Contains(ph, " ") && !strings.HasPrefix(rest, "  ") {
					t.Errorf("%v: flag %s has the placeholder %q", a, name, ph)
				}
			}
		}
	}
}
