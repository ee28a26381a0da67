package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/crypto"
)

// tenantArchive is an archive in a temporary data directory with segments of several tenants,
// one conversation per segment, written oldest first.
type tenantArchive struct {
	keys, dir string
	convs     map[string][]string // tenant → its conversations, oldest first
	bytes     map[string]int64    // conversation → stored bytes
}

func newTenantArchive(t *testing.T, segments map[string][]time.Duration) *tenantArchive {
	t.Helper()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	a := &tenantArchive{keys: key.String(), dir: t.TempDir(), convs: map[string][]string{}, bytes: map[string]int64{}}
	store := openTestArchive(t, a.keys, a.dir)
	defer store.Close()
	ctx := context.Background()
	for _, tenant := range slices.Sorted(func(yield func(string) bool) {
		for k := range segments {
			if !yield(k) {
				return
			}
		}
	}) {
		for i, age := range segments[tenant] {
			conv := fmt.Sprintf("%s-%d", tenant, i)
			seg := archive.Segment{Tenant: tenant, Conversation: conv, CreatedAt: time.Now().Add(-age),
				Items: []json.RawMessage{json.RawMessage(`{"type":"message","role":"user","content":"hello, this is the archived text"}`)}}
			if _, err := store.Put(ctx, seg); err != nil {
				t.Fatal(err)
			}
			a.convs[tenant] = append(a.convs[tenant], conv)
		}
		infos, err := store.Conversations(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range infos {
			a.bytes[c.ID] = c.Bytes
		}
	}
	return a
}

// kept reports, per tenant, which of its conversations (oldest first) are still archived.
func (a *tenantArchive) kept(t *testing.T) map[string][]bool {
	t.Helper()
	store := openTestArchive(t, a.keys, a.dir)
	defer store.Close()
	out := map[string][]bool{}
	for tenant, convs := range a.convs {
		infos, err := store.Conversations(context.Background(), tenant)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range convs {
			out[tenant] = append(out[tenant], slices.ContainsFunc(infos, func(i archive.ConversationInfo) bool { return i.ID == c }))
		}
	}
	return out
}

func (a *tenantArchive) tenantBytes(tenant string) int64 {
	var n int64
	for _, c := range a.convs[tenant] {
		n += a.bytes[c]
	}
	return n
}

func boolsOf(s string) []bool { // "-+" → [false true]
	out := make([]bool, len(s))
	for i, c := range s {
		out[i] = c == '+'
	}
	return out
}

// TestArchivePruneTenant: issue 22, defect 4: `archive prune --tenant X` pruned every tenant.
// With --tenant it prunes that tenant only; without, every tenant, each against its own bound.
func TestArchivePruneTenant(t *testing.T) {
	old, fresh := 72*time.Hour, time.Duration(0)
	two := map[string][]time.Duration{"x": {old, fresh}, "y": {old, fresh}}
	for _, tc := range []struct {
		name     string
		segments map[string][]time.Duration
		args     func(a *tenantArchive) []string
		wantCode int
		want     map[string]string // tenant → kept pattern, oldest first ('+' kept)
	}{
		{"--tenant by age", two, func(a *tenantArchive) []string { return []string{"--tenant", "x", "--max-age", "24h"} },
			0, map[string]string{"x": "-+", "y": "++"}},
		{"--tenant by size", two, func(a *tenantArchive) []string { return []string{"--tenant", "x", "--max-bytes", "1"} },
			0, map[string]string{"x": "--", "y": "++"}},
		{"every tenant by age", two, func(a *tenantArchive) []string { return []string{"--max-age", "24h"} },
			0, map[string]string{"x": "-+", "y": "-+"}},
		{"every tenant by size, each its own bound", two, func(a *tenantArchive) []string {
			return []string{"--max-bytes", fmt.Sprint(max(a.bytes["x-1"], a.bytes["y-1"]))}
		}, 0, map[string]string{"x": "-+", "y": "-+"}},
		// x holds the oldest segment of all, y the most bytes: y loses its oldest.
		{"a total ceiling: the largest tenant first", map[string][]time.Duration{"x": {old + 2*time.Hour, fresh}, "y": {old + time.Hour, old, fresh}},
			func(a *tenantArchive) []string {
				return []string{"--max-total-bytes", fmt.Sprint(a.tenantBytes("x") + a.tenantBytes("y") - 1)}
			}, 0, map[string]string{"x": "++", "y": "-++"}},
		{"a total ceiling is not per tenant", two, func(a *tenantArchive) []string {
			return []string{"--tenant", "x", "--max-total-bytes", "1"}
		}, 2, map[string]string{"x": "++", "y": "++"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearCompactdEnv(t)
			a := newTenantArchive(t, tc.segments)
			args := append([]string{"archive", "prune", "--keys", a.keys, "--data-dir", a.dir}, tc.args(a)...)
			code, stdout, stderr := runCLI(t, args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, stdout, stderr)
			}
			want := map[string][]bool{}
			for tenant, p := range tc.want {
				want[tenant] = boolsOf(p)
			}
			if got := a.kept(t); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("kept %v, want %v (stdout %q)", got, want, stdout)
			}
		})
	}
}

