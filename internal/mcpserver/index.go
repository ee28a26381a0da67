package mcpserver

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// Indexer keeps the sessions index current incrementally. Agent session logs are append-only
// JSONL, so a log that grew since the last pass has only its new complete lines read and
// archived, as one more segment of the session's conversation: the first search after a long
// session costs what the session added since the previous search, not the whole log, let alone
// the project's history. A log that shrank or whose already-indexed bytes changed (rewritten,
// replaced) is re-indexed whole, as is one that has gathered maxSegments incremental segments.
type Indexer struct {
	Store     archive.Store
	Tenant    string
	Dirs      []string
	StatePath string
	// SharedDirs hold many projects' logs (Codex keeps every project's rollouts in one tree):
	// a log there is indexed only when the working directory it records is Project or inside it.
	SharedDirs []string
	Project    string

	mu     sync.Mutex
	loaded bool
	state  map[string]fileState
}

// fileState is what the previous pass saw of one log. Offset is the end of the last complete
// line indexed; Head and Tail fingerprint the bytes before it (see fingerprint), so that an
// append is told apart from a rewrite without rereading the indexed part.
type fileState struct {
	Size     int64     `json:"size"`
	ModTime  time.Time `json:"mtime"`
	Offset   int64     `json:"offset,omitempty"`
	Print    string    `json:"print,omitempty"`
	Conv     string    `json:"conv,omitempty"`
	Format   string    `json:"format,omitempty"`
	Last     string    `json:"last,omitempty"` // newest segment id, the lineage's Previous
	Segments int       `json:"segments,omitempty"`
}

// Stats says what one Refresh did.
type Stats struct {
	Logs      int   // logs indexed (whole or incrementally)
	Appended  int   // of which only the new part was read
	BytesRead int64 // log bytes read this pass
}

// maxLineBytes: a transcript line longer than this (a huge file read) is indexed by its first
// part only; the archive bounds segments anyway.
const maxLineBytes = 4 << 20

// maxSegments bounds the segments one session's conversation gathers through appends; past it
// the log is re-indexed as one segment, so that searches and the archive stay compact.
const maxSegments = 64

// printBytes is how much of the indexed part, at each end, the fingerprint covers.
const printBytes = 4096

// Refresh indexes the logs that changed and returns how many it indexed.
func (ix *Indexer) Refresh(ctx context.Context) (int, error) {
	st, err := ix.RefreshStats(ctx)
	return st.Logs, err
}

// RefreshStats is Refresh with the details of what was read.
func (ix *Indexer) RefreshStats(ctx context.Context) (Stats, error) {
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
	var stats Stats
	dirty := false
	dirs := append(append([]string{}, ix.Dirs...), ix.SharedDirs...)
	for i, d := range dirs {
		shared := i >= len(ix.Dirs)
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
			if err != nil || !info.Mode().IsRegular() {
				return nil // a FIFO or device named *.jsonl would block or never end
			}
			old, seen := ix.state[p]
			if seen && old.Size == info.Size() && old.ModTime.Equal(info.ModTime().UTC()) {
				return nil
			}
			if shared && !InProject(p, ix.Project) {
				// Remembered, so that an unchanged log of another project is not opened again.
				ix.state[p] = fileState{Size: info.Size(), ModTime: info.ModTime().UTC()}
				dirty = true
				return nil
			}
			st, appended, read, err := ix.index(ctx, p, info, old, seen)
			stats.BytesRead += read
			if err != nil {
				return nil // an unparsable log is skipped, not fatal
			}
			ix.state[p] = st
			stats.Logs++
			if appended {
				stats.Appended++
			}
			return nil
		})
		if err != nil {
			return stats, err
		}
	}
	if (stats.Logs > 0 || dirty) && ix.StatePath != "" {
		if err := ix.save(); err != nil {
			return stats, err
		}
	}
	return stats, nil
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

// fingerprint hashes the first and the last printBytes of f[0:off): cheap to recompute, and an
// append-only log keeps both, while a rewritten or replaced one almost never does.
func fingerprint(f *os.File, off int64) (string, error) {
	h := sha256.New()
	n := min(off, printBytes)
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, n)); err != nil {
		return "", err
	}
	if _, err := io.Copy(h, io.NewSectionReader(f, max(0, off-printBytes), min(off, printBytes))); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// index indexes one log: only what follows old.Offset when the log is the same one grown,
