package archive

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // pure-Go SQLite driver "sqlite", with FTS5
)

// sqliteDialect: segments in a rowid table, hashed documents in an FTS5 table sharing its rowid
// (seq), kept in step by a delete trigger so every path that deletes segments drops their index.
// FTS5 keeps the document (only hash words) so Search can count matched query words.
var sqliteDialect = &dialect{
	name: "sqlite",
	migrations: [][]string{{
		`CREATE TABLE archive_segments (
			seq          INTEGER PRIMARY KEY,
			id           TEXT    NOT NULL,
			tenant       TEXT    NOT NULL,
			conversation TEXT    NOT NULL,
			kind         TEXT    NOT NULL,
			created_at   INTEGER NOT NULL, -- unix microseconds
			previous     TEXT    NOT NULL DEFAULT '',
			hash         TEXT    NOT NULL, -- hex SHA-256 of the canonical plaintext
			bytes        INTEGER NOT NULL, -- sealed size
			meta         TEXT    NOT NULL DEFAULT '{}',
			sealed       TEXT    NOT NULL,
			UNIQUE (tenant, id)
		)`,
		`CREATE INDEX archive_segments_conversation ON archive_segments (tenant, conversation, created_at)`,
		`CREATE INDEX archive_segments_created ON archive_segments (created_at)`,
		// detail=none: no positions (there are no phrase queries over hash words, and each word
		// occurs once per document, so bm25 loses nothing); a much smaller index.
		`CREATE VIRTUAL TABLE archive_fts USING fts5(doc, tokenize = 'unicode61')`,
		`CREATE TRIGGER archive_segments_delete AFTER DELETE ON archive_segments BEGIN
			DELETE FROM archive_fts WHERE rowid = old.seq;
		END`,
	},
		memoSchemaSQLite, // 2: the conversation memo (memo.go)
		ownerSchema,      // 3: owners of segments, conversations of memo records
		// 4: each tenant's segments oldest first, for per-tenant retention (Prune); the rowid
		// (seq) is implicitly the last column, so (created_at, seq) keysets use it whole.
		{`CREATE INDEX archive_segments_tenant_created ON archive_segments (tenant, created_at)`},
		eventsSchema("INTEGER PRIMARY KEY", "INTEGER"), // 5: the console's event log (events.go)
	},
	hasSchema: `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'archive_schema'`,
	// The inner query ranks and limits carrying only (seq, rank); documents and columns are read
	// for the winners only. Without conversation/kind filters the inner query does not join at
	// all: hash words are keyed per tenant, so a MATCH only finds the query tenant's documents
	// (the outer tenant check is a guard against 50-bit collisions), and the join per matching
	// row was most of the cost for common words.
	search: func(filters string) (string, bool) {
		if filters == "" {
			return `SELECT s.id, s.conversation, s.kind, s.owner, s.created_at,
					(SELECT doc FROM archive_fts d WHERE d.rowid = m.seq), m.r
				FROM (SELECT rowid AS seq, -bm25(archive_fts) AS r FROM archive_fts
					WHERE archive_fts MATCH ? ORDER BY bm25(archive_fts) LIMIT ?) m
				JOIN archive_segments s ON s.seq = m.seq
				WHERE s.tenant = ?
				ORDER BY m.r DESC`, true
		}
		return `SELECT s.id, s.conversation, s.kind, s.owner, s.created_at,
				(SELECT doc FROM archive_fts d WHERE d.rowid = m.seq), m.r
			FROM (SELECT s.seq AS seq, -bm25(archive_fts) AS r
				FROM archive_fts CROSS JOIN archive_segments s ON s.seq = archive_fts.rowid
				WHERE archive_fts MATCH ? AND s.tenant = ?` + filters + `
				ORDER BY bm25(archive_fts) LIMIT ?) m
			JOIN archive_segments s ON s.seq = m.seq
			ORDER BY m.r DESC`, false
	},
	and: " AND ",
	or:  " OR ",
}

// sqliteParams: WAL so readers never block the writer; a busy timeout instead of SQLITE_BUSY
// under concurrent writers; BEGIN IMMEDIATE so a read-then-write transaction cannot deadlock on
// lock upgrade; synchronous=NORMAL, durable in WAL except for the last commits on power loss;
// secure_delete so freed pages (sealed blobs, index words) are zeroed rather than left behind.
const sqliteParams = "?_busy_timeout=10000&_journal_mode=WAL&_synchronous=NORMAL" +
	"&_pragma=secure_delete(1)&_txlock=immediate"

// openSQLite opens the database at path; without create, a path that does not exist is
// ErrNoArchive and nothing is created.
// sqliteHasArchive opens path read-only (SQLite's mode=ro URI: the file is neither created nor
// written) and reports whether it holds the archive's schema.
func sqliteHasArchive(ctx context.Context, path string) (bool, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	db, err := sql.Open("sqlite", "file:"+strings.ReplaceAll(abs, "%", "%25")+"?mode=ro")
	if err != nil {
		return false, err
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, sqliteDialect.hasSchema).Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}

func openSQLite(ctx context.Context, path string, s Sealer, create bool) (Store, error) {
	if path == "" {
		return nil, errors.New("archive: empty SQLite path")
	}
	if strings.ContainsAny(path, "?#") || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("archive: SQLite path may not contain '?' or '#' or be a file: URI")
	}
	memory := path == ":memory:"
	if !create {
		if memory {
			return nil, fmt.Errorf("%w in a new in-memory database", ErrNoArchive)
		}
		fi, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w at %s: the file does not exist", ErrNoArchive, path)
		}
		if err != nil {
			return nil, fmt.Errorf("archive: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%w at %s: not a regular file", ErrNoArchive, path)
		}
		// Look read-only first: opening read-write would already write to the file (the WAL
		// pragma), an empty one included.
		ok, err := sqliteHasArchive(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("archive: open sqlite: %w", err)
		}
		if !ok {
			return nil, fmt.Errorf("%w at %s: the database has no archive tables", ErrNoArchive, path)
		}
	} else if !memory {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("archive: %w", err)
		}
		// Create the file ourselves so it is 0600 from the start; SQLite gives the -wal and -shm
		// files the same mode as the database.
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("archive: %w", err)
		}
		f.Close()
		if err := os.Chmod(path, 0o600); err != nil {
			return nil, fmt.Errorf("archive: %w", err)
		}
	}
	db, err := sql.Open("sqlite", path+sqliteParams)
	if err != nil {
		return nil, fmt.Errorf("archive: open sqlite: %w", err)
	}
	if memory {
		db.SetMaxOpenConns(1) // every connection to :memory: is a separate database
	} else {
		db.SetMaxOpenConns(8)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("archive: open sqlite: %w", err)
	}
	st, err := openSQLStore(ctx, db, sqliteDialect, s, create)
	if err != nil {
		db.Close()
		return nil, err
	}
	return st, nil
}
