package mcpserver

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/crypto"
)

func openStore(t *testing.T) archive.Store {
	t.Helper()
	dir := t.TempDir()
	ring, _, err := crypto.LoadKeyring(crypto.LoadOptions{DataDir: dir, Generate: true})
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
	t.Cleanup(func() { store.Close() })
	return store
}

// writeSession writes a Claude Code transcript whose only copy of the fact is a Read result.
func writeSession(t *testing.T, dir, id, fact string) string {
	t.Helper()
	rec := func(v map[string]any) string {
		v["sessionId"], v["cwd"], v["timestamp"] = id, "/work", "2026-12-01T09:00:00Z"
		b, _ := json.Marshal(v)
		return string(b)
	}
	lines := []string{
		rec(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": "read the notes"}}),
		rec(map[string]any{"type": "assistant", "message": map[string]any{"role": "assistant", "content": []any{
			map[string]any{"type": "tool_use", "id": "t1", "name": "Read", "input": map[string]any{"file_path": "/work/notes.txt"}}}}}),
		rec(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "tool_result", "tool_use_id": "t1", "content": "     1\t" + fact}}}}),
	}
	p := filepath.Join(dir, id+".jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// connect runs the server and a client of the SDK over the in-memory transport.
func connect(t *testing.T, o Options) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(o).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

func TestToolsListed(t *testing.T) {
	cs := connect(t, Options{Store: openStore(t)})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, tool := range res.Tools {
		got[tool.Name] = true
	}
	for _, want := range []string{ToolSearch, ToolRecall, ToolResume} {
		if !got[want] {
			t.Errorf("tool %s not listed (got %v)", want, got)
		}
	}
}

func TestSearchSessions(t *testing.T) {
	dir := t.TempDir()
	writeSession(t, dir, "s-old", "listen_port: 7431 (SECRET_FACT_PORT=7431)")
	store := openStore(t)
	state := filepath.Join(t.TempDir(), "state.json")
	cs := connect(t, Options{Store: store, SessionDirs: []string{dir}, StatePath: state})
	for _, tc := range []struct {
		name, query, want string
		isErr             bool
	}{
		{"the fact from a tool output", "SECRET_FACT_PORT", "7431", false},
		{"no match", "nothingmatcheszzz", "No earlier session", false},
		{"empty query", "  ", "query is empty", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, isErr := call(t, cs, ToolSearch, map[string]any{"query": tc.query})
			if isErr != tc.isErr || !strings.Contains(out, tc.want) {
				t.Errorf("search %q = %q (error %v), want %q", tc.query, out, isErr, tc.want)
			}
		})
	}
}

// TestIndexIncremental: a refresh indexes only the logs that changed since the last one, and the
// state survives a restart (a new Indexer with the same StatePath).
func TestIndexIncremental(t *testing.T) {
	dir := t.TempDir()
	writeSession(t, dir, "a", "ALPHA=1")
	writeSession(t, dir, "b", "BETA=2")
	store := openStore(t)
	state := filepath.Join(t.TempDir(), "state.json")
	ix := &Indexer{Store: store, Tenant: archive.DefaultTenant, Dirs: []string{dir}, StatePath: state}
	ctx := context.Background()
	steps := []struct {
		name   string
		change func()
		want   int
	}{
		{"first pass indexes all", func() {}, 2},
		{"nothing changed", func() {}, 0},
		{"one log grew", func() {
			p := writeSession(t, dir, "b", "BETA=3")
			later := time.Now().Add(time.Minute)
			os.Chtimes(p, later, later)
		}, 1},
		{"restart keeps the state", func() {
			ix = &Indexer{Store: store, Tenant: archive.DefaultTenant, Dirs: []string{dir}, StatePath: state}
		}, 0},
	}
	for _, s := range steps {
		s.change()
		n, err := ix.Refresh(ctx)
		if err != nil || n != s.want {
			t.Errorf("%s: indexed %d (%v), want %d", s.name, n, err, s.want)
		}
	}
	hits, err := store.Search(ctx, archive.Query{Text: "BETA", Kind: archive.KindSession})
	if err != nil || len(hits) != 1 || !strings.Contains(hits[0].Excerpt, "BETA=3") {
		t.Errorf("after the re-index, want the one new copy of b: %+v, %v", hits, err)
	}
}

