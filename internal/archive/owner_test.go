package archive

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
)

// Owners: every segment and memo row carries the owner digest of the request that wrote it, and
// the proxy's reads name the owners they may read (Query.Owners, the memo's owner argument).

const (
	ownerA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	ownerB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func testOwners(t *testing.T, open func(t *testing.T) Store) {
	ctx := context.Background()

	t.Run("SearchIsScopedToOwners", func(t *testing.T) {
		st := open(t)
		// Two credentials that used the same session label, and a segment from before owners.
		for _, seg := range []Segment{
			{Conversation: "sess-1", Owner: ownerA, Items: []json.RawMessage{msg("user", "victim secret quartzite")}},
			{Conversation: "sess-1", Owner: ownerB, Items: []json.RawMessage{msg("user", "attacker note quartzite")}},
			{Conversation: "sess-1", Owner: "", Items: []json.RawMessage{msg("user", "legacy quartzite")}},
		} {
			if _, err := st.Put(ctx, seg); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			name   string
			owners []string
			want   []string
		}{
			{"operator: every owner", nil, []string{"", ownerA, ownerB}},
			{"owner A", []string{ownerA}, []string{ownerA}},
			{"owner B", []string{ownerB}, []string{ownerB}},
			{"A with a legacy item's vouching", []string{ownerA, ""}, []string{"", ownerA}},
			{"no owner", []string{}, nil},
			{"a stranger", []string{"cccccccccccccccccccccccccccccccc"}, nil},
		} {
			hits, err := st.Search(ctx, Query{Text: "quartzite", Conversation: "sess-1", Owners: tc.owners, Limit: 10})
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			var got []string
			for _, h := range hits {
				got = append(got, h.Owner)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s: owners of hits %q, want %q", tc.name, got, tc.want)
			}
		}
		if _, err := st.Search(ctx, Query{Text: "quartzite", Owners: make([]string, maxQueryOwners+1)}); err == nil {
			t.Error("a search naming too many owners was run")
		}
	})

	t.Run("OwnerColumnIsIntegrityProtected", func(t *testing.T) {
		st := open(t)
		ref, err := st.Put(ctx, Segment{Conversation: "c", Owner: ownerA, Items: plantedItems()})
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.Get(ctx, "", ref.ID)
		if err != nil || got.Owner != ownerA {
			t.Fatalf("Get: owner %q, %v", got.Owner, err)
		}
		s := st.(*sqlStore)
		if _, err := s.db.ExecContext(ctx, s.q(`UPDATE archive_segments SET owner = ? WHERE id = ?`), ownerB, ref.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Get(ctx, "", ref.ID); err == nil {
			t.Error("a segment whose owner column was rewritten still opened")
		}
		if _, err := st.Put(ctx, Segment{Conversation: "c", Owner: string(make([]byte, maxOwner+1)), Items: plantedItems()}); err == nil {
			t.Error("an oversized owner was stored")
		}
	})

	t.Run("MemoIsScopedToOwners", func(t *testing.T) {
		m := memoT(t, open(t), MemoOptions{})
		c := chain("conv", 4)
		if err := m.PutCompaction(ctx, MemoRecord{Owner: ownerA, Conversation: "sess-1", Dialect: "messages", Prefix: c[3], Items: 4, Blob: blob("a")}); err != nil {
			t.Fatal(err)
		}
		if err := m.PutSpeculative(ctx, MemoRecord{Owner: ownerA, Conversation: "sess-1", Dialect: "messages", Model: "m", Prefix: c[3], Items: 4, Blob: blob("s")}); err != nil {
			t.Fatal(err)
		}
		if r, ok, err := m.LookupLongest(ctx, "", ownerA, "messages", newestFirst(c)); !ok || err != nil || r.Conversation != "sess-1" {
			t.Errorf("owner A: LookupLongest ok=%v err=%v %+v", ok, err, r)
		}
		for _, o := range []string{ownerB, ""} {
			if _, ok, err := m.LookupLongest(ctx, "", o, "messages", newestFirst(c)); ok || err != nil {
				t.Errorf("owner %q found owner A's record (ok=%v err=%v)", o, ok, err)
			}
			if _, ok, err := m.GetSpeculative(ctx, "", o, "messages", "m", c[3]); ok || err != nil {
				t.Errorf("owner %q found owner A's speculative summary (ok=%v err=%v)", o, ok, err)
			}
		}
	})

	t.Run("DeleteConversationDeletesItsMemo", func(t *testing.T) {
		st := open(t)
		m := memoT(t, st, MemoOptions{})
		if _, err := st.Put(ctx, Segment{Conversation: "gone", Owner: ownerA, Items: plantedItems()}); err != nil {
			t.Fatal(err)
		}
		cg, ck := chain("gone", 2), chain("kept", 2)
		for _, r := range []MemoRecord{
			{Owner: ownerA, Conversation: "gone", Dialect: "responses", Prefix: cg[1], Items: 2, Blob: blob("g")},
			{Owner: ownerB, Conversation: "gone", Dialect: "responses", Prefix: cg[0], Items: 1, Blob: blob("g2")},
			{Owner: ownerA, Conversation: "kept", Dialect: "responses", Prefix: ck[1], Items: 2, Blob: blob("k")},
		} {
			if err := m.PutCompaction(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.PutSpeculative(ctx, MemoRecord{Owner: ownerA, Conversation: "gone", Dialect: "responses", Model: "m", Prefix: cg[1], Items: 2, Blob: blob("s")}); err != nil {
			t.Fatal(err)
		}
		n, err := st.DeleteConversation(ctx, "", "gone")
		if err != nil || n != 1 {
			t.Fatalf("DeleteConversation = %d, %v; want 1 segment", n, err)
		}
		if _, ok, _ := m.LookupLongest(ctx, "", ownerA, "responses", newestFirst(cg)); ok {
			t.Error("the deleted conversation's memo record is still handed out")
		}
		if _, ok, _ := m.LookupLongest(ctx, "", ownerB, "responses", newestFirst(cg)); ok {
			t.Error("another owner's record of the deleted conversation survived")
		}
		if _, ok, _ := m.GetSpeculative(ctx, "", ownerA, "responses", "m", cg[1]); ok {
			t.Error("the deleted conversation's speculative summary survived")
		}
		if _, ok, _ := m.LookupLongest(ctx, "", ownerA, "responses", newestFirst(ck)); !ok {
			t.Error("another conversation's record went with it")
		}
	})
}

func TestOwnersSQLite(t *testing.T) { testOwners(t, openSQLiteT) }

func TestOwnersPostgres(t *testing.T) { testOwners(t, postgresOpener(t)) }

// putLegacy writes seg as a build before owners did: the frame's sixth string empty and no owner
// column in the statement.
func putLegacy(t *testing.T, ctx context.Context, db *sql.DB, seg Segment) Ref {
	t.Helper()
	sealer := newTestSealer()
	seg.ID, seg.Tenant, seg.Kind = newSegmentID(), DefaultTenant, KindCompaction
	h := header{ID: seg.ID, Tenant: seg.Tenant, Conversation: seg.Conversation, Kind: seg.Kind, CreatedUS: 1}
	plain := encodePlain(h, seg.Items)
	sealed, err := sealer.SealArchive(pack(plain), seg.ID, seg.Tenant)
	if err != nil {
		t.Fatal(err)
	}
	res, err := db.ExecContext(ctx, `INSERT INTO archive_segments (id, tenant, conversation, kind, created_at, previous, hash, bytes, meta, sealed)
		VALUES (?,?,?,?,?,?,?,?,?,?)`, seg.ID, seg.Tenant, seg.Conversation, seg.Kind, 1, "", hashPlain(plain), len(sealed), "{}", sealed)
	if err != nil {
		t.Fatal(err)
	}
	seq, _ := res.LastInsertId()
	if _, err := db.ExecContext(ctx, `INSERT INTO archive_fts (rowid, doc) VALUES (?, ?)`, seq, newBlindIndex(sealer.IndexKey()).document(seg.Tenant, seg.Items)); err != nil {
		t.Fatal(err)
	}
	return Ref{ID: seg.ID}
}

// TestOwnersMigrateV2: an archive from before owners (schema version 2) gains the owner and memo
// conversation columns on Open; its segments read as owner "", found only by reads that name ""
// (a legacy item's vouching) or no owner at all (operators).
func TestOwnersMigrateV2(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "archive.db")
	db, err := sql.Open("sqlite", path+sqliteParams)
	if err != nil {
		t.Fatal(err)
	}
	v2 := *sqliteDialect
	v2.migrations = v2.migrations[:2]
	old, err := openSQLStore(ctx, db, &v2, newTestSealer(), true)
	if err != nil {
		t.Fatal(err)
	}
	ref := putLegacy(t, ctx, db, Segment{Conversation: "c", Items: plantedItems()})
	old.Close()

	st := openPath(t, path)
	seg, err := st.Get(ctx, "", ref.ID)
	if err != nil || seg.Owner != "" {
		t.Fatalf("legacy segment after the migration: owner %q, %v", seg.Owner, err)
	}
	for _, tc := range []struct {
		owners []string
		want   int
	}{{nil, 1}, {[]string{""}, 1}, {[]string{ownerA}, 0}} {
		hits, err := st.Search(ctx, Query{Text: "ERR_QUOTA_EXHAUSTED", Owners: tc.owners})
		if err != nil || len(hits) != tc.want {
			t.Errorf("owners %q: %d hits, %v; want %d", tc.owners, len(hits), err, tc.want)
		}
	}
	var v int
	if err := st.(*sqlStore).db.QueryRow(`SELECT version FROM archive_schema`).Scan(&v); err != nil || v != len(sqliteDialect.migrations) {
		t.Errorf("schema version %d, %v; want %d", v, err, len(sqliteDialect.migrations))
	}
}
