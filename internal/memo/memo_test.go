package memo

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/dialect"
)

func openMemo(t *testing.T, path string) *Store {
	t.Helper()
	k, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := crypto.NewKeyring(k)
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := archive.KeyringSealer(ring, "")
	if err != nil {
		t.Fatal(err)
	}
	st, err := archive.Open(context.Background(), "sqlite:"+path, sealer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := NewStore(st, archive.MemoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func claudeRequests(t *testing.T) [][]json.RawMessage {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(claudeCaptureDir, "*_messages.json"))
	if err != nil || len(files) < 4 {
		t.Fatalf("captures: %d, %v", len(files), err)
	}
	var out [][]json.RawMessage
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, items(t, b, "messages"))
	}
	return out
}

// TestMemoOverClaudeCodeSession plays the engine over the captured Claude Code session: a
// compaction recorded on one request is found on every later request of the session (whose
// earlier turns Claude Code re-serialised), a second compaction chains past it and then wins,
// and another tenant never sees either.
func TestMemoOverClaudeCodeSession(t *testing.T) {
	ctx := context.Background()
	reqs := claudeRequests(t)
	m := openMemo(t, filepath.Join(t.TempDir(), "archive.db"))
	k := Key{Tenant: "acme", Dialect: dialect.Messages}

	// Request 1 records its two messages. Claude Code sent the second one (the system-role
	// turn) as a one-block list with cache_control there and as a plain string in every later
	// request: only the canonical hash makes the later requests find it.
	l, err := Find(ctx, m, k, reqs[0])
	if err != nil || l.Hit {
		t.Fatalf("first lookup: hit=%v err=%v", l.Hit, err)
	}
	if err := m.Record(ctx, k, l.Prefixes[1], 2, []byte("compaction-0")); err != nil {
		t.Fatal(err)
	}
	// Request 3 (6 messages) crosses the threshold: the first 4 messages are compacted.
	l, err = Find(ctx, m, k, reqs[2])
	if err != nil || !l.Hit || l.Entry.Items != 2 || !bytes.Equal(l.Entry.Compaction, []byte("compaction-0")) {
		t.Fatalf("request 3: hit=%v err=%v entry=%+v", l.Hit, err, l.Entry)
	}
	if err := m.Record(ctx, k, l.Prefixes[3], 4, []byte("compaction-1")); err != nil {
		t.Fatal(err)
	}
	for i := 3; i < len(reqs); i++ {
		l, err := Find(ctx, m, k, reqs[i])
		if err != nil || !l.Hit || l.Entry.Items != 4 || !bytes.Equal(l.Entry.Compaction, []byte("compaction-1")) {
			t.Fatalf("request %d: hit=%v err=%v entry=%+v", i+1, l.Hit, err, l.Entry)
		}
		if i == 4 {
			// Request 5 grew past the threshold again: compact through message 8.
			if err := m.Record(ctx, k, l.Prefixes[7], 8, []byte("compaction-2")); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	l, err = Find(ctx, m, k, reqs[5])
	if err != nil || !l.Hit || l.Entry.Items != 8 || !bytes.Equal(l.Entry.Compaction, []byte("compaction-2")) {
		t.Fatalf("last request: hit=%v err=%v entry=%+v", l.Hit, err, l.Entry)
	}
	// A request shorter than the second compaction (6 messages) still finds the first.
	if l, _ := Find(ctx, m, k, reqs[2]); !l.Hit || l.Entry.Items != 4 {
		t.Errorf("request 3 after the second compaction: %+v", l.Entry)
	}
	if l, err := Find(ctx, m, Key{Tenant: "globex", Dialect: dialect.Messages}, reqs[5]); l.Hit || err != nil {
		t.Errorf("another tenant: hit=%v err=%v", l.Hit, err)
	}
	if l, err := Find(ctx, m, Key{Tenant: "acme", Dialect: dialect.Responses}, reqs[5]); l.Hit || err != nil {
		t.Errorf("another dialect: hit=%v err=%v", l.Hit, err)
	}

	// Speculative summaries by (model, prefix).
	if err := m.PutSpeculative(ctx, k, "claude-haiku", l.Prefixes[9], 10, []byte("spec")); err != nil {
		t.Fatal(err)
	}
	if s, ok, err := m.Speculative(ctx, k, "claude-haiku", l.Prefixes[9]); err != nil || !ok || string(s) != "spec" {
		t.Errorf("Speculative = %q %v %v", s, ok, err)
	}
	if _, ok, err := m.Speculative(ctx, k, "claude-haiku", l.Prefixes[8]); ok || err != nil {
		t.Errorf("speculative summary for another prefix: ok=%v err=%v", ok, err)
	}
}

// TestFindWithBadItem: an item that does not canonicalise ends the chain there; the prefixes
// before it are still looked up and the error comes back for the metrics.
func TestFindWithBadItem(t *testing.T) {
	ctx := context.Background()
	m := openMemo(t, filepath.Join(t.TempDir(), "archive.db"))
	k := Key{Dialect: dialect.Messages}
	good := []json.RawMessage{json.RawMessage(`{"role":"user","content":"a"}`), json.RawMessage(`{"role":"assistant","content":"b"}`)}
	ps, _ := Prefixes(dialect.Messages, good)
	if err := m.Record(ctx, k, ps[1], 2, []byte("c")); err != nil {
		t.Fatal(err)
	}
	l, err := Find(ctx, m, k, append(good, json.RawMessage(`{"role":`)))
	if err == nil || !l.Hit || l.Entry.Items != 2 || len(l.Prefixes) != 2 {
		t.Errorf("hit=%v items=%d prefixes=%d err=%v", l.Hit, l.Entry.Items, len(l.Prefixes), err)
	}
}
