package archive

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The conversation memo's rows live next to the archive segments, in the same database, so
// every replica sharing a PostgreSQL archive shares the memo too. A row maps
// (tenant, owner, kind, dialect, model, prefix hash) to an opaque blob the engine produced (a
// recorded compaction, or a speculative summary), sealed at rest with the archive's Sealer.
//
// A row belongs to its owner (internal/owner: the digest of the tenant and credential of the
// request that wrote it) and only that owner's lookups find it: the same history sent with
// another credential misses, so no client is ever handed a compaction another client's request
// made, whatever the two send.
//
// What is in the clear: tenant, kind, dialect, model, the conversation id the row was made in
// (so deleting a conversation deletes its rows), the item count, times, the sealed size, and a
// keyed form of the prefix hash, HMAC-SHA256(k, tenant || owner || prefix) with k derived from
// the Sealer's index key. The prefix hash itself is an unkeyed function of the conversation, so
// stored as is it would let whoever holds the database confirm a guessed conversation (a
// standard first message, say); keyed per tenant and owner it confirms nothing and cannot be
// correlated across tenants or owners, as with the archive's blind index. The blob is sealed bound to the row's
// identity and tenant, and the sealed plaintext repeats the identity columns and the item
// count, so a row whose clear-text columns were altered, or a blob moved to another row or
// tenant, fails to open and is treated as a miss.

// Memo row kinds.
const (
	MemoCompaction  = "compaction"  // a compaction recorded for the items it replaced
	MemoSpeculative = "speculative" // a summary prepared ahead of the crossing turn
)

// MemoRecord is one memo row. Prefix is the prefix hash of the first Items items of the
// conversation; Blob is what the engine stored, returned byte-exact.
type MemoRecord struct {
	Tenant string // "default" when empty
	Owner  string // the owner digest of the request that wrote it (internal/owner)
	// Conversation is the archive conversation the row was made in ("" when unknown): deleting
	// the conversation deletes the row.
	Conversation string
	Kind         string // MemoCompaction or MemoSpeculative
	Dialect      string // the route's dialect name (dialect.Name), required
	Model        string // speculative summaries only: the summariser model
	Prefix       [32]byte
	Items        int
	Blob         []byte
	CreatedAt    time.Time // set by Put
	ExpiresAt    time.Time // set by Put (now + TTL), extended when a lookup uses the record
}

