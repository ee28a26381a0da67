package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/compactd/compactd/internal/agenthooks"
	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/session"
)

// SessionConvPrefix is the archive conversation prefix of indexed session logs; the same as
// `compactd sessions index`, so both see one index.
const SessionConvPrefix = "session:"

// Indexer keeps the sessions index current incrementally: a log is (re)indexed only when its
// size or modification time changed since the last pass, so the first search after a long
// session indexes that one session, not the project's history.
type Indexer struct {
	Store     archive.Store
	Tenant    string
	Dirs      []string
	StatePath string

	mu     sync.Mutex
	loaded bool
	state  map[string]fileState
}

type fileState struct {
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mtime"`
}

// maxLineBytes: a transcript line longer than this (a huge file read) is indexed by its first
// part only; the archive bounds segments anyway.
const maxLineBytes = 4 << 20

// Refresh indexes the logs that changed and returns how many it indexed.
func (ix *Indexer) Refresh(ctx context.Context) (int, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if !ix.loaded {
		ix.state = map[string]fileState{}
		if ix.StatePath != "" {
			if b, err := os.ReadFile(ix.StatePath); err == nil && jsonx.CheckDepth(b, 8) == nil {
				_ = json.Unmarshal(b, &ix.state)
			}
		}
		ix.loaded = true
	}
	n := 0
	for _, d := range ix.Dirs {
		err := filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
			if err != nil {
				return nil // a missing or unreadable directory is simply empty
			}
			if de.IsDir() || !strings.HasSuffix(p, ".jsonl") {
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			info, err := de.Info()
			if err != nil {
				return nil
			}
			st := fileState{Size: info.Size(), ModTime: info.ModTime().UTC()}
			if old, ok := ix.state[p]; ok && old.Size == st.Size && old.ModTime.Equal(st.ModTime) {
				return nil
			}
			if err := ix.index(ctx, p, info.ModTime()); err != nil {
				return nil // an unparsable log is skipped, not fatal
			}
			ix.state[p] = st
			n++
			return nil
		})
		if err != nil {
			return n, err
		}
	}
	if n > 0 && ix.StatePath != "" {
		if err := ix.save(); err != nil {
			return n, err
		}
	}
	return n, nil
}

func (ix *Indexer) save() error {
	b, err := json.Marshal(ix.state)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(ix.StatePath), 0o700); err != nil {
		return err
	}
	tmp := ix.StatePath + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, ix.StatePath)
}

// index replaces one log's segment. It reads the log through agenthooks.OpenTranscript (the
// newest 32 MiB at most) and depth-checks each line before the archive's walker sees it.
func (ix *Indexer) index(ctx context.Context, path string, mod time.Time) error {
	r, err := agenthooks.OpenTranscript(path)
	if err != nil {
		return err
	}
	defer r.Close()
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	sess, err := session.ParseSession(bytes.NewReader(raw), session.FormatAuto)
	if err != nil {
		return err
	}
	id := sess.ID
	if id == "" {
		id = strings.TrimSuffix(filepath.Base(path), ".jsonl")
	}
	var items []json.RawMessage
	br := bufio.NewReaderSize(bytes.NewReader(raw), 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 && len(t) <= maxLineBytes && jsonx.CheckDepth(t, jsonx.MaxDepth) == nil && json.Valid(t) {
			items = append(items, append(json.RawMessage(nil), t...))
		}
		if err != nil {
			break
		}
	}
	if len(items) == 0 {
		return fmt.Errorf("%s: no records", path)
	}
	created := mod
	if t, err := time.Parse(time.RFC3339Nano, sess.Start); err == nil {
		created = t
	}
	conv := SessionConvPrefix + id
	if _, err := ix.Store.DeleteConversation(ctx, ix.Tenant, conv); err != nil {
		return err
	}
	_, err = ix.Store.Put(ctx, archive.Segment{
		Tenant: ix.Tenant, Conversation: conv, Kind: archive.KindSession, CreatedAt: created, Items: items,
		Meta: map[string]string{"format": string(sess.Format), "path": path},
	})
	return err
}
