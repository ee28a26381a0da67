package archive

import (
	"cmp"
	"container/heap"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// dialect holds what differs between the backends; everything else is one code path over
// database/sql. Statements are written with "?" placeholders and rebound for PostgreSQL.
type dialect struct {
	name string
	// dollar: rewrite "?" placeholders as $1, $2, … (PostgreSQL).
	dollar bool
	// migrations[i] brings the schema from version i to i+1; each runs in one transaction.
	migrations [][]string
	// migrateLock, when set, runs first in the migration transaction (serialises concurrent Opens).
	migrateLock string
	// hasSchema counts (0 or 1) the archive_schema table: whether the database holds an archive.
	hasSchema string
	// docInRow: the hashed document is a column of archive_segments (PostgreSQL) rather than a row
	// of the separate FTS table archive_fts keyed by seq (SQLite).
	docInRow bool
	// search returns a statement selecting (id, conversation, kind, created_at, doc, rank) with
	// placeholders (match, tenant, [conversation], [kind], limit), best rank first, rank ≥ 0;
	// limitFirst moves limit right after match.
	search func(filters string) (query string, limitFirst bool)
	// and/or: boolean operators of the match language.
	and, or string
}

type sqlStore struct {
	db     *sql.DB
	d      *dialect
	sealer Sealer
	ix     *blindIndex
}

// openSQLStore migrates the schema; without create, a database that holds no archive schema at
// all is ErrNoArchive and is left untouched.
func openSQLStore(ctx context.Context, db *sql.DB, d *dialect, s Sealer, create bool) (*sqlStore, error) {
	st := &sqlStore{db: db, d: d, sealer: s, ix: newBlindIndex(s.IndexKey())}
	if !create {
		var n int
		if err := db.QueryRowContext(ctx, d.hasSchema).Scan(&n); err != nil {
			return nil, fmt.Errorf("archive: %s schema: %w", d.name, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("%w in this %s database: it has no archive tables", ErrNoArchive, d.name)
		}
	}
	if err := st.migrate(ctx); err != nil {
		return nil, fmt.Errorf("archive: %s schema: %w", d.name, err)
	}
	return st, nil
}

// q rebinds "?" placeholders for the dialect.
func (s *sqlStore) q(query string) string {
	if !s.d.dollar {
		return query
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	return b.String()
}

func (s *sqlStore) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if s.d.migrateLock != "" {
		if _, err := tx.ExecContext(ctx, s.d.migrateLock); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS archive_schema (version INTEGER NOT NULL)`); err != nil {
		return err
	}
	var v int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM archive_schema`).Scan(&v); err != nil {
		return err
	}
	if v > len(s.d.migrations) {
		return fmt.Errorf("database schema version %d is newer than this build (%d)", v, len(s.d.migrations))
	}
	for i := v; i < len(s.d.migrations); i++ {
		for _, stmt := range s.d.migrations[i] {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
		}
	}
	if v < len(s.d.migrations) {
		if _, err := tx.ExecContext(ctx, `DELETE FROM archive_schema`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO archive_schema (version) VALUES (?)`), len(s.d.migrations)); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func (s *sqlStore) Close() error { return s.db.Close() }

func tenantOr(t string) string {
	if t == "" {
		return DefaultTenant
	}
	return t
}

// Put seals the segment, indexes it and stores both in one transaction.
func (s *sqlStore) Put(ctx context.Context, seg Segment) (Ref, error) {
	if seg.Conversation == "" {
		return Ref{}, errors.New("archive: Put: conversation is required")
	}
	if len(seg.Owner) > maxOwner {
		return Ref{}, fmt.Errorf("archive: Put: owner is %d bytes, limit %d", len(seg.Owner), maxOwner)
	}
	if seg.ID == "" {
		seg.ID = newSegmentID()
	}
	seg.Tenant = tenantOr(seg.Tenant)
	if seg.Kind == "" {
		seg.Kind = KindCompaction
	}
	if seg.CreatedAt.IsZero() {
		seg.CreatedAt = time.Now()
	}
	meta := []byte("{}")
	if len(seg.Meta) > 0 {
		var err error
		if meta, err = json.Marshal(seg.Meta); err != nil {
			return Ref{}, fmt.Errorf("archive: Put: meta: %w", err)
		}
		if len(meta) > maxMetaBytes {
			return Ref{}, fmt.Errorf("archive: Put: meta is %d bytes, limit %d", len(meta), maxMetaBytes)
		}
	}
	h := header{ID: seg.ID, Tenant: seg.Tenant, Conversation: seg.Conversation, Kind: seg.Kind,
		Previous: seg.Previous, Owner: seg.Owner, CreatedUS: seg.CreatedAt.UnixMicro()}
	plain := encodePlain(h, seg.Items)
	ref := Ref{ID: seg.ID, Hash: hashPlain(plain)}
	sealed, err := s.sealer.SealArchive(pack(plain), seg.ID, seg.Tenant)
	if err != nil {
		return Ref{}, fmt.Errorf("archive: Put: seal: %w", err)
	}
	doc := s.ix.document(seg.Tenant, seg.Items)

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Ref{}, fmt.Errorf("archive: Put: %w", err)
	}
	defer tx.Rollback()
	cols := `id, tenant, conversation, kind, created_at, previous, owner, hash, bytes, meta, sealed`
	args := []any{seg.ID, seg.Tenant, seg.Conversation, seg.Kind, h.CreatedUS, seg.Previous, seg.Owner, ref.Hash,
		int64(len(sealed)), string(meta), sealed}
	if s.d.docInRow {
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO archive_segments (`+cols+`, doc) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`),
			append(args, doc)...)
	} else {
		var res sql.Result
		res, err = tx.ExecContext(ctx, s.q(`INSERT INTO archive_segments (`+cols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?)`), args...)
		if err == nil {
			var seq int64
			if seq, err = res.LastInsertId(); err == nil {
				_, err = tx.ExecContext(ctx, s.q(`INSERT INTO archive_fts (rowid, doc) VALUES (?, ?)`), seq, doc)
			}
		}
	}
	if err != nil {
		return Ref{}, fmt.Errorf("archive: Put %s: %w", seg.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return Ref{}, fmt.Errorf("archive: Put %s: %w", seg.ID, err)
	}
	return ref, nil
}

// load reads, opens and verifies one segment: the sealed blob must open under (id, tenant), hash
// to the stored hash, and carry a header equal to the clear-text columns.
func (s *sqlStore) load(ctx context.Context, tenant, id string) (Segment, error) {
	var (
		seg                = Segment{ID: id, Tenant: tenant}
		createdUS          int64
		hash, meta, sealed string
	)
	err := s.db.QueryRowContext(ctx, s.q(`SELECT conversation, kind, created_at, previous, owner, hash, meta, sealed
		FROM archive_segments WHERE tenant = ? AND id = ?`), tenant, id).
		Scan(&seg.Conversation, &seg.Kind, &createdUS, &seg.Previous, &seg.Owner, &hash, &meta, &sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return Segment{}, ErrNotFound
	}
	if err != nil {
		return Segment{}, fmt.Errorf("archive: get %s: %w", id, err)
	}
	packed, err := s.sealer.OpenArchive(sealed, id, tenant)
	if err != nil {
		return Segment{}, fmt.Errorf("%w: %s: cannot open: %v", ErrIntegrity, id, err)
	}
	plain, err := unpack(packed)
	if err != nil {
		return Segment{}, fmt.Errorf("%w: %s: %v", ErrIntegrity, id, err)
	}
	if hashPlain(plain) != hash {
		return Segment{}, fmt.Errorf("%w: %s: hash mismatch", ErrIntegrity, id)
	}
	h, items, err := decodePlain(plain)
	if err != nil {
		return Segment{}, fmt.Errorf("%w: %s: %v", ErrIntegrity, id, err)
	}
	want := header{ID: id, Tenant: tenant, Conversation: seg.Conversation, Kind: seg.Kind, Previous: seg.Previous,
		Owner: seg.Owner, CreatedUS: createdUS}
	if h != want {
		return Segment{}, fmt.Errorf("%w: %s: columns differ from sealed header", ErrIntegrity, id)
	}
	seg.CreatedAt = time.UnixMicro(createdUS).UTC()
	seg.Items = items
	if meta != "" && meta != "{}" {
		if err := json.Unmarshal([]byte(meta), &seg.Meta); err != nil {
			return Segment{}, fmt.Errorf("archive: get %s: meta: %w", id, err)
		}
	}
	return seg, nil
}

func (s *sqlStore) Get(ctx context.Context, tenant, id string) (Segment, error) {
	return s.load(ctx, tenantOr(tenant), id)
}

// maxLineage guards against a cycle or a runaway chain written by hand into the database.
const maxLineage = 100_000

func (s *sqlStore) Lineage(ctx context.Context, tenant, id string) ([]Ref, error) {
	tenant = tenantOr(tenant)
	var out []Ref
	seen := map[string]bool{}
	for id != "" && !seen[id] && len(out) < maxLineage {
		seen[id] = true
		var r Ref
		var prev string
		err := s.db.QueryRowContext(ctx, s.q(`SELECT id, hash, previous FROM archive_segments WHERE tenant = ? AND id = ?`),
			tenant, id).Scan(&r.ID, &r.Hash, &prev)
		if errors.Is(err, sql.ErrNoRows) {
			if len(out) == 0 {
				return nil, ErrNotFound
			}
			break // the rest of the chain was pruned or deleted
		}
		if err != nil {
			return nil, fmt.Errorf("archive: lineage: %w", err)
		}
		out = append(out, r)
		id = prev
	}
	return out, nil
}

type candidate struct {
	id, conversation, kind, owner string
	createdUS                     int64
	score                         float64
}

// candidates runs one ranked full-text query and scores rows by query words matched (read from
// the hashed document) plus the backend rank squashed into (0,1).
func (s *sqlStore) candidates(ctx context.Context, q Query, hq []queryWord, match string, limit int) ([]candidate, error) {
	var filters strings.Builder
	args := []any{match, q.Tenant}
	if q.Conversation != "" {
		filters.WriteString(" AND s.conversation = ?")
		args = append(args, q.Conversation)
	}
	if q.Kind != "" {
		filters.WriteString(" AND s.kind = ?")
		args = append(args, q.Kind)
	}
	if q.Owners != nil {
		if len(q.Owners) == 0 {
			return nil, nil // scoped to no owner: nothing to read
		}
		filters.WriteString(" AND s.owner IN (" + strings.TrimSuffix(strings.Repeat("?,", len(q.Owners)), ",") + ")")
		for _, o := range q.Owners {
			args = append(args, o)
		}
	}
	query, limitFirst := s.d.search(filters.String())
	if limitFirst {
		args = append([]any{match, limit}, args[1:]...)
	} else {
		args = append(args, limit)
	}
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("archive: search: %w", err)
	}
	defer rows.Close()
	var out []candidate
	set := map[string]struct{}{}
	for rows.Next() {
		var c candidate
		var doc string
		var rank float64
		if err := rows.Scan(&c.id, &c.conversation, &c.kind, &c.owner, &c.createdUS, &doc, &rank); err != nil {
			return nil, fmt.Errorf("archive: search: %w", err)
		}
		clear(set)
		for _, w := range strings.Fields(doc) {
			set[w] = struct{}{}
		}
		rank = max(rank, 0)
		c.score = float64(countMatches(hq, func(t string) bool { _, ok := set[t]; return ok })) + rank/(1+rank)
		out = append(out, c)
	}
	return out, rows.Err()
}

// Search ranks segments that hold all query words first (bm25 / ts_rank among them); only when
// fewer than Limit do, segments holding some of the words follow, ranked by how many they hold.
// Then only the winners are decrypted to cut excerpts.
func (s *sqlStore) Search(ctx context.Context, q Query) ([]Hit, error) {
	q.Tenant = tenantOr(q.Tenant)
	if q.Limit <= 0 {
		q.Limit = defaultLimit
	}
	q.Limit = min(q.Limit, maxLimit)
	if len(q.Owners) > maxQueryOwners {
		return nil, fmt.Errorf("archive: search: %d owners, limit %d", len(q.Owners), maxQueryOwners)
	}
	if q.ExcerptBytes <= 0 {
		q.ExcerptBytes = defaultExcerptBytes
	}
	plainQ := parseQuery(q.Text)
	if len(plainQ) == 0 {
		return nil, ErrEmptyQuery
	}
	hq := s.ix.hashQuery(q.Tenant, plainQ)
	cands, err := s.candidates(ctx, q, hq, matchExpr(hq, s.d.and, s.d.or, s.d.and), q.Limit)
	if err != nil {
		return nil, err
	}
	if len(cands) < q.Limit && len(hq) > 1 {
		more, err := s.candidates(ctx, q, hq, matchExpr(hq, s.d.and, s.d.or, s.d.or), 3*q.Limit+len(cands))
		if err != nil {
			return nil, err
		}
		for _, c := range more {
			if !slices.ContainsFunc(cands, func(x candidate) bool { return x.id == c.id }) {
				cands = append(cands, c)
			}
		}
	}
	slices.SortStableFunc(cands, func(a, b candidate) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(b.createdUS, a.createdUS)
	})
	if len(cands) > q.Limit {
		cands = cands[:q.Limit]
	}
	// Each segment gives its best item; what Limit leaves over goes to the items that match as
	// well as a segment's best (segmentExcerpts), segment by segment in rank order.
	per := make([][]itemExcerpt, 0, len(cands))
	kept := cands[:0]
	for _, c := range cands {
		seg, err := s.load(ctx, q.Tenant, c.id)
		if errors.Is(err, ErrNotFound) {
			continue // deleted between the two queries
		}
		if err != nil {
			return nil, err
		}
		if ex := segmentExcerpts(plainQ, seg.Items, q.ExcerptBytes, maxItemsPerHit); len(ex) > 0 {
			per, kept = append(per, ex), append(kept, c)
		}
	}
	take := make([]int, len(per))
	left := q.Limit
	for i := range per {
		if left > 0 {
			take[i], left = 1, left-1
		}
	}
	for i := range per {
		extra := min(left, len(per[i])-take[i])
		take[i], left = take[i]+extra, left-extra
	}
	hits := make([]Hit, 0, q.Limit)
	for i, c := range kept {
		for _, e := range inConversationOrder(per[i][:take[i]]) {
			hits = append(hits, Hit{SegmentID: c.id, Conversation: c.conversation, Kind: c.kind, Owner: c.owner,
				CreatedAt: time.UnixMicro(c.createdUS).UTC(), ItemIndex: e.index, Excerpt: e.text, Score: c.score})
		}
	}
	return hits, nil
}

// maxItemsPerHit bounds the items one segment gives a search.
const maxItemsPerHit = 3

func (s *sqlStore) Conversations(ctx context.Context, tenant string) ([]ConversationInfo, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT conversation, COUNT(*), CAST(SUM(bytes) AS BIGINT),
		MIN(created_at), MAX(created_at) FROM archive_segments WHERE tenant = ?
		GROUP BY conversation ORDER BY MAX(created_at) DESC, conversation`), tenantOr(tenant))
	if err != nil {
		return nil, fmt.Errorf("archive: conversations: %w", err)
	}
	defer rows.Close()
	var out []ConversationInfo
	for rows.Next() {
		var c ConversationInfo
		var first, last int64
		if err := rows.Scan(&c.ID, &c.Segments, &c.Bytes, &first, &last); err != nil {
			return nil, fmt.Errorf("archive: conversations: %w", err)
		}
		c.First, c.Last = time.UnixMicro(first).UTC(), time.UnixMicro(last).UTC()
		out = append(out, c)
	}
	return out, rows.Err()
}

// DeleteConversation removes the conversation's segments and their index entries (SQLite: by
// trigger; PostgreSQL: same row), and in the same transaction the memo's records and speculative
// summaries of it, so no later turn is handed a summary of what was deleted, and its event log
// rows (events.go), which hold its handoff texts and recall queries.
func (s *sqlStore) DeleteConversation(ctx context.Context, tenant, conversation string) (int, error) {
	tenant = tenantOr(tenant)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("archive: delete conversation: %w", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, s.q(`DELETE FROM archive_segments WHERE tenant = ? AND conversation = ?`), tenant, conversation)
	if err != nil {
		return 0, fmt.Errorf("archive: delete conversation: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM memo_records WHERE tenant = ? AND conversation = ?`), tenant, conversation); err != nil {
		return 0, fmt.Errorf("archive: delete conversation: memo: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM archive_events WHERE tenant = ? AND conversation = ?`), tenant, conversation); err != nil {
		return 0, fmt.Errorf("archive: delete conversation: events: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("archive: delete conversation: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("archive: delete conversation: %w", err)
	}
	return int(n), nil
}

// pruneBatch bounds the rows one retention step reads and the IN list of one DELETE (a variable
// so that tests can make batches small).
var pruneBatch = 500

// Prune applies r in three passes, each seeing what the one before left: MaxAge (one DELETE),
// then MaxBytes per tenant, then MaxTotalBytes. The byte passes read one row per tenant (its
// total) and then walk only the segments they delete, oldest first, in batches of pruneBatch
// over the (tenant, created_at) index, each batch its own statement: no pass holds rows in
// memory beyond one batch, and no transaction spans a pass, so writers are not held off for
// long. Segments written meanwhile are the next pass's business.
func (s *sqlStore) Prune(ctx context.Context, r Retention) (int, error) {
	if r.Tenant != "" && r.MaxTotalBytes > 0 {
		return 0, errors.New("archive: prune: MaxTotalBytes bounds all tenants together and cannot be confined to one Tenant")
	}
	deleted := 0
	if r.MaxAge > 0 {
		query, args := `DELETE FROM archive_segments WHERE created_at < ?`, []any{time.Now().Add(-r.MaxAge).UnixMicro()}
		if r.Tenant != "" {
			query, args = query+` AND tenant = ?`, append(args, r.Tenant)
		}
		res, err := s.db.ExecContext(ctx, s.q(query), args...)
		if err != nil {
			return 0, fmt.Errorf("archive: prune by age: %w", err)
		}
		n, _ := res.RowsAffected()
		deleted += int(n)
		// The event log ages with the segments it describes (not counted: they are not segments).
		if _, err := s.db.ExecContext(ctx, s.q(strings.Replace(query, "archive_segments", "archive_events", 1)), args...); err != nil {
			return deleted, fmt.Errorf("archive: prune events by age: %w", err)
		}
	}
	if r.MaxBytes <= 0 && r.MaxTotalBytes <= 0 {
		return deleted, nil
	}
	sizes, err := s.tenantBytes(ctx, r.Tenant)
	if err != nil {
		return deleted, fmt.Errorf("archive: prune by size: %w", err)
	}
	if r.MaxBytes > 0 {
		for i := range sizes {
			if over := sizes[i].bytes - r.MaxBytes; over > 0 {
				n, freed, err := s.evictOldest(ctx, sizes[i].tenant, over)
				deleted += n
				sizes[i].bytes -= freed
				if err != nil {
					return deleted, fmt.Errorf("archive: prune tenant %q by size: %w", sizes[i].tenant, err)
				}
			}
		}
	}
	if r.MaxTotalBytes > 0 {
		n, err := s.trimLargest(ctx, sizes, r.MaxTotalBytes)
		deleted += n
		if err != nil {
			return deleted, fmt.Errorf("archive: prune by the total ceiling: %w", err)
		}
	}
	return deleted, nil
}

type tenantSize struct {
	tenant string
	bytes  int64
}

// tenantBytes sums stored bytes per tenant (only tenant's when it is not empty): one row per
// tenant, however many segments.
func (s *sqlStore) tenantBytes(ctx context.Context, tenant string) ([]tenantSize, error) {
	query, args := `SELECT tenant, CAST(SUM(bytes) AS BIGINT) FROM archive_segments`, []any(nil)
	if tenant != "" {
		query, args = query+` WHERE tenant = ?`, append(args, tenant)
	}
	rows, err := s.db.QueryContext(ctx, s.q(query+` GROUP BY tenant`), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []tenantSize
	for rows.Next() {
		var t tenantSize
		if err := rows.Scan(&t.tenant, &t.bytes); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// trimLargest deletes, while the total of sizes is over ceiling, the oldest segment of whichever
// tenant holds the most bytes at that moment (ties: the first by name). A big tenant is thus
// trimmed first, down to the next largest, then the two alternately, and so on; a small tenant
// loses nothing until it is among the largest. Each tenant taking part is read oldest first
// through a keyset cursor, pruneBatch rows at a time, and its doomed segments are deleted
// pruneBatch at a time: memory is one batch per tenant trimmed, the work linear in what goes.
func (s *sqlStore) trimLargest(ctx context.Context, sizes []tenantSize, ceiling int64) (int, error) {
	var total int64
	for _, t := range sizes {
		total += t.bytes
	}
	if total <= ceiling {
		return 0, nil
	}
	h := make(cursorHeap, len(sizes))
	for i, t := range sizes {
		h[i] = &tenantCursor{tenantSize: t, after: keyset{math.MinInt64, math.MinInt64}}
	}
	heap.Init(&h)
	deleted := 0
	flush := func(c *tenantCursor) error {
		n, err := s.deleteSeqs(ctx, c.doomed)
		deleted += n
		c.doomed = c.doomed[:0]
		return err
	}
	for total > ceiling && len(h) > 0 {
		c := h[0]
		if len(c.buf) == 0 {
			rows, err := s.oldestRows(ctx, c.tenant, c.after)
			if err != nil {
				return deleted, err
			}
			if len(rows) == 0 { // nothing left to take (deleted meanwhile): out of the race
				heap.Pop(&h)
				if err := flush(c); err != nil {
					return deleted, err
				}
				continue
			}
			c.buf = rows
		}
		row := c.buf[0]
		c.buf = c.buf[1:]
		c.after = row.key
		c.doomed = append(c.doomed, row.key.seq)
		c.bytes -= row.bytes
		total -= row.bytes
		heap.Fix(&h, 0)
		if len(c.doomed) == pruneBatch {
			if err := flush(c); err != nil {
				return deleted, err
			}
		}
	}
	for _, c := range h {
		if err := flush(c); err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

// keyset is a position in a tenant's segments, oldest first.
type keyset struct{ createdUS, seq int64 }

type segRow struct {
	key   keyset
	bytes int64
}

type tenantCursor struct {
	tenantSize
	after  keyset   // the last row taken
	buf    []segRow // read, not yet taken
	doomed []any    // seqs taken, not yet deleted
}

// cursorHeap orders tenants largest first, ties by name.
type cursorHeap []*tenantCursor

func (h cursorHeap) Len() int { return len(h) }
func (h cursorHeap) Less(i, j int) bool {
	return h[i].bytes > h[j].bytes || h[i].bytes == h[j].bytes && h[i].tenant < h[j].tenant
}
func (h cursorHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *cursorHeap) Push(x any)   { *h = append(*h, x.(*tenantCursor)) }
func (h *cursorHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// oldestRows reads up to pruneBatch of tenant's segments after the keyset, oldest first, over
// the (tenant, created_at) index.
func (s *sqlStore) oldestRows(ctx context.Context, tenant string, after keyset) ([]segRow, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT seq, created_at, bytes FROM archive_segments
		WHERE tenant = ? AND (created_at, seq) > (?, ?) ORDER BY created_at, seq LIMIT ?`),
		tenant, after.createdUS, after.seq, pruneBatch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]segRow, 0, pruneBatch)
	for rows.Next() {
		var r segRow
		if err := rows.Scan(&r.key.seq, &r.key.createdUS, &r.bytes); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// deleteSeqs deletes the segments of seqs (at most pruneBatch) and their index entries.
func (s *sqlStore) deleteSeqs(ctx context.Context, seqs []any) (int, error) {
	if len(seqs) == 0 {
		return 0, nil
	}
	ph := strings.TrimSuffix(strings.Repeat("?,", len(seqs)), ",")
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM archive_segments WHERE seq IN (`+ph+`)`), seqs...)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// evictOldest deletes tenant's oldest segments, pruneBatch at a time, until at least need bytes
// are gone or the tenant has none left. It walks a (created_at, seq) keyset over the
// (tenant, created_at) index, so every batch reads only rows it deletes (and, once, the rest of
// the batch where it stops).
func (s *sqlStore) evictOldest(ctx context.Context, tenant string, need int64) (deleted int, freed int64, err error) {
	after := keyset{math.MinInt64, math.MinInt64}
	doomed := make([]any, 0, pruneBatch)
	for freed < need {
		rows, err := s.oldestRows(ctx, tenant, after)
		if err != nil {
			return deleted, freed, err
		}
		doomed = doomed[:0]
		for _, r := range rows {
			if freed >= need {
				break
			}
			doomed = append(doomed, r.key.seq)
			freed += r.bytes
			after = r.key
		}
		n, err := s.deleteSeqs(ctx, doomed)
		deleted += n
		if err != nil || len(rows) < pruneBatch {
			return deleted, freed, err // an error, or the tenant's segments ran out
		}
	}
	return deleted, freed, nil
}
