package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/archive"
)

// recordingStore is a real store that remembers what the indexer wrote to it.
type recordingStore struct {
	archive.Store
	mu      sync.Mutex
	puts    [][]json.RawMessage
	deletes int
}

func (r *recordingStore) Put(ctx context.Context, s archive.Segment) (archive.Ref, error) {
	r.mu.Lock()
	r.puts = append(r.puts, s.Items)
	r.mu.Unlock()
	return r.Store.Put(ctx, s)
}

func (r *recordingStore) DeleteConversation(ctx context.Context, tenant, conv string) (int, error) {
	r.mu.Lock()
	r.deletes++
	r.mu.Unlock()
	return r.Store.DeleteConversation(ctx, tenant, conv)
}

// take returns and forgets what was written since the last call.
func (r *recordingStore) take() ([][]json.RawMessage, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, d := r.puts, r.deletes
	r.puts, r.deletes = nil, 0
	return p, d
}

// record is one Claude Code transcript line carrying text.
func record(id, text string) string {
	b, _ := json.Marshal(map[string]any{"type": "user", "sessionId": id, "cwd": "/work", "timestamp": "2026-12-01T09:00:00Z",
		"message": map[string]any{"role": "user", "content": text}})
	return string(b)
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// TestSearchIndexesOnlyTheNewPart is the brief's case through the MCP tool: a second search after
// the session log grew reads and archives only the lines appended since the first, and still
// finds the facts of both parts.
func TestSearchIndexesOnlyTheNewPart(t *testing.T) {
	dir := t.TempDir()
	p := writeSession(t, dir, "s1", "ALPHA_FACT=1")
	rec := &recordingStore{Store: openStore(t)}
	cs := connect(t, Options{Store: rec, SessionDirs: []string{dir}})
	if out, _ := call(t, cs, ToolSearch, map[string]any{"query": "ALPHA_FACT"}); !strings.Contains(out, "ALPHA_FACT=1") {
		t.Fatalf("first search: %q", out)
	}
	if puts, _ := rec.take(); len(puts) != 1 || len(puts[0]) != 3 {
		t.Fatalf("first search archived %d segments, want the whole 3-line log in one", len(puts))
	}
	line := record("s1", "the deploy target is GAMMA_FACT=4")
	appendTo(t, p, line+"\n")
	if out, _ := call(t, cs, ToolSearch, map[string]any{"query": "GAMMA_FACT"}); !strings.Contains(out, "GAMMA_FACT=4") {
		t.Fatalf("second search: %q", out)
	}
	puts, deletes := rec.take()
	if deletes != 0 || len(puts) != 1 || len(puts[0]) != 1 || string(puts[0][0]) != line {
		t.Fatalf("second search: %d deletes, segments %q; want no delete and one segment of just the appended line", deletes, puts)
	}
	if out, _ := call(t, cs, ToolSearch, map[string]any{"query": "ALPHA_FACT"}); !strings.Contains(out, "ALPHA_FACT=1") {
		t.Errorf("the first part is no longer found: %q", out)
	}
	if puts, _ := rec.take(); len(puts) != 0 {
		t.Errorf("a search with nothing new archived %d segments", len(puts))
	}
}

// TestIndexerAppendRewriteRestart covers the other cases of the incremental index: a line being
// written is left for the next pass, a rewritten log is re-indexed whole, the state survives a
// restart, and appends past maxSegments fold the session back into one segment.
func TestIndexerAppendRewriteRestart(t *testing.T) {
	dir := t.TempDir()
	p := writeSession(t, dir, "s1", "ALPHA_FACT=1")
	rec := &recordingStore{Store: openStore(t)}
	state := filepath.Join(t.TempDir(), "state.json")
	ix := &Indexer{Store: rec, Tenant: archive.DefaultTenant, Dirs: []string{dir}, StatePath: state}
	ctx := context.Background()
	refresh := func(step string) Stats {
		t.Helper()
		st, err := ix.RefreshStats(ctx)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return st
	}
	size := func() int64 {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return info.Size()
	}
	refresh("first pass")
	rec.take()

	// A record half written: the complete line is indexed, the partial one waits.
	done, partial := record("s1", "DELTA_FACT=5"), record("s1", "EPSILON_FACT=6")
	before := size()
	appendTo(t, p, done+"\n"+partial[:10])
	st := refresh("partial line")
	puts, deletes := rec.take()
	if st.Appended != 1 || st.BytesRead != size()-before || deletes != 0 || len(puts) != 1 || len(puts[0]) != 1 || string(puts[0][0]) != done {
		t.Fatalf("partial line: %+v, %d deletes, segments %q; want only %q read past the old end", st, deletes, puts, done)
	}
	appendTo(t, p, partial[10:]+"\n")
	refresh("line completed")
	if puts, _ := rec.take(); len(puts) != 1 || len(puts[0]) != 1 || string(puts[0][0]) != partial {
		t.Fatalf("completed line: segments %q, want the whole line %q", puts, partial)
	}

	// After a restart the saved state still tells an append from a rewrite.
	ix = &Indexer{Store: rec, Tenant: archive.DefaultTenant, Dirs: []string{dir}, StatePath: state}
	if st := refresh("restart, nothing new"); st.Logs != 0 {
		t.Errorf("restart re-indexed %d logs", st.Logs)
	}
	appendTo(t, p, record("s1", "ZETA_FACT=7")+"\n")
	if st := refresh("restart, append"); st.Appended != 1 {
		t.Errorf("append after a restart: %+v, want incremental", st)
	}
	rec.take()

	// A rewritten log (its indexed bytes changed) is re-indexed whole, replacing the old copy.
	writeSession(t, dir, "s1", "ALPHA_FACT=2")
	appendTo(t, p, record("s1", "ETA_FACT=8")+"\n")
	st = refresh("rewrite")
	puts, deletes = rec.take()
	if st.Appended != 0 || deletes != 1 || len(puts) != 1 || len(puts[0]) != 4 {
		t.Fatalf("rewrite: %+v, %d deletes, %d segments; want one whole re-index", st, deletes, len(puts))
	}
	hits, err := rec.Search(ctx, archive.Query{Text: "ALPHA_FACT", Kind: archive.KindSession, Limit: 10})
	if err != nil || len(hits) != 1 || !strings.Contains(hits[0].Excerpt, "ALPHA_FACT=2") {
		t.Errorf("after the rewrite, want only the new copy: %+v, %v", hits, err)
	}

	// Appends fold back into one segment once the conversation has maxSegments.
	for i := 1; i < maxSegments; i++ {
		appendTo(t, p, record("s1", fmt.Sprintf("N_%d", i))+"\n")
		refresh("append")
	}
	rec.take()
	appendTo(t, p, record("s1", "LAST")+"\n")
	st = refresh("past the cap")
	if puts, deletes := rec.take(); st.Appended != 0 || deletes != 1 || len(puts) != 1 || len(puts[0]) != 4+maxSegments {
		t.Errorf("past %d segments: %+v, %d deletes, %d segments; want one whole re-index", maxSegments, st, deletes, len(puts))
	}
}

// codexRollout writes a Codex rollout recorded in cwd whose only copy of fact is a command output.
func codexRollout(t *testing.T, dir, id, cwd, fact string) string {
	t.Helper()
	lines := []string{
		fmt.Sprintf(`{"type":"session_meta","payload":{"id":%q,"cwd":%q,"timestamp":"2026-12-01T09:00:00Z"}}`, id, cwd),
		`{"type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"cat notes.txt\"}","call_id":"c1"}}`,
		fmt.Sprintf(`{"type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":%q}}`, fact),
	}
	p := filepath.Join(dir, "2026", "12", "01", "rollout-"+id+".jsonl")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSharedDirsKeepThisProject: Codex keeps every project's rollouts in one tree; search and
// resume_prompt see only those recorded in this project (or below it), not a sibling whose path
// merely starts the same.
func TestSharedDirsKeepThisProject(t *testing.T) {
	codex := t.TempDir()
	codexRollout(t, codex, "r-here", "/work/proj", "HERE_FACT=1")
	codexRollout(t, codex, "r-sub", "/work/proj/sub", "SUB_FACT=2")
	other := codexRollout(t, codex, "r-other", "/work/proj-other", "OTHER_FACT=3")
	later := time.Now().Add(time.Hour)
	os.Chtimes(other, later, later) // the newest log is another project's
	cs := connect(t, Options{Store: openStore(t), SharedSessionDirs: []string{codex}, Project: "/work/proj"})
	for _, tc := range []struct {
		query string
		found bool
	}{
		{"HERE_FACT", true}, {"SUB_FACT", true}, {"OTHER_FACT", false},
	} {
		out, _ := call(t, cs, ToolSearch, map[string]any{"query": tc.query})
		if got := strings.Contains(out, tc.query+"="); got != tc.found {
			t.Errorf("search %s: found %v, want %v:\n%s", tc.query, got, tc.found, out)
		}
	}
	if out, _ := call(t, cs, ToolResume, map[string]any{}); strings.Contains(out, "OTHER_FACT") || !strings.Contains(out, "_FACT") {
		t.Errorf("resume_prompt picked another project's session:\n%s", out)
	}
	// Another project's rollouts are remembered as seen, also when nothing of this project
	// changed, so that a restart does not open them again.
	state := filepath.Join(t.TempDir(), "state.json")
	ix := &Indexer{Store: openStore(t), Tenant: archive.DefaultTenant, SharedDirs: []string{codex}, Project: "/work/none"}
	ix.StatePath = state
	if st, err := ix.RefreshStats(context.Background()); err != nil || st.Logs != 0 {
		t.Fatalf("no log is this project's: %+v, %v", st, err)
	}
	if b, err := os.ReadFile(state); err != nil || !strings.Contains(string(b), "r-other") {
		t.Errorf("the state does not remember the other projects' rollouts: %s, %v", b, err)
	}
	for _, tc := range []struct {
		dir, project string
		want         bool
	}{
		{"/a/b", "/a/b", true}, {"/a/b/c", "/a/b", true}, {"/a/bc", "/a/b", false}, {"/a", "/a/b", false}, {"/a/b", "/a/b/", true},
	} {
		if got := within(tc.dir, filepath.Clean(tc.project)); got != tc.want {
			t.Errorf("within(%s, %s) = %v", tc.dir, tc.project, got)
		}
	}
}