// MemoOptions bounds the memo. Zero fields take the defaults below.
type MemoOptions struct {
	// MaxPerTenant is how many rows of each kind one tenant may hold; past it the rows that
	// expire soonest (least recently used) are evicted by the Put that overflows.
	MaxPerTenant int
	// TTL is how long a recorded compaction lives after it was written or last used.
	TTL time.Duration
	// SpeculativeTTL is how long a speculative summary lives: it is only useful until the
	// crossing turn it was prepared for.
	SpeculativeTTL time.Duration
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

// Memo defaults: generous enough that an active tenant's conversations keep their records for
// a working week, small enough that a runaway client cannot grow the table without bound.
const (
	DefaultMemoMaxPerTenant   = 10_000
	DefaultMemoTTL            = 7 * 24 * time.Hour
	DefaultMemoSpeculativeTTL = time.Hour
	// MaxMemoBlob bounds one blob: a compaction (summary, ledger, references) is kilobytes.
	MaxMemoBlob = 4 << 20
	// memoLookupBatch bounds the IN list of one lookup query.
	memoLookupBatch = 256
	// maxMemoConversation bounds a row's conversation id (the proxy's are at most 128 bytes).
	maxMemoConversation = 256
)

// ErrMemoNoStore: the Store is not one of this package's SQL backends.
var ErrMemoNoStore = errors.New("archive: the memo needs the SQLite or PostgreSQL archive store")

// MemoStore is the memo over an open archive Store. It is safe for concurrent use; several
// MemoStores (replicas) may share one PostgreSQL database.
type MemoStore struct {
	s    *sqlStore
	o    MemoOptions
	pkey []byte // keys the prefix column (see col)
}

// NewMemoStore returns the memo kept in st's database (the schema is created by Open).
func NewMemoStore(st Store, o MemoOptions) (*MemoStore, error) {
	s, ok := st.(*sqlStore)
	if !ok {
		return nil, ErrMemoNoStore
	}
	if o.MaxPerTenant <= 0 {
		o.MaxPerTenant = DefaultMemoMaxPerTenant
	}
	if o.TTL <= 0 {
		o.TTL = DefaultMemoTTL
	}
	if o.SpeculativeTTL <= 0 {
		o.SpeculativeTTL = DefaultMemoSpeculativeTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	mac := hmac.New(sha256.New, s.sealer.IndexKey())
	mac.Write([]byte("compactd/v1 memo prefix key"))
	return &MemoStore{s: s, o: o, pkey: mac.Sum(nil)}, nil
}

// col is the stored form of a prefix hash for a tenant and owner (see the comment at the top).
// The owner is a fixed-length digest or "", so the NUL-separated fields are unambiguous.
func (m *MemoStore) col(tenant, owner string, prefix [32]byte) string {
	mac := hmac.New(sha256.New, m.pkey)
	mac.Write([]byte(tenant))
	mac.Write([]byte{0})
	mac.Write([]byte(owner))
	mac.Write([]byte{0})
	mac.Write(prefix[:])
	return hex.EncodeToString(mac.Sum(nil))
}

func (m *MemoStore) ttl(kind string) time.Duration {
	if kind == MemoSpeculative {
		return m.o.SpeculativeTTL
	}
	return m.o.TTL
}

// memoID is the row identity the blob is sealed to. Segment ids are "seg_…", so the two never
// share a binding; the keyring length-prefixes binding fields, so no separator is ambiguous.
func memoID(kind, dialect, model string, prefix [32]byte) string {
	return "memo/v1/" + kind + "/" + dialect + "/" + model + "/" + hex.EncodeToString(prefix[:])
}

// memoPlain is the sealed plaintext: length-prefixed identity fields, the item count, the blob.
func memoPlain(r MemoRecord) []byte {
	b := make([]byte, 0, 64+len(r.Blob))
	for _, s := range []string{r.Tenant, r.Owner, r.Conversation, r.Kind, r.Dialect, r.Model, string(r.Prefix[:])} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(r.Items))
	return append(b, r.Blob...)
}

// openMemoPlain checks the sealed header against want's columns and returns the blob.
func openMemoPlain(p []byte, want MemoRecord) ([]byte, error) {
	for _, s := range []string{want.Tenant, want.Owner, want.Conversation, want.Kind, want.Dialect, want.Model, string(want.Prefix[:])} {
		n, k := binary.Uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) || string(p[k:k+int(n)]) != s {
			return nil, errors.New("columns differ from sealed header")
		}
		p = p[k+int(n):]
	}
	n, k := binary.Uvarint(p)
	if k <= 0 || n != uint64(want.Items) {
		return nil, errors.New("item count differs from sealed header")
	}
	return p[k:], nil
}

func (m *MemoStore) check(r *MemoRecord) error {
	r.Tenant = tenantOr(r.Tenant)
	switch {
	case r.Kind != MemoCompaction && r.Kind != MemoSpeculative:
		return fmt.Errorf("archive: memo: kind %q", r.Kind)
	case r.Dialect == "":
		return errors.New("archive: memo: dialect is required")
	case r.Kind == MemoSpeculative && r.Model == "":
		return errors.New("archive: memo: a speculative summary needs its model")
	case r.Kind == MemoCompaction && r.Model != "":
		return errors.New("archive: memo: a recorded compaction has no model")
	case r.Items <= 0:
		return fmt.Errorf("archive: memo: item count %d", r.Items)
	case len(r.Owner) > maxOwner:
		return fmt.Errorf("archive: memo: owner is %d bytes", len(r.Owner))
	case len(r.Conversation) > maxMemoConversation:
		return fmt.Errorf("archive: memo: conversation id is %d bytes", len(r.Conversation))
	case len(r.Blob) > MaxMemoBlob:
		return fmt.Errorf("archive: memo: blob is %d bytes, limit %d", len(r.Blob), MaxMemoBlob)
	}
	return nil
}

