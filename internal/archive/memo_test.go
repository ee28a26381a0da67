package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a settable MemoOptions.Now shared by the replicas of a test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// chain stands in for memo.Prefixes: n distinct prefix hashes of one conversation, H_1 first.
func chain(conv string, n int) [][32]byte {
	out := make([][32]byte, n)
	for i := range out {
		out[i] = sha256.Sum256(fmt.Appendf(nil, "%s/%d", conv, i+1))
	}
	return out
}

// newestFirst is what the engine passes: the longest prefix first.
func newestFirst(c [][32]byte) [][32]byte {
	out := make([][32]byte, len(c))
	for i := range c {
		out[len(c)-1-i] = c[i]
	}
	return out
}

func blob(s string) []byte { return []byte("sealed-compaction:" + s) }

func memoT(t *testing.T, st Store, o MemoOptions) *MemoStore {
	t.Helper()
	m, err := NewMemoStore(st, o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func testMemo(t *testing.T, open func(t *testing.T) Store) {
	ctx := context.Background()

	t.Run("LongestPrefixWins", func(t *testing.T) {
		clk := newClock()
		m := memoT(t, open(t), MemoOptions{Now: clk.now})
		c := chain("conv", 12)
		for _, n := range []int{3, 7} {
			if err := m.PutCompaction(ctx, MemoRecord{Tenant: "acme", Dialect: "messages", Prefix: c[n-1], Items: n,
				Blob: blob(fmt.Sprint(n))}); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			name      string
			cands     [][32]byte
			wantItems int
		}{
			{"whole input", newestFirst(c), 7},
			{"input shorter than the longer record", newestFirst(c[:5]), 3},
			{"exactly the longer record", newestFirst(c[:7]), 7},
			{"before the first record", newestFirst(c[:2]), 0},
			{"other conversation", newestFirst(chain("other", 12)), 0},
			{"no candidates", nil, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r, ok, err := m.LookupLongest(ctx, "acme", "", "messages", tc.cands)
				if err != nil {
					t.Fatalf("err = %v (a miss is never an error)", err)
				}
				if tc.wantItems == 0 {
					if ok {
						t.Fatalf("hit %+v, want a miss", r)
					}
					return
				}
				if !ok || r.Items != tc.wantItems || r.Prefix != c[tc.wantItems-1] ||
					!bytes.Equal(r.Blob, blob(fmt.Sprint(tc.wantItems))) {
					t.Fatalf("got ok=%v %+v, want the %d-item record", ok, r, tc.wantItems)
				}
				if r.Tenant != "acme" || r.Dialect != "messages" || r.Kind != MemoCompaction ||
					!r.CreatedAt.Equal(clk.now()) || !r.ExpiresAt.Equal(clk.now().Add(DefaultMemoTTL)) {
					t.Errorf("record fields: %+v", r)
				}
			})
		}
		// Another dialect does not see these records.
		if _, ok, err := m.LookupLongest(ctx, "acme", "", "responses", newestFirst(c)); ok || err != nil {
			t.Errorf("other dialect: ok=%v err=%v", ok, err)
		}
	})

	t.Run("ManyCandidates", func(t *testing.T) {
		// More candidates than one IN batch; the record sits in the third batch.
		m := memoT(t, open(t), MemoOptions{})
		c := chain("long", 3*memoLookupBatch)
		if err := m.PutCompaction(ctx, MemoRecord{Dialect: "responses", Prefix: c[10], Items: 11, Blob: blob("x")}); err != nil {
			t.Fatal(err)
		}
		r, ok, err := m.LookupLongest(ctx, "", "", "responses", newestFirst(c))
		if err != nil || !ok || r.Items != 11 || r.Tenant != DefaultTenant {
			t.Fatalf("ok=%v err=%v %+v", ok, err, r)
		}
	})

	t.Run("TenantBound", func(t *testing.T) {
		st := open(t)
		m := memoT(t, st, MemoOptions{})
		c := chain("shared-prefix", 4)
		if err := m.PutCompaction(ctx, MemoRecord{Tenant: "acme", Dialect: "messages", Prefix: c[3], Items: 4, Blob: blob("acme")}); err != nil {
			t.Fatal(err)
		}
		if err := m.PutSpeculative(ctx, MemoRecord{Tenant: "acme", Dialect: "messages", Model: "m", Prefix: c[3], Items: 4, Blob: blob("spec")}); err != nil {
			t.Fatal(err)
		}
		for _, tenant := range []string{"globex", "", "ACME"} {
			if r, ok, err := m.LookupLongest(ctx, tenant, "", "messages", newestFirst(c)); ok || err != nil {
				t.Errorf("tenant %q: LookupLongest ok=%v err=%v %+v", tenant, ok, err, r)
			}
			if r, ok, err := m.GetSpeculative(ctx, tenant, "", "messages", "m", c[3]); ok || err != nil {
				t.Errorf("tenant %q: GetSpeculative ok=%v err=%v %+v", tenant, ok, err, r)
			}
		}
		// A row moved to another tenant in the database is not found there: its prefix column
		// is keyed per tenant. Moved with the column recomputed (by someone holding the index
		// key), it still does not open: the blob is sealed to its tenant. Either way no hit.
		db := st.(*sqlStore)
		if _, err := db.db.Exec(db.q(`UPDATE memo_records SET tenant = ? WHERE tenant = ?`), "globex", "acme"); err != nil {
			t.Fatal(err)
		}
		if r, ok, err := m.LookupLongest(ctx, "globex", "", "messages", newestFirst(c)); ok || err != nil {
			t.Errorf("moved row: ok=%v err=%v %+v", ok, err, r)
		}
		if _, err := db.db.Exec(db.q(`UPDATE memo_records SET prefix = ? WHERE tenant = ?`), m.col("globex", "", c[3]), "globex"); err != nil {
			t.Fatal(err)
		}
		r, ok, err := m.LookupLongest(ctx, "globex", "", "messages", newestFirst(c))
		if ok || !errors.Is(err, ErrIntegrity) {
			t.Errorf("moved row with its column recomputed: ok=%v err=%v %+v", ok, err, r)
		}
		if _, ok, err := m.GetSpeculative(ctx, "globex", "", "messages", "m", c[3]); ok || !errors.Is(err, ErrIntegrity) {
			t.Errorf("moved speculative row: ok=%v err=%v", ok, err)
		}
	})

	t.Run("SwappedBlobs", func(t *testing.T) {
		// Each blob is sealed to its row: exchanging two rows' blobs makes both fail to open.
		st := open(t)
		m := memoT(t, st, MemoOptions{})
		c := chain("swap", 6)
		for _, n := range []int{3, 6} {
			if err := m.PutCompaction(ctx, MemoRecord{Dialect: "messages", Prefix: c[n-1], Items: n, Blob: blob(fmt.Sprint(n))}); err != nil {
				t.Fatal(err)
			}
		}
		db := st.(*sqlStore)
		var a, b string
		if err := db.db.QueryRow(`SELECT sealed FROM memo_records WHERE items = 3`).Scan(&a); err != nil {
			t.Fatal(err)
		}
		if err := db.db.QueryRow(`SELECT sealed FROM memo_records WHERE items = 6`).Scan(&b); err != nil {
			t.Fatal(err)
		}
		for _, u := range []struct {
			sealed string
			items  int
		}{{b, 3}, {a, 6}} {
			if _, err := db.db.Exec(db.q(`UPDATE memo_records SET sealed = ? WHERE items = ?`), u.sealed, u.items); err != nil {
				t.Fatal(err)
			}
		}
		r, ok, err := m.LookupLongest(ctx, "", "", "messages", newestFirst(c))
		if ok || !errors.Is(err, ErrIntegrity) {
			t.Errorf("swapped blobs: ok=%v err=%v %+v", ok, err, r)
		}
	})

	t.Run("TamperedRowIsSkipped", func(t *testing.T) {
		st := open(t)
		m := memoT(t, st, MemoOptions{})
		c := chain("tamper", 8)
		for _, n := range []int{2, 6} {
			if err := m.PutCompaction(ctx, MemoRecord{Dialect: "messages", Prefix: c[n-1], Items: n, Blob: blob(fmt.Sprint(n))}); err != nil {
				t.Fatal(err)
			}
		}
		// Claim the 6-item record covers 7 items: the sealed header disagrees.
		db := st.(*sqlStore)
		if _, err := db.db.Exec(`UPDATE memo_records SET items = 7 WHERE items = 6`); err != nil {
			t.Fatal(err)
		}
		r, ok, err := m.LookupLongest(ctx, "", "", "messages", newestFirst(c))
		if err != nil || !ok || r.Items != 2 {
			t.Fatalf("want the intact 2-item record, got ok=%v err=%v %+v", ok, err, r)
		}
	})

	t.Run("SealedAtRest", func(t *testing.T) {
		st := open(t)
		m := memoT(t, st, MemoOptions{})
		secret := []byte("SUMMARY-PLAINTEXT-7431 the user's secret plan")
		if err := m.PutCompaction(ctx, MemoRecord{Dialect: "messages", Prefix: chain("s", 1)[0], Items: 1, Blob: secret}); err != nil {
			t.Fatal(err)
		}
		if err := m.PutSpeculative(ctx, MemoRecord{Dialect: "messages", Model: "m", Prefix: chain("s", 1)[0], Items: 1, Blob: secret}); err != nil {
			t.Fatal(err)
		}
		db := st.(*sqlStore)
		rows, err := db.db.Query(`SELECT tenant, kind, dialect, model, prefix, sealed FROM memo_records`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var cols [6]string
			if err := rows.Scan(&cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5]); err != nil {
				t.Fatal(err)
			}
			n++
			for _, c := range cols {
				if strings.Contains(c, "SUMMARY-PLAINTEXT") || strings.Contains(c, "secret plan") {
					t.Errorf("plaintext in a memo column: %.80s", c)
				}
			}
			// The prefix hash is stored keyed, not as the guessable hash of the conversation.
			if p := chain("s", 1)[0]; strings.Contains(cols[4], fmt.Sprintf("%x", p[:])) {
				t.Error("the prefix hash is stored as is")
			}
		}
		if n != 2 {
			t.Errorf("%d rows, want 2", n)
		}
	})

	t.Run("ExpiresAndSlides", func(t *testing.T) {
		clk := newClock()
		st := open(t)
		ttl := 10 * time.Hour
		m := memoT(t, st, MemoOptions{TTL: ttl, SpeculativeTTL: time.Hour, Now: clk.now})
		c := chain("exp", 3)
		put := func(conv string) {
			t.Helper()
			if err := m.PutCompaction(ctx, MemoRecord{Dialect: "responses", Prefix: chain(conv, 3)[2], Items: 3, Blob: blob(conv)}); err != nil {
				t.Fatal(err)
			}
		}
		put("exp")
		put("idle")
		if err := m.PutSpeculative(ctx, MemoRecord{Dialect: "responses", Model: "m", Prefix: c[2], Items: 3, Blob: blob("s")}); err != nil {
			t.Fatal(err)
		}
		hit := func(conv string) bool {
			t.Helper()
			_, ok, err := m.LookupLongest(ctx, "", "", "responses", newestFirst(chain(conv, 3)))
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		clk.add(2 * time.Hour) // past the speculative TTL
		if _, ok, err := m.GetSpeculative(ctx, "", "", "responses", "m", c[2]); ok || err != nil {
			t.Errorf("expired speculative summary: ok=%v err=%v", ok, err)
		}
		clk.add(4 * time.Hour) // 6h: less than half the TTL left; a hit extends it
		if !hit("exp") {
			t.Fatal("record missed before its TTL")
		}
		clk.add(6 * time.Hour) // 12h: past the original expiry
		if !hit("exp") {
			t.Error("a record used at 6h expired at 10h: the lookup did not extend it")
		}
		if hit("idle") {
			t.Error("an unused record outlived its TTL")
		}
		// Expired rows are still in the table until the retention sweep deletes them.
		n, err := m.PruneExpired(ctx)
		if err != nil || n != 2 { // "idle" and the speculative summary
			t.Errorf("PruneExpired = %d, %v; want 2", n, err)
		}
		if got := countRows(t, st, "memo_records"); got != 1 {
			t.Errorf("%d rows left, want 1", got)
		}
	})

	t.Run("BoundedPerTenant", func(t *testing.T) {
		clk := newClock()
		st := open(t)
		m := memoT(t, st, MemoOptions{MaxPerTenant: 3, Now: clk.now})
		for i := range 5 {
			clk.add(time.Minute)
			if err := m.PutCompaction(ctx, MemoRecord{Tenant: "acme", Dialect: "messages", Prefix: chain(fmt.Sprint(i), 1)[0],
				Items: 1, Blob: blob(fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.PutCompaction(ctx, MemoRecord{Tenant: "globex", Dialect: "messages", Prefix: chain("g", 1)[0], Items: 1, Blob: blob("g")}); err != nil {
			t.Fatal(err)
		}
		// Speculative summaries have their own bound: they do not evict recorded compactions.
		for i := range 4 {
			if err := m.PutSpeculative(ctx, MemoRecord{Tenant: "acme", Dialect: "messages", Model: "m",
				Prefix: chain(fmt.Sprint(i), 1)[0], Items: 1, Blob: blob("s")}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 5 {
			_, ok, err := m.LookupLongest(ctx, "acme", "", "messages", chain(fmt.Sprint(i), 1))
			if err != nil {
				t.Fatal(err)
			}
			if want := i >= 2; ok != want {
				t.Errorf("record %d: hit=%v, want %v (the oldest two are evicted)", i, ok, want)
			}
		}
		if _, ok, _ := m.LookupLongest(ctx, "globex", "", "messages", chain("g", 1)); !ok {
			t.Error("another tenant's record was evicted")
		}
		if got := countRows(t, st, "memo_records"); got != 3+1+3 {
			t.Errorf("%d rows, want 7", got)
		}
	})

	t.Run("Speculative", func(t *testing.T) {
		m := memoT(t, open(t), MemoOptions{})
		p := chain("spec", 5)[4]
		if err := m.PutSpeculative(ctx, MemoRecord{Tenant: "acme", Dialect: "responses", Model: "gpt-5-mini", Prefix: p, Items: 5, Blob: blob("v1")}); err != nil {
			t.Fatal(err)
		}
		// A second preparation of the same prefix replaces the first.
		if err := m.PutSpeculative(ctx, MemoRecord{Tenant: "acme", Dialect: "responses", Model: "gpt-5-mini", Prefix: p, Items: 5, Blob: blob("v2")}); err != nil {
			t.Fatal(err)
		}
		r, ok, err := m.GetSpeculative(ctx, "acme", "", "responses", "gpt-5-mini", p)
		if err != nil || !ok || !bytes.Equal(r.Blob, blob("v2")) || r.Items != 5 || r.Model != "gpt-5-mini" || r.Kind != MemoSpeculative {
			t.Fatalf("ok=%v err=%v %+v", ok, err, r)
		}
		for _, tc := range []struct{ dialect, model string }{{"responses", "gpt-5"}, {"messages", "gpt-5-mini"}} {
			if _, ok, err := m.GetSpeculative(ctx, "acme", "", tc.dialect, tc.model, p); ok || err != nil {
				t.Errorf("%+v: ok=%v err=%v", tc, ok, err)
			}
		}
		// A speculative summary is not a recorded compaction.
		if _, ok, err := m.LookupLongest(ctx, "acme", "", "responses", [][32]byte{p}); ok || err != nil {
			t.Errorf("LookupLongest found a speculative summary: ok=%v err=%v", ok, err)
		}
	})

	t.Run("Rejects", func(t *testing.T) {
		m := memoT(t, open(t), MemoOptions{})
		p := chain("r", 1)[0]
		for _, tc := range []struct {
			name string
			put  func() error
		}{
			{"no dialect", func() error { return m.PutCompaction(ctx, MemoRecord{Prefix: p, Items: 1}) }},
			{"no items", func() error { return m.PutCompaction(ctx, MemoRecord{Dialect: "d", Prefix: p}) }},
			{"blob too large", func() error {
				return m.PutCompaction(ctx, MemoRecord{Dialect: "d", Prefix: p, Items: 1, Blob: make([]byte, MaxMemoBlob+1)})
			}},
			{"speculative without model", func() error { return m.PutSpeculative(ctx, MemoRecord{Dialect: "d", Prefix: p, Items: 1}) }},
		} {
			if err := tc.put(); err == nil {
				t.Errorf("%s: Put succeeded", tc.name)
			}
		}
	})
}

func TestMemoSQLite(t *testing.T) { testMemo(t, openSQLiteT) }

func TestMemoPostgres(t *testing.T) { testMemo(t, postgresOpener(t)) }

// postgresOpener returns an opener that gives each store a fresh schema, or skips.
func postgresOpener(t *testing.T) func(t *testing.T) Store {
	dsn := os.Getenv("COMPACTD_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("COMPACTD_TEST_POSTGRES_DSN not set; run `eval \"$(.ci/postgres.sh)\"` to test the PostgreSQL backend")
	}
	n := 0
	return func(t *testing.T) Store {
		n++
		return openPostgresSchema(t, dsn, fmt.Sprintf("memo_test_%d_%d", os.Getpid(), n), true)
	}
}

// openPostgresSchema opens a store on schema (creating it, and dropping it at cleanup, when
// create is set), as one replica would.
func openPostgresSchema(t *testing.T, dsn, schema string, create bool) Store {
	t.Helper()
	ctx := context.Background()
	if create {
		admin, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			a, err := sql.Open("pgx", dsn)
			if err == nil {
				a.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`)
				a.Close()
			}
		})
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	st, err := Open(ctx, dsn+sep+"search_path="+schema, newTestSealer())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestMemoReplicas: two store handles on one database (two compactd replicas) see each other's
// records and speculative summaries at once. PostgreSQL is the shared deployment; SQLite runs the
// same test with two handles on one file.
func TestMemoReplicas(t *testing.T) {
	ctx := context.Background()
	run := func(t *testing.T, a, b Store) {
		clk := newClock()
		ma := memoT(t, a, MemoOptions{Now: clk.now})
		mb := memoT(t, b, MemoOptions{Now: clk.now})
		c := chain("replicated", 9)
		if err := ma.PutCompaction(ctx, MemoRecord{Tenant: "acme", Dialect: "messages", Prefix: c[5], Items: 6, Blob: blob("from A")}); err != nil {
			t.Fatal(err)
		}
		r, ok, err := mb.LookupLongest(ctx, "acme", "", "messages", newestFirst(c))
		if err != nil || !ok || r.Items != 6 || !bytes.Equal(r.Blob, blob("from A")) {
			t.Fatalf("replica B: ok=%v err=%v %+v", ok, err, r)
		}
		// B compacts further; A then finds B's longer record.
		if err := mb.PutCompaction(ctx, MemoRecord{Tenant: "acme", Dialect: "messages", Prefix: c[7], Items: 8, Blob: blob("from B")}); err != nil {
			t.Fatal(err)
		}
		if r, ok, err := ma.LookupLongest(ctx, "acme", "", "messages", newestFirst(c)); err != nil || !ok || r.Items != 8 {
			t.Fatalf("replica A: ok=%v err=%v %+v", ok, err, r)
		}
		// A speculative summary prepared on A is used by the crossing turn on B.
		if err := ma.PutSpeculative(ctx, MemoRecord{Tenant: "acme", Dialect: "messages", Model: "haiku", Prefix: c[8], Items: 9, Blob: blob("spec A")}); err != nil {
			t.Fatal(err)
		}
		if r, ok, err := mb.GetSpeculative(ctx, "acme", "", "messages", "haiku", c[8]); err != nil || !ok || !bytes.Equal(r.Blob, blob("spec A")) {
			t.Fatalf("replica B speculative: ok=%v err=%v %+v", ok, err, r)
		}
		// Still tenant-bound across replicas.
		if _, ok, err := mb.LookupLongest(ctx, "globex", "", "messages", newestFirst(c)); ok || err != nil {
			t.Errorf("other tenant on B: ok=%v err=%v", ok, err)
		}
	}
	t.Run("SQLite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "archive.db")
		var stores [2]Store
		for i := range stores {
			st, err := Open(ctx, "sqlite:"+path, newTestSealer())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			stores[i] = st
		}
		run(t, stores[0], stores[1])
	})
	t.Run("Postgres", func(t *testing.T) {
		dsn := os.Getenv("COMPACTD_TEST_POSTGRES_DSN")
		if dsn == "" {
			t.Skip("COMPACTD_TEST_POSTGRES_DSN not set; run `eval \"$(.ci/postgres.sh)\"` to test the PostgreSQL backend")
		}
		schema := fmt.Sprintf("memo_replicas_%d", os.Getpid())
		a := openPostgresSchema(t, dsn, schema, true)
		b := openPostgresSchema(t, dsn, schema, false)
		run(t, a, b)
	})
}

// TestMemoMigratesV1: an archive created before the memo (schema version 1) gains the memo
// table on Open and keeps its segments.
func TestMemoMigratesV1(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "archive.db")
	db, err := sql.Open("sqlite", path+sqliteParams)
	if err != nil {
		t.Fatal(err)
	}
	v1 := *sqliteDialect
	v1.migrations = v1.migrations[:1]
	old, err := openSQLStore(ctx, db, &v1, newTestSealer(), true)
	if err != nil {
		t.Fatal(err)
	}
	ref := putLegacy(t, ctx, db, Segment{Conversation: "c", Items: plantedItems()})
	old.Close()

	st := openPath(t, path)
	if _, err := st.Get(ctx, "", ref.ID); err != nil {
		t.Fatalf("segment lost in the migration: %v", err)
	}
	m := memoT(t, st, MemoOptions{})
	if err := m.PutCompaction(ctx, MemoRecord{Dialect: "messages", Prefix: chain("m", 1)[0], Items: 1, Blob: blob("x")}); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := st.(*sqlStore).db.QueryRow(`SELECT version FROM archive_schema`).Scan(&v); err != nil || v != len(sqliteDialect.migrations) {
		t.Errorf("schema version %d, %v; want %d", v, err, len(sqliteDialect.migrations))
	}
}

func openPath(t *testing.T, path string) Store {
	t.Helper()
	st, err := Open(context.Background(), "sqlite:"+path, newTestSealer())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestNewMemoStoreNeedsSQL(t *testing.T) {
	if _, err := NewMemoStore(&pruneStore{}, MemoOptions{}); !errors.Is(err, ErrMemoNoStore) {
		t.Errorf("err = %v", err)
	}
}

func TestRunMemoRetention(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := newClock()
	st := openSQLiteT(t)
	m := memoT(t, st, MemoOptions{TTL: time.Hour, Now: clk.now})
	if err := m.PutCompaction(ctx, MemoRecord{Dialect: "messages", Prefix: chain("r", 1)[0], Items: 1, Blob: blob("x")}); err != nil {
		t.Fatal(err)
	}
	clk.add(2 * time.Hour)
	reports := make(chan int, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		RunMemoRetention(ctx, m, 0, func(n int, err error) {
			if err != nil {
				t.Error(err)
			}
			reports <- n
		})
	}()
	if n := <-reports; n != 1 {
		t.Errorf("first pass deleted %d, want 1", n)
	}
	cancel()
	<-done
}

func countRows(t *testing.T, st Store, table string) int {
	t.Helper()
	var n int
	if err := st.(*sqlStore).db.QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
