package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/english"
	"github.com/compactd/compactd/proxy"
)

const archiveEnvHelp = `Reads COMPACTD_ARCHIVE, COMPACTD_KEYS, COMPACTD_KEY_FILE, COMPACTD_DATA_DIR and
COMPACTD_ARCHIVE_INDEX_KEY, the serve settings it shares, so that it opens the archive serve writes.`

// archiveDSN resolves --archive: "" is SQLite in the data directory, "off" disables it.
func archiveDSN(dsn, dataDir string) string {
	if dsn == "" {
		return "sqlite:" + filepath.Join(dataDir, "archive.db")
	}
	return dsn
}

// openArchive opens the archive for serve; nil when it is off. The proxy runs its retention loop
// (proxy.Config.ArchiveRetention) and closes it.
func (c *serveConfig) openArchive(ring *crypto.Keyring, log *slog.Logger) (archive.Store, error) {
	if c.archiveDSN == "off" {
		log.Info("archive off: compacted history is not kept and the recall tool is not offered")
		return nil, nil
	}
	sealer, err := archive.KeyringSealer(ring, c.archiveIndexKey)
	if err != nil {
		return nil, fmt.Errorf("--archive-index-key: %w", err)
	}
	dsn := archiveDSN(c.archiveDSN, c.dataDir)
	store, err := archive.Open(context.Background(), dsn, sealer)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	backend := "sqlite"
	if strings.HasPrefix(dsn, "postgres") {
		backend = "postgres"
	}
	log.Info("archive open", "backend", backend)
	return store, nil
}

// archiveFlags are the flags the archive CLI commands share with serve.
type archiveFlags struct{ dsn, keys, keyFile, dataDir, indexKey, tenant string }

// archiveEnv are the serve settings the archive commands read from the environment (not
// --tenant, which is theirs alone).
var archiveEnv = []string{"archive", "keys", "key-file", "data-dir", "archive-index-key"}

func (a *archiveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.dsn, "archive", "", "archive DSN (as for serve)")
	fs.StringVar(&a.keys, "keys", "", "keyring text (as for serve)")
	fs.StringVar(&a.keyFile, "key-file", "", "keyring file (as for serve)")
	fs.StringVar(&a.dataDir, "data-dir", crypto.DefaultDataDir(), "data directory (as for serve)")
	fs.StringVar(&a.indexKey, "archive-index-key", "", "key id of the search index (as for serve)")
	fs.StringVar(&a.tenant, "tenant", archive.DefaultTenant, "tenant whose archive to read or change (archive prune without --tenant: every tenant)")
}

// open opens the archive. Without create, an archive that is not there (a mistyped --archive
// or --data-dir) is an error rather than a new empty archive: only commands that write to it
// (sessions index) create it; serve creates it too.
func (a *archiveFlags) open(create bool) (archive.Store, error) {
	if a.dsn == "off" {
		return nil, errors.New("the archive is off (--archive off)")
	}
	// A command that creates the archive creates its keyring too, as serve does; one that reads
	// an archive needs the keyring it was written with.
	ring, _, err := crypto.LoadKeyring(crypto.LoadOptions{Env: a.keys, File: a.keyFile, DataDir: a.dataDir, Generate: create})
	if errors.Is(err, crypto.ErrNoKeyring) {
		return nil, fmt.Errorf("no keyring in %s, so no archive either: give the one serve uses (--keys, --key-file or --data-dir, or COMPACTD_KEYS)", a.dataDir)
	}
	if err != nil {
		return nil, err
	}
	sealer, err := archive.KeyringSealer(ring, a.indexKey)
	if err != nil {
		return nil, err
	}
	openFn := archive.OpenExisting
	if create {
		openFn = archive.Open
	}
	store, err := openFn(context.Background(), archiveDSN(a.dsn, a.dataDir), sealer)
	if errors.Is(err, archive.ErrNoArchive) {
		return nil, fmt.Errorf("%w (check --archive and --data-dir: serve creates the archive where they point)", err)
	}
	return store, err
}

func runRecall(args []string) error {
	fs := flag.NewFlagSet("recall", flag.ContinueOnError)
	var af archiveFlags
	af.register(fs)
	conv := fs.String("conversation", "", "conversation id (required; compactd archive list shows them)")
	limit := fs.Int("k", proxy.DefaultRecallTopK, "number of excerpts")
	excerpt := fs.Int("excerpt-bytes", proxy.DefaultRecallExcerptBytes, "bytes per excerpt")
	if err := parseFlags(fs, args, withArgs(1, -1), withEnv(archiveEnv...)); err != nil {
		return err
	}
	query := strings.Join(fs.Args(), " ")
	switch {
	case *conv == "":
		return usageErrorf("recall", "--conversation is required")
	case strings.TrimSpace(query) == "":
		return usageErrorf("recall", "empty query")
	case *limit <= 0 || *excerpt <= 0:
		return usageErrorf("recall", "-k and --excerpt-bytes must be positive")
	}
	store, err := af.open(false)
	if err != nil {
		return err
	}
	defer store.Close()
	hits, err := store.Search(context.Background(), archive.Query{Text: query, Tenant: af.tenant, Conversation: *conv, Limit: *limit, ExcerptBytes: *excerpt})
	if err != nil {
		return err
	}
	if len(hits) == 0 {
		known, err := hasConversation(store, af.tenant, *conv)
		if err != nil {
			return err
		}
		if !known {
			return fmt.Errorf("tenant %s has no archived conversation %q (compactd archive list shows them)", af.tenant, *conv)
		}
		fmt.Fprintf(os.Stderr, "no archived history of %s matches %q\n", *conv, query)
		return nil
	}
	for i, h := range hits {
		// The owner digest tells apart the credentials that wrote under one conversation id
		// (SECURITY.md §11); "" is a segment from before owners, or a session log.
		owner := h.Owner
		if owner == "" {
			owner = "-"
		}
		fmt.Fprintf(os.Stdout, "[%d] segment %s item %d, owner %s, archived %s, score %.2f\n%s\n\n", i+1, h.SegmentID, h.ItemIndex, owner, h.CreatedAt.UTC().Format(time.RFC3339), h.Score, h.Excerpt)
	}
	return nil
}

