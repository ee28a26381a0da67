package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/english"
	"github.com/compactd/compactd/internal/session"
)

// Session logs go into the same encrypted full-text store as the compaction archive, one segment
// per session (kind "session"), under the conversation "session:<id>" so that they never mix with
// a compaction archive that uses the same session id.
const sessionConvPrefix = "session:"

func runSessions(args []string) error {
	fset := flag.NewFlagSet("sessions", flag.ContinueOnError)
	var af archiveFlags
	af.register(fset)
	format := fset.String("format", "auto", "index: session log format, codex, claude or auto")
	limit := fset.Int("k", 10, "search: number of results")
	excerpt := fset.Int("excerpt-bytes", 400, "search: bytes per excerpt")
	if err := parseFlags(fset, args, withArgs(1, -1), withEnv(archiveEnv...)); err != nil {
		return err
	}
	rest := fset.Args()
	set := map[string]bool{}
	fset.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case rest[0] != "index" && rest[0] != "search":
		return usageErrorf("sessions", "unknown subcommand %q (want index or search)", rest[0])
	case len(rest) < 2 && rest[0] == "index":
		return usageErrorf("sessions", "sessions index needs a DIR")
	case len(rest) < 2:
		return usageErrorf("sessions", "sessions search needs a QUERY")
	case rest[0] == "index" && (set["k"] || set["excerpt-bytes"]):
		return usageErrorf("sessions", "-k and --excerpt-bytes are flags of sessions search, not sessions index")
	case rest[0] == "search" && set["format"]:
		return usageErrorf("sessions", "--format is a flag of sessions index, not sessions search")
	case *limit <= 0 || *excerpt <= 0:
		return usageErrorf("sessions", "-k and --excerpt-bytes must be positive")
	}
	store, err := af.open(rest[0] == "index") // search needs an archive that is there
	if err != nil {
		return err
	}
	defer store.Close()
	ctx := context.Background()
	if rest[0] == "search" {
		return searchSessions(ctx, store, af.tenant, strings.Join(rest[1:], " "), *limit, *excerpt)
	}
	f, err := session.ParseFormat(*format)
	if err != nil {
		return err
	}
	n := 0
	for _, dir := range rest[1:] {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".jsonl") {
				return err
			}
			id, err := indexSession(ctx, store, af.tenant, path, f)
			if err != nil {
				fmt.Fprintf(os.Stderr, "sessions: skipping %s: %v\n", path, err)
				return nil
			}
			n++
			fmt.Fprintf(os.Stdout, "indexed %s  %s\n", id, path)
			return nil
		})
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "sessions: indexed %s\n", english.Count(n, "session log"))
	return nil
}

// indexSession (re)indexes one log: the previous copy of the same session is replaced, so
// indexing a growing session again is safe.
func indexSession(ctx context.Context, store archive.Store, tenant, path string, f session.Format) (string, error) {
	sess, err := session.ParseSessionFile(path, f)
	if err != nil {
		return "", err
	}
	id := sess.ID
	if id == "" {
		id = strings.TrimSuffix(filepath.Base(path), ".jsonl")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var items []json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		if line := bytes.TrimSpace(sc.Bytes()); json.Valid(line) {
			items = append(items, append(json.RawMessage(nil), line...))
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	created := time.Now()
	if t, err := time.Parse(time.RFC3339Nano, sess.Start); err == nil {
		created = t
	}
	conv := sessionConvPrefix + id
	if _, err := store.DeleteConversation(ctx, tenant, conv); err != nil {
		return "", err
	}
	_, err = store.Put(ctx, archive.Segment{
		Tenant: tenant, Conversation: conv, Kind: archive.KindSession, CreatedAt: created, Items: items,
		Meta: map[string]string{"format": string(sess.Format), "path": path},
	})
	return id, err
}

func searchSessions(ctx context.Context, store archive.Store, tenant, query string, limit, excerpt int) error {
	hits, err := store.Search(ctx, archive.Query{Text: query, Tenant: tenant, Kind: archive.KindSession, Limit: limit, ExcerptBytes: excerpt})
	if err != nil {
		return err
	}
	if len(hits) == 0 {
		fmt.Fprintf(os.Stderr, "no indexed session matches %q\n", query)
		return nil
	}
	for _, h := range hits {
		fmt.Fprintf(os.Stdout, "%s  %s\n  %s\n\n", strings.TrimPrefix(h.Conversation, sessionConvPrefix), h.CreatedAt.UTC().Format(time.RFC3339),
			strings.ReplaceAll(h.Excerpt, "\n", "\n  "))
	}
	return nil
}
