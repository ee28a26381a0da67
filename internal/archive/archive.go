// Package archive keeps the exact raw items that a compaction replaced, encrypted at rest and
// searchable, so the model (through the recall tool) and operators can get them back: a summary
// is lossy, the archive is not.
//
// # Encryption at rest with full-text search
//
// Segment content is sealed with the keyring (see Sealer) before it reaches the database, so the
// database holds no plaintext of any archived string. Search works on a blind index: the text of
// every item is tokenized (see Tokenize), each token is replaced by a keyed hash
// (HMAC-SHA256 under a per-tenant key derived from Sealer.IndexKey, truncated to 50 bits and
// written as "h"+10 base32 characters), and the space-separated set of hash words is indexed by
// the database's own full-text engine (SQLite FTS5 with the unicode61 tokenizer, or PostgreSQL
// to_tsvector('simple', …) with a GIN index). Queries are tokenized and hashed the same way.
// After ranking, only the few winning segments are decrypted to cut excerpts.
//
// What the blind index still reveals to someone holding the database file: how many distinct
// tokens a segment has and which segments share tokens (document frequency). It does not reveal
// token order or repetition: each document is the sorted set of its hashes. Keys differ per
// tenant, so tenants' hashes cannot be correlated. Conversation ids, kinds, times, sizes, the
// lineage links and Meta are stored in the clear; keep secrets out of Meta.
//
// # Backends
//
// Open picks SQLite (embedded, pure Go, the default) or PostgreSQL from one DSN. Both share the
// same schema shape and the same SQL code path (database/sql); only the search statement, the
// index table and the migrations differ.
package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Sealer is what the store needs from compactd's keyring. The integrator adapts crypto.Keyring to
// it (Binding{Kind:"archive", ItemID:segmentID, Tenant:tenant}); this package does not import
// crypto so the two can evolve separately.
type Sealer interface {
	// SealArchive encrypts and authenticates plaintext bound to (segmentID, tenant).
	SealArchive(plaintext []byte, segmentID, tenant string) (string, error)
	// OpenArchive reverses SealArchive; it must fail when blob, segmentID or tenant differ.
	OpenArchive(blob, segmentID, tenant string) ([]byte, error)
	// IndexKey is the 32-byte key for the blind-index HMAC. It must be stable across restarts:
	// a new key makes every existing segment unsearchable (Get still works).
	IndexKey() []byte
}

// Segment is one archived run of raw items: what one compaction replaced, or one session log.
type Segment struct {
	ID           string // "seg_" + random, set by Put when empty
	Tenant       string // "default" when empty
	Conversation string // conversation id (required)
	// Owner is who wrote the segment: the owner digest (internal/owner) of the request's tenant
	// and credential; "" for segments written before owners existed, and for session logs the
	// operator indexes. A conversation id is only a label within an owner's namespace: reads
	// through the proxy are scoped to the owners a request can prove (Query.Owners).
	Owner     string
	Kind      string            // "compaction" | "session"; "compaction" when empty
	CreatedAt time.Time         // set by Put when zero; stored in UTC with microsecond precision
	Previous  string            // id of the previous segment in this conversation's lineage, or ""
	Items     []json.RawMessage // the raw items exactly as received (byte-exact round trip)
	Meta      map[string]string // small, unencrypted, non-secret labels; not searched, not integrity-protected
}

// Segment kinds.
const (
	KindCompaction = "compaction"
	KindSession    = "session"
)

// DefaultTenant is used wherever a tenant is empty.
const DefaultTenant = "default"

// Ref names a stored segment. Hash is the hex SHA-256 of the canonical stored plaintext (header
// and items, see encodePlain), so a lineage of Refs pins exact content.
type Ref struct{ ID, Hash string }

// Query is a full-text search. Text is tokenized like archived text; a segment matching all query
// words ranks above one matching only some (words are OR-ed only when too few segments match all).
type Query struct {
	Text         string
	Tenant       string // "default" when empty
	Conversation string // optional filter
	// Owners, when non-nil, restricts the search to segments written by these owners (an empty
	// non-nil list matches nothing). nil: every owner, for operators' tools.
	Owners       []string
	Kind         string // optional filter
	Limit        int    // default 5, at most 100
	ExcerptBytes int    // default 800
}

// Hit is one matching segment with an excerpt of its best item.
type Hit struct {
	SegmentID, Conversation, Kind string
	Owner                         string // the segment's owner digest ("" for legacy and session segments)
	CreatedAt                     time.Time
	ItemIndex                     int     // index in Segment.Items of the best item (most query words)
	Excerpt                       string  // plaintext excerpt (decrypted), centred on the match, valid UTF-8, ≤ ExcerptBytes
	Score                         float64 // higher is better: query words matched + a (0,1) rank from bm25/ts_rank
}

// ConversationInfo summarises one conversation's archived segments.
type ConversationInfo struct {
	ID          string
	Segments    int
	Bytes       int64 // stored (sealed) bytes
	First, Last time.Time
}

// Retention bounds the archive; zero fields are unlimited. Bytes are stored (sealed) bytes.
// Segments go oldest first (by creation time, then insertion order) and one at a time, never a
// whole conversation at once: a conversation that loses its oldest segments keeps its newest, and
// Lineage stops at the first link that is gone.
type Retention struct {
	// MaxAge deletes every segment older than this, whatever its tenant, and every event log
	// row (events.go) as old.
	MaxAge time.Duration
	// MaxBytes bounds each tenant on its own: a tenant past it loses its own oldest segments
	// until it is within it again, and no other tenant loses anything.
	MaxBytes int64
	// MaxTotalBytes is an optional ceiling on all tenants together, applied after MaxAge and
	// MaxBytes. Past it the largest tenant is trimmed first, oldest segments first: the
	// tenants holding the most bytes are cut down to a common level just low enough for the
	// total to fit, and a tenant below that level loses nothing (small tenants are untouched
	// until they are among the largest).
	MaxTotalBytes int64
	// Tenant, when not empty, confines the prune to that tenant's segments (MaxAge and
	// MaxBytes). A ceiling on the total concerns every tenant, so MaxTotalBytes cannot be
	// combined with it (Prune refuses).
	Tenant string
}