// otherwise all of it (its newest MaxTranscriptBytes, like the hooks). It reads complete lines
// only, so a record being written is picked up whole by the next pass.
func (ix *Indexer) index(ctx context.Context, path string, info os.FileInfo, old fileState, seen bool) (st fileState, appended bool, read int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return st, false, 0, err
	}
	defer f.Close()
	size := info.Size()
	if seen && old.Conv != "" && old.Offset > 0 && old.Offset <= size && old.Segments < maxSegments {
		if p, err := fingerprint(f, old.Offset); err == nil && p == old.Print {
			appended = true
		}
	}
	from := int64(0)
	if appended {
		from = old.Offset
	}
	if lim := agenthooks.MaxTranscriptBytes; size-from > int64(lim) {
		from = size - int64(lim) // the cut first line fails to parse and is dropped
	}
	raw, err := io.ReadAll(io.NewSectionReader(f, from, size-from))
	if err != nil {
		return st, false, int64(len(raw)), err
	}
	read = int64(len(raw))
	// Only complete lines: the agent may be in the middle of writing the last one.
	end := bytes.LastIndexByte(raw, '\n') + 1
	raw = raw[:end]
	st = fileState{Size: size, ModTime: info.ModTime().UTC(), Offset: from + int64(end)}
	if st.Print, err = fingerprint(f, st.Offset); err != nil {
		return st, false, read, err
	}
	var items []json.RawMessage
	for line := range bytes.SplitSeq(raw, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && len(t) <= maxLineBytes && jsonx.CheckDepth(t, jsonx.MaxDepth) == nil && json.Valid(t) {
			items = append(items, append(json.RawMessage(nil), t...))
		}
	}
	if appended {
		st.Conv, st.Format, st.Segments = old.Conv, old.Format, old.Segments
		if len(items) == 0 {
			st.Last = old.Last
			return st, true, read, nil // grew by a partial line only
		}
		ref, err := ix.Store.Put(ctx, archive.Segment{
			Tenant: ix.Tenant, Conversation: old.Conv, Kind: archive.KindSession, CreatedAt: info.ModTime(),
			Previous: old.Last, Items: items, Meta: map[string]string{"format": old.Format, "path": path, "from": fmt.Sprint(from)},
		})
		if err != nil {
			return st, true, read, err
		}
		st.Last, st.Segments = ref.ID, old.Segments+1
		return st, true, read, nil
	}
	if len(items) == 0 {
		return st, false, read, fmt.Errorf("%s: no records", path)
	}
	sess, err := session.ParseSession(bytes.NewReader(raw), session.FormatAuto)
	if err != nil {
		return st, false, read, err
	}
	id := sess.ID
	if id == "" {
		id = strings.TrimSuffix(filepath.Base(path), ".jsonl")
	}
	created := info.ModTime()
	if t, err := time.Parse(time.RFC3339Nano, sess.Start); err == nil {
		created = t
	}
	st.Conv, st.Format = SessionConvPrefix+id, string(sess.Format)
	if _, err := ix.Store.DeleteConversation(ctx, ix.Tenant, st.Conv); err != nil {
		return st, false, read, err
	}
	ref, err := ix.Store.Put(ctx, archive.Segment{
		Tenant: ix.Tenant, Conversation: st.Conv, Kind: archive.KindSession, CreatedAt: created, Items: items,
		Meta: map[string]string{"format": st.Format, "path": path},
	})
	if err != nil {
		return st, false, read, err
	}
	st.Last, st.Segments = ref.ID, 1
	return st, false, read, nil
}

// InProject reports whether the session log at path records a working directory that is project
// or inside it. It reads the first records only (Codex's session_meta carries payload.cwd, Claude
// Code's records a top-level cwd), at most 1 MiB, so checking another project's log is cheap.
func InProject(path, project string) bool {
	if project == "" {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	br := bufio.NewReaderSize(io.LimitReader(f, 1<<20), 64<<10)
	for range 8 {
		line, err := br.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 && jsonx.CheckDepth(t, jsonx.MaxDepth) == nil {
			var rec struct {
				CWD     string `json:"cwd"`
				Payload struct {
					CWD string `json:"cwd"`
				} `json:"payload"`
			}
			if json.Unmarshal(t, &rec) == nil {
				if cwd := cmp.Or(rec.Payload.CWD, rec.CWD); cwd != "" {
					return within(filepath.Clean(cwd), filepath.Clean(project))
				}
			}
		}
		if err != nil {
			return false
		}
	}
	return false
}

func within(dir, project string) bool {
	return dir == project || strings.HasPrefix(dir, strings.TrimSuffix(project, string(filepath.Separator))+string(filepath.Separator))
}
