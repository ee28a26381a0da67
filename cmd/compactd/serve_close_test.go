package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestServeClosesTheArchiveOnSIGTERM: serve closes the proxy (and with it the archive) after
// draining. SQLite shows it: a WAL-mode database's -wal file exists while a connection is open
// and is checkpointed away when the last one closes cleanly; a process that exits without
// closing leaves it behind.
func TestServeClosesTheArchiveOnSIGTERM(t *testing.T) {
	db := filepath.Join(t.TempDir(), "archive.db")
	r := startReplica(t, "a", "http://127.0.0.1:1", newKey(t, "k1").String(), "--archive", "sqlite:"+db, "--archive-max-bytes", "1000000")
	if _, err := os.Stat(db + "-wal"); err != nil {
		t.Fatalf("while serving: %v (the test needs the WAL to exist while the archive is open)", err)
	}
	r.stop(t)
	if _, err := os.Stat(db + "-wal"); !os.IsNotExist(err) {
		t.Errorf("after SIGTERM the archive's WAL is still there (stat: %v): serve exited without closing the archive", err)
	}
}
