package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/archive"
	"github.com/compactd/compactd/crypto"
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