// put seals and upserts r, then evicts the tenant's expired rows of that kind and, past
// MaxPerTenant, the ones that expire soonest. Under concurrent Puts on PostgreSQL the table can
// overshoot the bound by the number of concurrent writers until the next Put trims it.
func (m *MemoStore) put(ctx context.Context, r MemoRecord) error {
	if err := m.check(&r); err != nil {
		return err
	}
	now := m.o.Now()
	r.CreatedAt, r.ExpiresAt = now, now.Add(m.ttl(r.Kind))
	id := memoID(r.Kind, r.Dialect, r.Model, r.Prefix)
	sealed, err := m.s.sealer.SealArchive(pack(memoPlain(r)), id, r.Tenant)
	if err != nil {
		return fmt.Errorf("archive: memo: seal: %w", err)
	}
	tx, err := m.s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("archive: memo put: %w", err)
	}
	defer tx.Rollback()
	prefix := m.col(r.Tenant, r.Owner, r.Prefix)
	if _, err := tx.ExecContext(ctx, m.s.q(`INSERT INTO memo_records
		(tenant, kind, dialect, model, prefix, items, created_at, expires_at, bytes, sealed, conversation)
		VALUES (?,?,?,?,?,?,?,?,?,?,?)
		ON CONFLICT (tenant, kind, dialect, model, prefix) DO UPDATE SET
		items = excluded.items, created_at = excluded.created_at, expires_at = excluded.expires_at,
		bytes = excluded.bytes, sealed = excluded.sealed, conversation = excluded.conversation`),
		r.Tenant, r.Kind, r.Dialect, r.Model, prefix, r.Items, now.UnixMicro(), r.ExpiresAt.UnixMicro(),
		int64(len(sealed)), sealed, r.Conversation); err != nil {
		return fmt.Errorf("archive: memo put: %w", err)
	}
	if _, err := tx.ExecContext(ctx, m.s.q(`DELETE FROM memo_records WHERE tenant = ? AND kind = ? AND expires_at <= ?`),
		r.Tenant, r.Kind, now.UnixMicro()); err != nil {
		return fmt.Errorf("archive: memo put: expire: %w", err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, m.s.q(`SELECT COUNT(*) FROM memo_records WHERE tenant = ? AND kind = ?`),
		r.Tenant, r.Kind).Scan(&n); err != nil {
		return fmt.Errorf("archive: memo put: count: %w", err)
	}
	if n > m.o.MaxPerTenant {
		if _, err := tx.ExecContext(ctx, m.s.q(`DELETE FROM memo_records WHERE seq IN (
			SELECT seq FROM memo_records WHERE tenant = ? AND kind = ? ORDER BY expires_at, seq LIMIT ?)`),
			r.Tenant, r.Kind, n-m.o.MaxPerTenant); err != nil {
			return fmt.Errorf("archive: memo put: evict: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("archive: memo put: %w", err)
	}
	return nil
}

// PutCompaction records that a compaction replaced the first r.Items items of a conversation
// whose prefix hash is r.Prefix (Kind and Model are set here). A record for the same prefix is
// replaced.
func (m *MemoStore) PutCompaction(ctx context.Context, r MemoRecord) error {
	r.Kind, r.Model = MemoCompaction, ""
	return m.put(ctx, r)
}

// PutSpeculative stores a summary prepared for the prefix r.Prefix with model r.Model.
func (m *MemoStore) PutSpeculative(ctx context.Context, r MemoRecord) error {
	r.Kind = MemoSpeculative
	return m.put(ctx, r)
}

type memoRow struct {
	r      MemoRecord
	sealed string
	index  int // position of r.Prefix in the caller's candidates
}

// open unseals a row and verifies it against its columns.
func (m *MemoStore) open(row memoRow) (MemoRecord, error) {
	r := row.r
	packed, err := m.s.sealer.OpenArchive(row.sealed, memoID(r.Kind, r.Dialect, r.Model, r.Prefix), r.Tenant)
	if err != nil {
		return MemoRecord{}, fmt.Errorf("%w: memo row: cannot open: %v", ErrIntegrity, err)
	}
	plain, err := unpack(packed)
	if err != nil {
		return MemoRecord{}, fmt.Errorf("%w: memo row: %v", ErrIntegrity, err)
	}
	if r.Blob, err = openMemoPlain(plain, r); err != nil {
		return MemoRecord{}, fmt.Errorf("%w: memo row: %v", ErrIntegrity, err)
	}
	return r, nil
}

// candidate32 is one prefix a query asks for, under its stored column value.
type candidate32 struct {
	prefix [32]byte
	index  int
}

// query reads the live rows of one (tenant, owner, kind, dialect, model) among cands (keyed by
// col, which folds the owner in).
func (m *MemoStore) query(ctx context.Context, tenant, owner, kind, dialect, model string, cands map[string]candidate32, now int64) ([]memoRow, error) {
	args := []any{tenant, kind, dialect, model, now}
	for c := range cands {
		args = append(args, c)
	}
	rows, err := m.s.db.QueryContext(ctx, m.s.q(`SELECT prefix, items, created_at, expires_at, sealed, conversation
		FROM memo_records WHERE tenant = ? AND kind = ? AND dialect = ? AND model = ? AND expires_at > ?
		AND prefix IN (`+strings.TrimSuffix(strings.Repeat("?,", len(cands)), ",")+`)`), args...)
	if err != nil {
		return nil, fmt.Errorf("archive: memo lookup: %w", err)
	}
	defer rows.Close()
	var out []memoRow
	for rows.Next() {
		var (
			row              = memoRow{r: MemoRecord{Tenant: tenant, Owner: owner, Kind: kind, Dialect: dialect, Model: model}}
			col              string
			created, expires int64
		)
		if err := rows.Scan(&col, &row.r.Items, &created, &expires, &row.sealed, &row.r.Conversation); err != nil {
			return nil, fmt.Errorf("archive: memo lookup: %w", err)
		}
		c, ok := cands[col]
		if !ok {
			continue // cannot happen: the IN list holds exactly the keys of cands
		}
		row.r.Prefix, row.index = c.prefix, c.index
		row.r.CreatedAt, row.r.ExpiresAt = time.UnixMicro(created).UTC(), time.UnixMicro(expires).UTC()
		out = append(out, row)
	}
	return out, rows.Err()
}

// LookupLongest returns the owner's recorded compaction for the first of candidates (prefix
// hashes, longest prefix first) that has one. A miss is (zero, false, nil). A row that fails to
// open (tampered, moved, sealed under a key no longer in the keyring) is skipped in favour of
// the next candidate; when nothing opens and some row failed, the ErrIntegrity error is
// returned with ok false, so the caller can count it and carry on as on a miss.
//
// Using a record extends its expiry (when less than half its TTL is left), so a conversation
// that stays active keeps its record however long it runs.
func (m *MemoStore) LookupLongest(ctx context.Context, tenant, owner, dialect string, candidates [][32]byte) (MemoRecord, bool, error) {
	tenant = tenantOr(tenant)
	now := m.o.Now()
	var firstErr error
	for start := 0; start < len(candidates); start += memoLookupBatch {
		batch := candidates[start:min(len(candidates), start+memoLookupBatch)]
		cands := make(map[string]candidate32, len(batch))
		for i, c := range batch {
			k := m.col(tenant, owner, c)
			if _, dup := cands[k]; !dup {
				cands[k] = candidate32{prefix: c, index: start + i}
			}
		}
		rows, err := m.query(ctx, tenant, owner, MemoCompaction, dialect, "", cands, now.UnixMicro())
		if err != nil {
			return MemoRecord{}, false, err
		}
		// Best first: the candidate the caller listed first, i.e. the longest prefix.
		for len(rows) > 0 {
			best := 0
			for i := range rows {
				if rows[i].index < rows[best].index {
					best = i
				}
			}
			r, err := m.open(rows[best])
			if err == nil {
				m.touch(ctx, r, now)
				return r, true, nil
			}
			if firstErr == nil {
				firstErr = err
			}
			rows = append(rows[:best], rows[best+1:]...)
		}
	}
	return MemoRecord{}, false, firstErr
}

// touch extends a used record's expiry. A failure only means the record expires on its
// original schedule, so it is not reported: the lookup itself succeeded.
func (m *MemoStore) touch(ctx context.Context, r MemoRecord, now time.Time) {
	ttl := m.ttl(r.Kind)
	if r.ExpiresAt.Sub(now) > ttl/2 {
		return
	}
	m.s.db.ExecContext(ctx, m.s.q(`UPDATE memo_records SET expires_at = ?
		WHERE tenant = ? AND kind = ? AND dialect = ? AND model = ? AND prefix = ?`),
		now.Add(ttl).UnixMicro(), r.Tenant, r.Kind, r.Dialect, r.Model, m.col(r.Tenant, r.Owner, r.Prefix))
}

// GetSpeculative returns the speculative summary for exactly (tenant, owner, dialect, model,
// prefix). A miss is (zero, false, nil); a row that fails to open is (zero, false, ErrIntegrity…).
func (m *MemoStore) GetSpeculative(ctx context.Context, tenant, owner, dialect, model string, prefix [32]byte) (MemoRecord, bool, error) {
	tenant = tenantOr(tenant)
	cands := map[string]candidate32{m.col(tenant, owner, prefix): {prefix: prefix}}
	rows, err := m.query(ctx, tenant, owner, MemoSpeculative, dialect, model, cands, m.o.Now().UnixMicro())
	if err != nil || len(rows) == 0 {
		return MemoRecord{}, false, err
	}
	r, err := m.open(rows[0])
	if err != nil {
		return MemoRecord{}, false, err
	}
	return r, true, nil
}

// DeleteConversation deletes the tenant's memo rows made in the conversation, of every owner and
// kind, and returns how many (Store.DeleteConversation does the same in its own transaction).
func (m *MemoStore) DeleteConversation(ctx context.Context, tenant, conversation string) (int, error) {
	if conversation == "" {
		return 0, nil
	}
	res, err := m.s.db.ExecContext(ctx, m.s.q(`DELETE FROM memo_records WHERE tenant = ? AND conversation = ?`),
		tenantOr(tenant), conversation)
	if err != nil {
		return 0, fmt.Errorf("archive: memo delete conversation: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// PruneExpired deletes every tenant's expired memo rows and returns how many.
func (m *MemoStore) PruneExpired(ctx context.Context) (int, error) {
	res, err := m.s.db.ExecContext(ctx, m.s.q(`DELETE FROM memo_records WHERE expires_at <= ?`), m.o.Now().UnixMicro())
	if err != nil {
		return 0, fmt.Errorf("archive: memo prune: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// RunMemoRetention deletes expired memo rows at once and then every interval
// (DefaultRetentionInterval when interval <= 0) until ctx is done, like RunRetention. It is a
// loop of its own because the memo always expires, even when the archive has no Retention.
func RunMemoRetention(ctx context.Context, m *MemoStore, interval time.Duration, report func(deleted int, err error)) {
	runPeriodically(ctx, interval, m.PruneExpired, report)
}

// Schema (migration 2 of each backend). Rows are keyed by their identity; the expiry indexes
// serve the eviction order per tenant and the global retention sweep.
var (
	memoSchemaSQLite = []string{
		`CREATE TABLE memo_records (
			seq        INTEGER PRIMARY KEY,
			tenant     TEXT    NOT NULL,
			kind       TEXT    NOT NULL,
			dialect    TEXT    NOT NULL,
			model      TEXT    NOT NULL DEFAULT '',
			prefix     TEXT    NOT NULL, -- hex HMAC of (tenant, prefix hash of the first items items)
			items      INTEGER NOT NULL,
			created_at INTEGER NOT NULL, -- unix microseconds
			expires_at INTEGER NOT NULL, -- unix microseconds
			bytes      INTEGER NOT NULL, -- sealed size
			sealed     TEXT    NOT NULL,
			UNIQUE (tenant, kind, dialect, model, prefix)
		)`,
		`CREATE INDEX memo_records_tenant_expiry ON memo_records (tenant, kind, expires_at)`,
		`CREATE INDEX memo_records_expiry ON memo_records (expires_at)`,
	}
	memoSchemaPostgres = []string{
		`CREATE TABLE memo_records (
			seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			tenant     TEXT   NOT NULL,
			kind       TEXT   NOT NULL,
			dialect    TEXT   NOT NULL,
			model      TEXT   NOT NULL DEFAULT '',
			prefix     TEXT   NOT NULL, -- hex HMAC of (tenant, prefix hash of the first items items)
			items      BIGINT NOT NULL,
			created_at BIGINT NOT NULL, -- unix microseconds
			expires_at BIGINT NOT NULL, -- unix microseconds
			bytes      BIGINT NOT NULL, -- sealed size
			sealed     TEXT   NOT NULL,
			UNIQUE (tenant, kind, dialect, model, prefix)
		)`,
		`CREATE INDEX memo_records_tenant_expiry ON memo_records (tenant, kind, expires_at)`,
		`CREATE INDEX memo_records_expiry ON memo_records (expires_at)`,
	}
)