// Enabled reports whether r has any limit, that is whether a Prune with it can delete anything.
func (r Retention) Enabled() bool { return r.MaxAge > 0 || r.MaxBytes > 0 || r.MaxTotalBytes > 0 }

// Store is the archive. Every method is scoped to one tenant except Prune, whose Retention says
// which tenants it bounds (each on its own, and optionally all together). Implementations are
// safe for concurrent use.
type Store interface {
	Put(ctx context.Context, s Segment) (Ref, error)
	// Get returns the segment after verifying its hash and sealed header; ErrNotFound, ErrIntegrity.
	Get(ctx context.Context, tenant, id string) (Segment, error)
	// Lineage walks Previous back to the root (or to the first pruned link), newest first.
	Lineage(ctx context.Context, tenant, id string) ([]Ref, error)
	Search(ctx context.Context, q Query) ([]Hit, error)
	// Conversations lists the tenant's conversations, most recently archived first.
	Conversations(ctx context.Context, tenant string) ([]ConversationInfo, error)
	// DeleteConversation removes every segment of the conversation, of every owner, the
	// conversation memo's records and speculative summaries of it (memo.go) and its event log
	// rows (events.go); it returns how many segments it deleted.
	DeleteConversation(ctx context.Context, tenant, conversation string) (int, error)
	// Prune deletes oldest segments first until within r (see Retention); it returns how many
	// it deleted, also when it fails part way (what it deleted before the error stays deleted).
	Prune(ctx context.Context, r Retention) (int, error)
	Close() error
}

var (
	// ErrNotFound: no such segment for this tenant.
	ErrNotFound = errors.New("archive: segment not found")
	// ErrIntegrity: a stored segment failed to open or does not match its hash or columns.
	ErrIntegrity = errors.New("archive: segment failed integrity check")
	// ErrEmptyQuery: the query text has no searchable token.
	ErrEmptyQuery = errors.New("archive: query has no searchable words")
	// ErrNoArchive: OpenExisting found no archive at the DSN (no SQLite file there, or a
	// database without compactd's schema).
	ErrNoArchive = errors.New("archive: no archive")
)

// Limits that keep rows and queries bounded.
const (
	defaultLimit        = 5
	maxLimit            = 100
	defaultExcerptBytes = 800
	maxMetaBytes        = 8 << 10
	maxOwner            = 64 // an owner digest is 32 hex characters
	maxQueryOwners      = 16
)

// ownerSchema is migration 3 of both backends: each segment's owner (Segment.Owner; "" for rows
// written before), and the conversation of each memo row, so deleting a conversation deletes its
// memo records and speculative summaries too.
var ownerSchema = []string{
	`ALTER TABLE archive_segments ADD COLUMN owner TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE memo_records ADD COLUMN conversation TEXT NOT NULL DEFAULT ''`,
	`CREATE INDEX memo_records_conversation ON memo_records (tenant, conversation)`,
}

// Open selects the backend from a DSN:
//   - "" → SQLite at DefaultPath()
//   - "sqlite:PATH", or a bare PATH ending in ".db" → SQLite (WAL, busy timeout, file 0600,
//     parent directory created 0700); "sqlite::memory:" is a private in-memory database
//   - "postgres://…" or "postgresql://…" → PostgreSQL (pgx); extra runtime parameters such as
//     search_path may be given as query parameters
//
// The schema is created or migrated on Open.
func Open(ctx context.Context, dsn string, s Sealer) (Store, error) {
	return openDSN(ctx, dsn, s, true)
}

// OpenExisting is Open for commands that work on an archive that is already there (listing,
// searching, deleting, pruning): where the DSN holds no archive — a SQLite path that does not
// exist, or a database without compactd's schema — it fails with an error wrapping ErrNoArchive
// and creates nothing (no directory, no file, no table), so that a mistyped path is reported
// rather than answered from a new empty archive. An existing archive of an older schema version
// is migrated, as by Open.
func OpenExisting(ctx context.Context, dsn string, s Sealer) (Store, error) {
	return openDSN(ctx, dsn, s, false)
}

func openDSN(ctx context.Context, dsn string, s Sealer, create bool) (Store, error) {
	if s == nil {
		return nil, errors.New("archive: nil Sealer")
	}
	if len(s.IndexKey()) < 32 {
		return nil, errors.New("archive: index key must be at least 32 bytes")
	}
	switch {
	case dsn == "":
		p, err := DefaultPath()
		if err != nil {
			return nil, err
		}
		return openSQLite(ctx, p, s, create)
	case strings.HasPrefix(dsn, "sqlite:"):
		return openSQLite(ctx, strings.TrimPrefix(dsn, "sqlite:"), s, create)
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return openPostgres(ctx, dsn, s, create)
	case strings.HasSuffix(dsn, ".db"):
		return openSQLite(ctx, dsn, s, create)
	}
	return nil, fmt.Errorf("archive: unrecognised DSN scheme (want sqlite:PATH, PATH.db or postgres://…)")
}

// DefaultPath is where the SQLite archive lives when no DSN is configured:
// $XDG_STATE_HOME/compactd/archive.db, else ~/.local/state/compactd/archive.db.
func DefaultPath() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "compactd", "archive.db"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("archive: no default path: %w", err)
	}
	return filepath.Join(home, ".local", "state", "compactd", "archive.db"), nil
}
