package archive

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// postgresDialect: one table; the hashed document is a column and a stored generated tsvector
// over it ('simple' config: no stemming or stop words, the words are hashes) carries the GIN index.
var postgresDialect = &dialect{
	name:   "postgres",
	dollar: true,
	// Concurrent Opens (several replicas starting at once) must not race the migrations.
	migrateLock: `SELECT pg_advisory_xact_lock(7243091172011504369)`,
	docInRow:    true,
	migrations: [][]string{{
		`CREATE TABLE archive_segments (
			seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			id           TEXT   NOT NULL,
			tenant       TEXT   NOT NULL,
			conversation TEXT   NOT NULL,
			kind         TEXT   NOT NULL,
			created_at   BIGINT NOT NULL, -- unix microseconds
			previous     TEXT   NOT NULL DEFAULT '',
			hash         TEXT   NOT NULL, -- hex SHA-256 of the canonical plaintext
			bytes        BIGINT NOT NULL, -- sealed size
			meta         TEXT   NOT NULL DEFAULT '{}',
			sealed       TEXT   NOT NULL,
			doc          TEXT   NOT NULL, -- space-separated blind-index hash words
			tsv          TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, doc)) STORED,
			UNIQUE (tenant, id)
		)`,
		`CREATE INDEX archive_segments_conversation ON archive_segments (tenant, conversation, created_at)`,
		`CREATE INDEX archive_segments_created ON archive_segments (created_at)`,
		`CREATE INDEX archive_segments_tsv ON archive_segments USING GIN (tsv)`,
	},
		memoSchemaPostgres, // 2: the conversation memo (memo.go)
		ownerSchema,        // 3: owners of segments, conversations of memo records
		// 4: each tenant's segments oldest first, for per-tenant retention (Prune).
		{`CREATE INDEX archive_segments_tenant_created ON archive_segments (tenant, created_at, seq)`},
		eventsSchema("BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "BIGINT"), // 5: the console's event log (events.go)
	},
	// On the search_path, where Open's CREATE TABLE puts it.
	hasSchema: `SELECT CASE WHEN to_regclass('archive_schema') IS NULL THEN 0 ELSE 1 END`,
	search: func(filters string) (string, bool) {
		// Normalisation 1 divides the rank by 1+log(length), like bm25's preference for short
		// documents; every word occurs once per document, so frequency carries no signal.
		// As in SQLite, documents are read for the winners only, not carried through the sort.
		return `SELECT s.id, s.conversation, s.kind, s.owner, s.created_at, s.doc, m.rank
			FROM (SELECT s.seq, ts_rank(s.tsv, q.q, 1)::float8 AS rank
				FROM archive_segments s, to_tsquery('simple', ?) AS q(q)
				WHERE s.tsv @@ q.q AND s.tenant = ?` + filters + `
				ORDER BY rank DESC LIMIT ?) m
			JOIN archive_segments s ON s.seq = m.seq
			ORDER BY m.rank DESC`, false
	},
	and: " & ",
	or:  " | ",
}

func openPostgres(ctx context.Context, dsn string, s Sealer, create bool) (Store, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("archive: open postgres: %w", err)
	}
	db.SetMaxOpenConns(16)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("archive: open postgres: %w", err)
	}
	st, err := openSQLStore(ctx, db, postgresDialect, s, create)
	if err != nil {
		db.Close()
		return nil, err
	}
	return st, nil
}