// hasConversation reports whether the tenant's archive holds the conversation.
func hasConversation(store archive.Store, tenant, conv string) (bool, error) {
	convs, err := store.Conversations(context.Background(), tenant)
	if err != nil {
		return false, err
	}
	for _, c := range convs {
		if c.ID == conv {
			return true, nil
		}
	}
	return false, nil
}

// runArchive is `compactd archive list | delete ID | prune`. The subcommand is the first
// positional argument, so flags may stand before or after it; flags of one subcommand are
// rejected on the others (--max-age on list is a mistake, not a no-op).
func runArchive(args []string) error {
	fs := flag.NewFlagSet("archive", flag.ContinueOnError)
	var af archiveFlags
	af.register(fs)
	maxAge := fs.Duration("max-age", 0, "prune: delete segments older than this")
	maxBytes := fs.Int64("max-bytes", 0, "prune: delete each tenant's oldest segments past this many bytes of that tenant (with --tenant: that tenant's only)")
	maxTotal := fs.Int64("max-total-bytes", 0, "prune: then, while all tenants together hold more than this, delete the oldest segments of the largest tenant")
	if err := parseFlags(fs, args, withArgs(1, 2), withEnv(archiveEnv...)); err != nil {
		return err
	}
	rest := fs.Args()
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	sub := rest[0]
	switch sub {
	case "list", "delete", "prune":
	default:
		return usageErrorf("archive", "unknown subcommand %q (want list, delete or prune)", sub)
	}
	if sub != "prune" && (set["max-age"] || set["max-bytes"] || set["max-total-bytes"]) {
		return usageErrorf("archive", "--max-age, --max-bytes and --max-total-bytes are flags of archive prune, not archive %s", sub)
	}
	if want := map[string]int{"list": 1, "delete": 2, "prune": 1}[sub]; len(rest) != want {
		if want == 2 {
			return usageErrorf("archive", "archive delete takes one CONVERSATION_ID")
		}
		return usageErrorf("archive", "unexpected argument %q", rest[want])
	}
	retention := archive.Retention{MaxAge: *maxAge, MaxBytes: *maxBytes, MaxTotalBytes: *maxTotal}
	if sub == "prune" {
		// A prune without a limit would delete nothing and exit 0: retention that silently
		// does nothing.
		if *maxAge < 0 || *maxBytes < 0 || *maxTotal < 0 {
			return usageErrorf("archive", "--max-age, --max-bytes and --max-total-bytes must not be negative")
		}
		if !retention.Enabled() {
			return usageErrorf("archive", "archive prune needs --max-age, --max-bytes or --max-total-bytes")
		}
		// Without --tenant a prune bounds every tenant (each on its own); with it, that one.
		if set["tenant"] {
			if *maxTotal > 0 {
				return usageErrorf("archive", "--max-total-bytes bounds all tenants together; it cannot be combined with --tenant")
			}
			retention.Tenant = cmp.Or(af.tenant, archive.DefaultTenant)
		}
	}
	store, err := af.open(false)
	if err != nil {
		return err
	}
	defer store.Close()
	ctx := context.Background()
	switch sub {
	case "list":
		convs, err := store.Conversations(ctx, af.tenant)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CONVERSATION\tSEGMENTS\tBYTES\tFIRST\tLAST")
		for _, c := range convs {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", c.ID, c.Segments, c.Bytes, c.First.UTC().Format(time.RFC3339), c.Last.UTC().Format(time.RFC3339))
		}
		return tw.Flush()
	case "delete":
		n, err := store.DeleteConversation(ctx, af.tenant, rest[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stdout, "deleted %s of %s\n", english.Count(n, "segment"), rest[1])
		return nil
	}
	n, err := store.Prune(ctx, retention)
	if err != nil {
		return err
	}
	if retention.Tenant != "" {
		fmt.Fprintf(os.Stdout, "pruned %s of tenant %s\n", english.Count(n, "segment"), retention.Tenant)
	} else {
		fmt.Fprintf(os.Stdout, "pruned %s\n", english.Count(n, "segment"))
	}
	return nil
}