func TestRecall(t *testing.T) {
	store := openStore(t)
	ctx := context.Background()
	_, err := store.Put(ctx, archive.Segment{Conversation: "conv-1", Kind: archive.KindCompaction,
		Items: []json.RawMessage{json.RawMessage(`{"type":"function_call_output","call_id":"c","output":"DEPLOY_REGION=eu-west-3"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    Options
		args map[string]any
		want string
	}{
		{"default conversation", Options{Store: store, Conversation: "conv-1"}, map[string]any{"query": "DEPLOY_REGION"}, "eu-west-3"},
		{"any conversation", Options{Store: store}, map[string]any{"query": "DEPLOY_REGION"}, "eu-west-3"},
		{"other conversation", Options{Store: store}, map[string]any{"query": "DEPLOY_REGION", "conversation": "conv-2"}, "Nothing archived"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _ := call(t, connect(t, tc.o), ToolRecall, tc.args)
			if !strings.Contains(out, tc.want) {
				t.Errorf("recall = %q, want %q", out, tc.want)
			}
		})
	}
}

func TestResumePrompt(t *testing.T) {
	dir := t.TempDir()
	writeSession(t, dir, "s1", "SECRET_FACT_PORT=7431")
	cs := connect(t, Options{Store: openStore(t), SessionDirs: []string{dir}})
	out, isErr := call(t, cs, ToolResume, map[string]any{})
	if isErr || !strings.Contains(out, "# Resume") || !strings.Contains(out, "SECRET_FACT_PORT=7431") {
		t.Errorf("resume_prompt = %q (error %v)", out, isErr)
	}
	out, isErr = call(t, cs, ToolResume, map[string]any{"session_id": "nope"})
	if !isErr || !strings.Contains(out, "nope") {
		t.Errorf("unknown session: %q (error %v)", out, isErr)
	}
}

// TestRecallCurrentSession: with the server's conversation set (the agent's current session),
// recall answers from that session's compactions only; when the session has nothing matching it
// says so and answers from the rest of the archive; a conversation the caller names is searched
// alone, without that fallback.
func TestRecallCurrentSession(t *testing.T) {
	store := openStore(t)
	ctx := context.Background()
	for conv, out := range map[string]string{"sess-A": "PORT_VALUE=7431 in A", "sess-B": "PORT_VALUE=9999 in B; ONLY_IN_B=1"} {
		if _, err := store.Put(ctx, archive.Segment{Conversation: conv, Kind: archive.KindCompaction,
			Items: []json.RawMessage{json.RawMessage(`{"type":"function_call_output","call_id":"c","output":"` + out + `"}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	cs := connect(t, Options{Store: store, Conversation: "sess-A"})
	for _, tc := range []struct {
		name         string
		args         map[string]any
		want, absent []string
	}{
		{"current session only", map[string]any{"query": "PORT_VALUE"}, []string{"7431"}, []string{"9999", "other conversations"}},
		{"falls back to the archive", map[string]any{"query": "ONLY_IN_B"}, []string{"Nothing archived for this session (sess-A)", "ONLY_IN_B=1"}, nil},
		{"named conversation, no fallback", map[string]any{"query": "ONLY_IN_B", "conversation": "sess-C"}, []string{"Nothing archived matches"}, []string{"ONLY_IN_B=1"}},
		{"named conversation", map[string]any{"query": "PORT_VALUE", "conversation": "sess-B"}, []string{"9999"}, []string{"7431"}},
	} {
		out, _ := call(t, cs, ToolRecall, tc.args)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: recall = %q, want %q", tc.name, out, w)
			}
		}
		for _, n := range tc.absent {
			if strings.Contains(out, n) {
				t.Errorf("%s: recall = %q, must not contain %q", tc.name, out, n)
			}
		}
	}
}
