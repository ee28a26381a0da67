package main

import (
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

	"github.com/compactd/compactd/archive"
	"github.com/compactd/compactd/crypto"
)

func init() {
	register("recall", "search a conversation's archived history: compactd recall --conversation ID \"query\"", runRecall)
	register("archive", "list, prune or delete archived conversations (archive list | delete ID | prune)", runArchive)
}

// archiveDSN resolves --archive: "" is SQLite in the data directory, "off" disables it.
func archiveDSN(dsn, dataDir string) string {
	if dsn == "" {
		return "sqlite:" + filepath.Join(dataDir, "archive.db")
	}
	return dsn
}

// openArchive opens the archive for serve and starts its retention loop; nil when it is off.
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
	if c.archiveMaxAge > 0 || c.archiveMaxBytes > 0 {
		go retain(store, archive.Retention{MaxAge: c.archiveMaxAge, MaxBytes: c.archiveMaxBytes}, log)
	}
	return store, nil
}

// retain applies the retention policy at start and every ten minutes.
func retain(store archive.Store, r archive.Retention, log *slog.Logger) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		n, err := store.Prune(ctx, r)
		cancel()
		if err != nil {
			log.Warn("archive retention failed", "err", err)
		} else if n > 0 {
			log.Info("archive retention", "segments_deleted", n)
		}
		time.Sleep(10 * time.Minute)
	}
}

// archiveFlags are the flags the archive CLI commands share with serve.
type archiveFlags struct{ dsn, keys, keyFile, dataDir, indexKey, tenant string }

func (a *archiveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.dsn, "archive", "", "archive DSN (as for serve)")
	fs.StringVar(&a.keys, "keys", "", "keyring text (as for serve)")
	fs.StringVar(&a.keyFile, "key-file", "", "keyring file (as for serve)")
	fs.StringVar(&a.dataDir, "data-dir", crypto.DefaultDataDir(), "data directory (as for serve)")
	fs.StringVar(&a.indexKey, "archive-index-key", "", "key id of the search index (as for serve)")
	fs.StringVar(&a.tenant, "tenant", archive.DefaultTenant, "tenant")
}

func (a *archiveFlags) open() (archive.Store, error) {
	if a.dsn == "off" {
		return nil, errors.New("the archive is off (--archive off)")
	}
	ring, _, err := crypto.LoadKeyring(crypto.LoadOptions{Env: a.keys, File: a.keyFile, DataDir: a.dataDir})
	if err != nil {
		return nil, err
	}
	sealer, err := archive.KeyringSealer(ring, a.indexKey)
	if err != nil {
		return nil, err
	}
	return archive.Open(context.Background(), archiveDSN(a.dsn, a.dataDir), sealer)
}

func runRecall(args []string) error {
	fs := flag.NewFlagSet("recall", flag.ContinueOnError)
	var af archiveFlags
	af.register(fs)
	conv := fs.String("conversation", "", "conversation id (required; see `compactd archive list`)")
	limit := fs.Int("k", 5, "number of excerpts")
	excerpt := fs.Int("excerpt-bytes", 1200, "bytes per excerpt")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	query := strings.Join(fs.Args(), " ")
	if *conv == "" || query == "" {
		return errors.New(`usage: compactd recall --conversation ID "query"`)
	}
	store, err := af.open()
	if err != nil {
		return err
	}
	defer store.Close()
	hits, err := store.Search(context.Background(), archive.Query{Text: query, Tenant: af.tenant, Conversation: *conv, Limit: *limit, ExcerptBytes: *excerpt})
	if err != nil {
		return err
	}
	if len(hits) == 0 {
		fmt.Fprintf(os.Stderr, "no archived history of %s matches %q\n", *conv, query)
		return nil
	}
	for i, h := range hits {
		fmt.Printf("[%d] segment %s item %d, archived %s, score %.2f\n%s\n\n", i+1, h.SegmentID, h.ItemIndex, h.CreatedAt.UTC().Format(time.RFC3339), h.Score, h.Excerpt)
	}
	return nil
}

func runArchive(args []string) error {
	fs := flag.NewFlagSet("archive", flag.ContinueOnError)
	var af archiveFlags
	af.register(fs)
	maxAge := fs.Duration("max-age", 0, "prune: delete segments older than this")
	maxBytes := fs.Int64("max-bytes", 0, "prune: delete oldest segments past this many bytes")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return errors.New("usage: compactd archive list | delete CONVERSATION_ID | prune --max-age D --max-bytes N")
	}
	store, err := af.open()
	if err != nil {
		return err
	}
	defer store.Close()
	ctx := context.Background()
	switch rest[0] {
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
		if len(rest) != 2 {
			return errors.New("usage: compactd archive delete CONVERSATION_ID")
		}
		n, err := store.DeleteConversation(ctx, af.tenant, rest[1])
		if err != nil {
			return err
		}
		fmt.Printf("deleted %d segments of %s\n", n, rest[1])
		return nil
	case "prune":
		n, err := store.Prune(ctx, archive.Retention{MaxAge: *maxAge, MaxBytes: *maxBytes})
		if err != nil {
			return err
		}
		fmt.Printf("pruned %d segments\n", n)
		return nil
	}
	return fmt.Errorf("unknown archive command %q", rest[0])
}
