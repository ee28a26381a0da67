package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestWatcherScan drives the watcher with explicit times, so the idle and growth rules are tested
// without sleeping.
func TestWatcherScan(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "2026", "03", "14", "rollout-old.jsonl")
	live := filepath.Join(dir, "2026", "03", "15", "rollout-live.jsonl")
	write := func(p, data string, mod time.Time) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)
	write(old, "old session\n", t0.Add(-time.Hour))
	write(live, "line 1\n", t0)
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	var handled []string
	w := &Watcher{Dir: dir, Idle: time.Minute, MaxBytes: 100, Handle: func(_ context.Context, p string) error {
		handled = append(handled, p)
		return nil
	}}
	scan := func(at time.Time, want ...string) {
		t.Helper()
		handled = nil
		got, err := w.Scan(context.Background(), at)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(handled, want) {
			t.Fatalf("at %s: handled %q (returned %q), want %q", at.Sub(t0), handled, got, want)
		}
	}
	scan(t0)                           // old: idle at start, baselined; live: just changed
	scan(t0.Add(30 * time.Second))     // not idle yet
	scan(t0.Add(61*time.Second), live) // idle for a minute: written once
	scan(t0.Add(10 * time.Minute))     // unchanged since: not again
	write(live, "line 1\nline 2\n", t0.Add(11*time.Minute))
	scan(t0.Add(11 * time.Minute)) // changed: the idle clock restarts
	scan(t0.Add(12*time.Minute+time.Second), live)
	write(live, "line 1\nline 2\n"+string(make([]byte, 120)), t0.Add(13*time.Minute))
	scan(t0.Add(13*time.Minute), live) // grew past MaxBytes: written without waiting
	write(old, "old session\nresumed\n", t0.Add(20*time.Minute))
	scan(t0.Add(20 * time.Minute))
	scan(t0.Add(22*time.Minute), old) // an old session that resumes is watched like any other
}

func TestWatcherHandleErrorNotRetried(t *testing.T) {
	dir := t.TempDir()
	calls := 0
	boom := errors.New("cannot tell the format")
	w := &Watcher{Dir: dir, Idle: time.Second, Handle: func(context.Context, string) error { calls++; return boom }}
	now := time.Now()
	if _, err := w.Scan(context.Background(), now); err != nil { // start on an empty directory
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.jsonl"), []byte("not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Scan(context.Background(), now); err != nil { // new file: its idle clock starts
		t.Fatal(err)
	}
	_, err := w.Scan(context.Background(), now.Add(time.Minute))
	if !errors.Is(err, boom) {
		t.Errorf("err = %v, want %v", err, boom)
	}
	if _, err := w.Scan(context.Background(), now.Add(2*time.Minute)); err != nil || calls != 1 {
		t.Errorf("failed session retried without changing: calls=%d err=%v", calls, err)
	}
}

func TestResumePath(t *testing.T) {
	for in, want := range map[string]string{
		"/a/rollout-x.jsonl": "/a/rollout-x.resume.md",
		"b/s.jsonl":          "b/s.resume.md",
	} {
		if got := ResumePath(in); got != want {
			t.Errorf("ResumePath(%q) = %q, want %q", in, got, want)
		}
	}
}
