package archive

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSQLiteEncryptionAtRest plants a unique sentence and checks that neither it nor any of its
// words reaches the database file, its WAL or its shared-memory file, while search still finds it.
func TestSQLiteEncryptionAtRest(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "archive.db")
	st, err := Open(ctx, path, newTestSealer())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	secret := "Vorpalquux zanzibarite flumoxed /opt/glimmerfang/keys.pem ERR_SNARKLE_9917 7741395"
	words := []string{"vorpalquux", "zanzibarite", "flumoxed", "glimmerfang", "keys.pem", "snarkle", "7741395"}
	items := append(plantedItems(), msg("user", secret))
	// Long enough to be compressed as well as sealed, and short enough to stay raw: both paths.
	for _, it := range [][]json.RawMessage{items, {msg("user", secret)}} {
		if _, err := st.Put(ctx, Segment{Conversation: "conv-1", Items: it, Meta: map[string]string{"model": "m"}}); err != nil {
			t.Fatal(err)
		}
	}
	hits, err := st.Search(ctx, Query{Text: "zanzibarite"})
	if err != nil || len(hits) != 2 || !strings.Contains(hits[0].Excerpt, secret) {
		t.Fatalf("search = %+v, %v", hits, err)
	}
	var all []byte
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		all = append(all, bytes.ToLower(b)...)
	}
	if len(all) == 0 {
		t.Fatal("no database bytes read")
	}
	for _, w := range append(words, strings.ToLower(secret)) {
		if bytes.Contains(all, []byte(w)) {
			t.Errorf("plaintext %q found in the database files", w)
		}
	}
	// Control: the scan would have seen a clear-text column.
	if !bytes.Contains(all, []byte("conv-1")) {
		t.Error("control string not found: the scan is not reading the data")
	}
}

func TestSQLiteFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "compactd")
	path := filepath.Join(dir, "archive.db")
	st, err := Open(context.Background(), path, newTestSealer())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(context.Background(), Segment{Conversation: "c", Items: plantedItems()}); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600, path + "-wal": 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got&^want != 0 {
			t.Errorf("%s mode %v, want at most %v", filepath.Base(p), got, want)
		}
	}
}

func TestOpenDSN(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	t.Setenv("XDG_STATE_HOME", dir)
	cases := []struct {
		dsn    string
		ok     bool
		exists string // file that must exist afterwards
	}{
		{"", true, filepath.Join(dir, "compactd", "archive.db")},
		{"sqlite:" + filepath.Join(dir, "x", "named"), true, filepath.Join(dir, "x", "named")},
		{filepath.Join(dir, "bare.db"), true, filepath.Join(dir, "bare.db")},
		{"sqlite::memory:", true, ""},
		{filepath.Join(dir, "no-suffix"), false, ""},
		{"mysql://x", false, ""},
		{"sqlite:" + filepath.Join(dir, "q?mode=ro"), false, ""},
	}
	for _, tc := range cases {
		st, err := Open(ctx, tc.dsn, newTestSealer())
		if (err == nil) != tc.ok {
			t.Errorf("Open(%q) err = %v, want ok=%v", tc.dsn, err, tc.ok)
			continue
		}
		if err != nil {
			continue
		}
		if _, err := st.Put(ctx, Segment{Conversation: "c", Items: plantedItems()}); err != nil {
			t.Errorf("Open(%q): Put: %v", tc.dsn, err)
		}
		if hits, err := st.Search(ctx, Query{Text: "48213"}); err != nil || len(hits) != 1 {
			t.Errorf("Open(%q): Search = %v, %v", tc.dsn, hits, err)
		}
		st.Close()
		if tc.exists != "" {
			if _, err := os.Stat(tc.exists); err != nil {
				t.Errorf("Open(%q): %v", tc.dsn, err)
			}
		}
	}
	if _, err := Open(ctx, "sqlite::memory:", nil); err == nil {
		t.Error("Open with nil Sealer succeeded")
	}
}

// TestOpenExistingSQLite: issue 22, item 15: a read-only command on a mistyped path got a new
// empty archive (and its directories) instead of an error. OpenExisting refuses a missing
// database and creates nothing; an existing one opens.
func TestOpenExistingSQLite(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	for _, tc := range []struct {
		name  string
		setup func(path string) // what is there before
	}{
		{"missing directory", func(string) {}},
		{"missing file", func(p string) { os.MkdirAll(filepath.Dir(p), 0o700) }},
		{"empty file", func(p string) { os.MkdirAll(filepath.Dir(p), 0o700); os.WriteFile(p, nil, 0o600) }},
		{"a directory", func(p string) { os.MkdirAll(p, 0o700) }},
		{"another SQLite database", func(p string) {
			os.MkdirAll(filepath.Dir(p), 0o700)
			db, err := sql.Open("sqlite", p)
			if err == nil {
				_, err = db.Exec(`CREATE TABLE notes (body TEXT)`)
				db.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(root, strings.ReplaceAll(tc.name, " ", "-"), "state", "archive.db")
			tc.setup(path)
			before := listTree(t, root)
			st, err := OpenExisting(ctx, "sqlite:"+path, newTestSealer())
			if err == nil {
				st.Close()
				t.Fatal("opened")
			}
			if !errors.Is(err, ErrNoArchive) || !strings.Contains(err.Error(), path) {
				t.Errorf("err = %v, want ErrNoArchive naming the path", err)
			}
			if after := listTree(t, root); !slices.Equal(before, after) {
				t.Errorf("files changed:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
	t.Run("existing archive", func(t *testing.T) {
		path := filepath.Join(root, "real 100%25", "archive.db") // SQLite's URI form must not decode %25
		st, err := Open(ctx, path, newTestSealer())
		if err != nil {
			t.Fatal(err)
		}
		ref, err := st.Put(ctx, Segment{Conversation: "c", Items: plantedItems()})
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		st, err = OpenExisting(ctx, path, newTestSealer())
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if _, err := st.Get(ctx, "", ref.ID); err != nil {
			t.Error(err)
		}
	})
}

// listTree lists every path under root with its size.
func listTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %d", p, info.Size()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
