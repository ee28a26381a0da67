package crypto

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func writeFile(t *testing.T, path, text string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // WriteFile is subject to the umask
		t.Fatal(err)
	}
}

func TestLoadKeyringPrecedence(t *testing.T) {
	dir := t.TempDir()
	envKeys := mustKeyring(t, testKey("env", 1)).String()
	file := filepath.Join(dir, "keys.txt")
	writeFile(t, file, mustKeyring(t, testKey("file", 2)).String(), 0o600)
	dataDir := filepath.Join(dir, "data")
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dataDir, "keyring"), mustKeyring(t, testKey("datadir", 3)).String(), 0o600)

	tests := []struct {
		name       string
		o          LoadOptions
		wantActive string
		wantSource Source
	}{
		{"env wins", LoadOptions{Env: envKeys, File: file, DataDir: dataDir, Generate: true}, "env", Source{Kind: "env"}},
		{"file next", LoadOptions{File: file, DataDir: dataDir, Generate: true}, "file", Source{Kind: "file", Path: file}},
		{"data dir last", LoadOptions{DataDir: dataDir, Generate: true}, "datadir", Source{Kind: "data-dir", Path: filepath.Join(dataDir, "keyring")}},
		{"data dir without generate", LoadOptions{DataDir: dataDir}, "datadir", Source{Kind: "data-dir", Path: filepath.Join(dataDir, "keyring")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, src, err := LoadKeyring(tt.o)
			if err != nil {
				t.Fatalf("LoadKeyring: %v", err)
			}
			if r.ActiveID() != tt.wantActive || src != tt.wantSource {
				t.Fatalf("got active %q from %+v, want %q from %+v", r.ActiveID(), src, tt.wantActive, tt.wantSource)
			}
		})
	}
}

func TestLoadKeyringErrors(t *testing.T) {
	dir := t.TempDir()
	good := mustKeyring(t, testKey("a", 1)).String()
	loose := func(mode os.FileMode) string {
		p := filepath.Join(dir, "loose"+mode.String())
		writeFile(t, p, good, mode)
		return p
	}
	looseDataDir := filepath.Join(dir, "loosedata")
	if err := os.Mkdir(looseDataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(looseDataDir, "keyring"), good, 0o644)
	badText := filepath.Join(dir, "bad")
	writeFile(t, badText, "not a keyring", 0o600)

	tests := []struct {
		name    string
		o       LoadOptions
		wantErr string
	}{
		{"world-readable file", LoadOptions{File: loose(0o644)}, "chmod 600"},
		{"group-readable file", LoadOptions{File: loose(0o640)}, "chmod 600"},
		{"world-writable file", LoadOptions{File: loose(0o602)}, "chmod 600"},
		{"loose data-dir keyring", LoadOptions{DataDir: looseDataDir, Generate: true}, "chmod 600"},
		{"missing file", LoadOptions{File: filepath.Join(dir, "nope")}, "no such file"},
		{"file is a directory", LoadOptions{File: dir}, "not a regular file"},
		{"unparsable file", LoadOptions{File: badText}, "entry 1"},
		{"bad env", LoadOptions{Env: "x", DataDir: dir, Generate: true}, "COMPACTD_KEYS"},
		{"absent and no generate", LoadOptions{DataDir: filepath.Join(dir, "empty")}, "does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _, err := LoadKeyring(tt.o)
			if err == nil {
				t.Fatalf("LoadKeyring succeeded with %v, want error containing %q", r.IDs(), tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "empty")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadKeyring without Generate created the data dir: %v", err)
	}
}

func TestLoadKeyringGenerates(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "nested", "compactd")
	o := LoadOptions{DataDir: dataDir, Generate: true}

	r1, src, err := LoadKeyring(o)
	if err != nil {
		t.Fatalf("first LoadKeyring: %v", err)
	}
	path := filepath.Join(dataDir, "keyring")
	if want := (Source{Kind: "generated", Path: path, Generated: true}); src != want {
		t.Fatalf("source %+v, want %+v", src, want)
	}
	assertMode(t, dataDir, 0o700)
	assertMode(t, path, 0o600)
	if entries, _ := os.ReadDir(dataDir); len(entries) != 1 {
		t.Fatalf("data dir holds %d entries, want only the keyring (temp file left behind?)", len(entries))
	}

	r2, src, err := LoadKeyring(o)
	if err != nil {
		t.Fatalf("second LoadKeyring: %v", err)
	}
	if want := (Source{Kind: "data-dir", Path: path}); src != want {
		t.Fatalf("second source %+v, want %+v", src, want)
	}
	if r1.ActiveID() != r2.ActiveID() {
		t.Fatalf("second load has active %q, want the persisted %q", r2.ActiveID(), r1.ActiveID())
	}
	blob := mustSeal(t, r1, []byte("survives a restart"), defaultBinding)
	if _, err := r2.Open(blob, defaultBinding); err != nil {
		t.Fatalf("reloaded keyring cannot open what the generated one sealed: %v", err)
	}
}

// TestLoadKeyringConcurrentGenerate starts several "processes" on an empty data dir at
// once: they must all end up with the same key, or blobs would be unreadable after a
// restart.
func TestLoadKeyringConcurrentGenerate(t *testing.T) {
	o := LoadOptions{DataDir: filepath.Join(t.TempDir(), "d"), Generate: true}
	const n = 6
	ids := make([]string, n)
	errs := make([]error, n)
	var generated sync.Map
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, src, err := LoadKeyring(o)
			errs[i] = err
			if err == nil {
				ids[i] = r.ActiveID()
				if src.Generated {
					generated.Store(i, true)
				}
			}
		})
	}
	wg.Wait()
	count := 0
	generated.Range(func(any, any) bool { count++; return true })
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("loader %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("loaders disagree on the active key: %v", ids)
		}
	}
	if count != 1 {
		t.Fatalf("%d loaders report having generated the keyring, want 1", count)
	}
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != want {
		t.Fatalf("%s has mode %04o, want %04o", path, got, want)
	}
}

func TestDefaultDataDir(t *testing.T) {
	tests := []struct {
		name, xdg, home, want string
	}{
		{"xdg", "/xdg/data", "/home/u", "/xdg/data/compactd"},
		{"relative xdg ignored", "rel/data", "/home/u", "/home/u/.local/share/compactd"},
		{"home", "", "/home/u", "/home/u/.local/share/compactd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("XDG_DATA_HOME", tt.xdg)
			t.Setenv("HOME", tt.home)
			if got := DefaultDataDir(); got != filepath.FromSlash(tt.want) {
				t.Fatalf("DefaultDataDir() = %q, want %q", got, tt.want)
			}
		})
	}
}
