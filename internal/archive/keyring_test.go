package archive_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/crypto"
)

// A store opened with the keyring keeps finding what it archived after the keys rotate, as long
// as the index key is pinned and the old key stays in the ring as retired.
func TestKeyringSealerAcrossRotation(t *testing.T) {
	k1, _ := crypto.GenerateKey()
	k2, _ := crypto.GenerateKey()
	before, _ := crypto.NewKeyring(k1)
	after, _ := crypto.NewKeyring(k2, k1)
	dsn := filepath.Join(t.TempDir(), "archive.db")
	ctx := context.Background()

	s1, err := archive.KeyringSealer(before, k1.ID)
	if err != nil {
		t.Fatal(err)
	}
	st, err := archive.Open(ctx, dsn, s1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := st.Put(ctx, archive.Segment{Conversation: "c1", Items: []json.RawMessage{json.RawMessage(`{"type":"message","role":"user","content":"the port is 8443"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()

	s2, err := archive.KeyringSealer(after, k1.ID)
	if err != nil {
		t.Fatal(err)
	}
	st, err = archive.Open(ctx, dsn, s2)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Get(ctx, "", ref.ID); err != nil {
		t.Fatalf("segment sealed before rotation does not open: %v", err)
	}
	hits, err := st.Search(ctx, archive.Query{Text: "port 8443", Conversation: "c1"})
	if err != nil || len(hits) != 1 {
		t.Fatalf("search after rotation: %v hits, err %v", len(hits), err)
	}
	if _, err := archive.KeyringSealer(after, "missing"); err == nil {
		t.Error("an index key id not in the ring was accepted")
	}
}
