package session

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ResumePath is where the resume of a session log is written: next to it, with ".jsonl" replaced
// by ".resume.md".
func ResumePath(sessionPath string) string {
	return strings.TrimSuffix(sessionPath, ".jsonl") + ".resume.md"
}

// Watcher keeps resume prompts next to the session logs under Dir up to date. A session is handed
// to Handle once it has been idle (unchanged) for Idle, or has grown by MaxBytes since its last
// resume, so a live session gets a fresh resume before its agent compacts and a finished one gets
// exactly one. Polling, not inotify: session directories are small, and polling works the same on
// every filesystem, including network mounts where agents sometimes keep their home.
type Watcher struct {
	Dir      string
	Idle     time.Duration
	MaxBytes int64
	// Handle writes the resume for one session log.
	Handle func(ctx context.Context, sessionPath string) error

	files   map[string]*watchedFile
	started bool
}

type watchedFile struct {
	size    int64
	mod     time.Time
	changed time.Time // when this watcher last saw size or mtime change
	written int64     // size at the last Handle; -1 before any
}

// Scan looks at the directory once, as of now, and calls Handle for every session that is due. It
// returns the sessions handled, in path order, and the errors of those that failed (a failed
// session is not retried until it changes again, so a malformed log cannot spin the watcher).
//
// Logs already present and idle when the watcher starts are treated as handled: starting a watch
// on ~/.codex/sessions must not write a resume beside every session of the past months.
func (w *Watcher) Scan(ctx context.Context, now time.Time) ([]string, error) {
	if w.files == nil {
		w.files = map[string]*watchedFile{}
	}
	first := !w.started
	w.started = true
	var paths []string
	err := filepath.WalkDir(w.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == w.Dir {
				return err
			}
			return nil // a subdirectory vanished mid-walk: skip it
		}
		if !d.IsDir() && strings.HasSuffix(p, ".jsonl") {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var handled []string
	var errs []error
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			continue
		}
		f := w.files[p]
		if f == nil {
			f = &watchedFile{size: info.Size(), mod: info.ModTime(), changed: now, written: -1}
			if first && now.Sub(info.ModTime()) >= w.Idle {
				f.written = info.Size()
			}
			w.files[p] = f
		} else if info.Size() != f.size || !info.ModTime().Equal(f.mod) {
			f.size, f.mod, f.changed = info.Size(), info.ModTime(), now
		}
		if f.size == f.written {
			continue
		}
		grown := w.MaxBytes > 0 && f.size-max(f.written, 0) >= w.MaxBytes
		if now.Sub(f.changed) < w.Idle && !grown {
			continue
		}
		if err := ctx.Err(); err != nil {
			return handled, err
		}
		f.written = f.size
		if err := w.Handle(ctx, p); err != nil {
			errs = append(errs, err)
			continue
		}
		handled = append(handled, p)
	}
	return handled, errors.Join(errs...)
}

// Run scans every poll interval until ctx is done. Scan errors go to report (which may be nil);
// Run returns nil when ctx is cancelled, since that is how a watch is meant to end.
func (w *Watcher) Run(ctx context.Context, poll time.Duration, report func(handled []string, err error)) error {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		handled, err := w.Scan(ctx, time.Now())
		if ctx.Err() != nil {
			return nil
		}
		if report != nil && (len(handled) > 0 || err != nil) {
			report(handled, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
