package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/crypto"
)

// captureStdout runs f and returns what it printed to standard output.
func captureStdout(t *testing.T, f func() error) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	ferr := f()
	os.Stdout = old
	w.Close()
	out := <-done
	if ferr != nil {
		t.Fatalf("command failed: %v\n%s", ferr, out)
	}
	return out
}

func TestSessionsIndexAndSearch(t *testing.T) {
	dir := t.TempDir()
	// Two Codex sessions with different planted facts, and the Claude fixture.
	for id, fact := range map[string]string{"019a0000-aaaa": "QUOKKA-7731 timeout", "019a0000-bbbb": "WOMBAT-4410 port"} {
		log := `{"timestamp":"2026-03-14T09:30:00.000Z","type":"session_meta","payload":{"id":"` + id + `","cwd":"/w","cli_version":"0.169.0","timestamp":"2026-03-14T09:30:00Z"}}
{"timestamp":"2026-03-14T09:30:01.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"fix the ` + fact + ` bug"}]}}
`
		if err := os.WriteFile(filepath.Join(dir, "rollout-"+id+".jsonl"), []byte(log), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fixture, err := os.ReadFile("../../internal/session/testdata/sessions/claude-session.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "claude.jsonl"), fixture, 0o600); err != nil {
		t.Fatal(err)
	}
	k, _ := crypto.GenerateKey()
	common := []string{"--keys", k.String(), "--data-dir", t.TempDir()}

	out := captureStdout(t, func() error { return runSessions(append(append([]string{}, common...), "index", dir)) })
	if n := strings.Count(out, "indexed "); n != 3 {
		t.Fatalf("indexed %d sessions, want 3:\n%s", n, out)
	}
	// Indexing again replaces rather than duplicates.
	captureStdout(t, func() error { return runSessions(append(append([]string{}, common...), "index", dir)) })

	out = captureStdout(t, func() error { return runSessions(append(append([]string{}, common...), "search", "WOMBAT-4410")) })
	if !strings.HasPrefix(out, "019a0000-bbbb  2026-03-14T09:30:00Z") || strings.Contains(out, "019a0000-aaaa") {
		t.Errorf("search printed:\n%s", out)
	}
	if strings.Count(out, "019a0000-bbbb") != 1 {
		t.Errorf("re-indexing duplicated the session:\n%s", out)
	}
	if !strings.Contains(out, "WOMBAT-4410") {
		t.Errorf("excerpt lacks the match:\n%s", out)
	}
}