// TestArchiveCommandsRefuseAMissingArchive: issue 22, item 15: `archive list` on a mistyped
// path created the directories and an empty database and listed nothing. The commands that
// only use an archive refuse one that is not there (exit 1) and create nothing; sessions index,
// which writes, still creates it.
func TestArchiveCommandsRefuseAMissingArchive(t *testing.T) {
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		create bool
	}{
		{"archive list", []string{"archive", "list"}, false},
		{"archive delete", []string{"archive", "delete", "conv-1"}, false},
		{"archive prune", []string{"archive", "prune", "--max-age", "24h"}, false},
		{"recall", []string{"recall", "--conversation", "conv-1", "parseConfig"}, false},
		{"sessions search", []string{"sessions", "search", "parseConfig"}, false},
	} {
		for _, where := range []string{"--archive", "--data-dir"} {
			t.Run(tc.name+" "+where, func(t *testing.T) {
				clearCompactdEnv(t)
				root := t.TempDir()
				typo := filepath.Join(root, "stat", "compactd") // a mistyped "state"
				args := append(slices.Clone(tc.args), "--keys", key.String())
				if where == "--archive" {
					args = append(args, "--archive", "sqlite:"+filepath.Join(typo, "archive.db"), "--data-dir", root)
				} else {
					args = append(args, "--data-dir", typo)
				}
				code, stdout, stderr := runCLI(t, args...)
				if code != 1 || !strings.Contains(stderr, "no archive") || !strings.Contains(stderr, filepath.Join(typo, "archive.db")) {
					t.Errorf("exit %d, want 1 naming the missing archive\nstdout: %s\nstderr: %s", code, stdout, stderr)
				}
				var made []string
				filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
					if p != root {
						made = append(made, p)
					}
					return nil
				})
				if len(made) > 0 {
					t.Errorf("created %q", made)
				}
			})
		}
	}
	t.Run("sessions index creates it", func(t *testing.T) {
		clearCompactdEnv(t)
		root := t.TempDir()
		logs := filepath.Join(root, "logs")
		if err := os.MkdirAll(logs, 0o700); err != nil {
			t.Fatal(err)
		}
		db := filepath.Join(root, "new", "archive.db")
		code, stdout, stderr := runCLI(t, "sessions", "index", logs, "--keys", key.String(), "--archive", "sqlite:"+db)
		if _, err := os.Stat(db); code != 0 || err != nil {
			t.Errorf("exit %d, stat %v\nstdout: %s\nstderr: %s", code, err, stdout, stderr)
		}
	})
}

// logEvents is a slog handler that sends each record's message on a channel.
type logEvents chan string

func (l logEvents) Enabled(context.Context, slog.Level) bool { return true }
func (l logEvents) Handle(_ context.Context, r slog.Record) error {
	select {
	case l <- r.Message:
	default:
	}
	return nil
}
func (l logEvents) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logEvents) WithGroup(string) slog.Handler      { return l }

// TestServeRetentionPerTenant: issue 22, defect 3, through serve's flags: --archive-max-bytes
// bounds each tenant on its own (it was one global budget, and a busy tenant's traffic evicted a
// quiet tenant's older archive whole), and --archive-max-total-bytes trims the largest tenant.
func TestServeRetentionPerTenant(t *testing.T) {
	const min = time.Minute
	for _, tc := range []struct {
		name string
		flag func(a *tenantArchive) []string
		want map[string]string
	}{
		{"per tenant", func(a *tenantArchive) []string {
			return []string{"--archive-max-bytes", fmt.Sprint(a.tenantBytes("quiet"))}
		}, map[string]string{"quiet": "++", "busy": "--++"}},
		{"total ceiling", func(a *tenantArchive) []string {
			return []string{"--archive-max-total-bytes", fmt.Sprint(a.tenantBytes("quiet") + a.tenantBytes("busy") - 1)}
		}, map[string]string{"quiet": "++", "busy": "-+++"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearCompactdEnv(t)
			// The quiet tenant's segments are the oldest of all.
			a := newTenantArchive(t, map[string][]time.Duration{"quiet": {60 * min, 50 * min}, "busy": {40 * min, 30 * min, 20 * min, 10 * min}})
			c, _, err := parseServeFlags(append([]string{"--upstream", "http://127.0.0.1:1", "--memory-limit", "0",
				"--keys", a.keys, "--data-dir", a.dir}, tc.flag(a)...))
			if err != nil {
				t.Fatal(err)
			}
			events := make(logEvents, 1024)
			srv, err := c.build(slog.New(events))
			if err != nil {
				t.Fatal(err)
			}
			// The retention loop's first pass runs at once and reports what it deleted (a pass
			// that deletes nothing says nothing: the guard below is for that failure, not a speed).
			guard := time.After(time.Minute)
		wait:
			for {
				select {
				case msg := <-events:
					if msg == "archive retention" || msg == "archive retention failed" {
						break wait
					}
				case <-guard:
					t.Error("no retention pass reported")
					break wait
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := srv.Close(ctx); err != nil {
				t.Fatal(err)
			}
			want := map[string][]bool{}
			for tenant, p := range tc.want {
				want[tenant] = boolsOf(p)
			}
			if got := a.kept(t); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("kept %v, want %v", got, want)
			}
		})
	}
}
