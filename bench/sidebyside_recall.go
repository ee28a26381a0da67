package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/handoff"
)

// The recall row: issue 18's 2 MB target must also hold for a handoff turn that gets the recall
// tool spliced in, which needs an archive. It is a second compactd serve process, with an archive
// (SQLite in the run's temp dir), rather than the archive turned on for the main one: with an
// archive, the plain handoff row would get the recall tool too and the two could no longer be
// told apart, and no other row should pay for an archive it does not use.
//
// The fake upstream process keeps no request log, so what compactd forwards on that row is
// checked before measuring by the same compactd (binary, flags, key, data dir and archive) in
// front of an in-process fake that does: one handoff turn, whose forwarded body must carry the
// handoff and the recall tool and no compaction item. The checking process then stops and the
// measured one starts on the same data dir and archive, in front of the fake upstream process,
// and is sent exactly the checked body.

// startRecall starts e.cdRecall and returns the recall row's bodies and what the check found.
func (e *sideEnv) startRecall(ctx context.Context, dir string, size int) (map[string][]byte, string, error) {
	data := filepath.Join(dir, "recall")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, "", err
	}
	archive := filepath.Join(data, "archive.db")
	fake := fakeupstream.New(fakeupstream.Options{})
	fakeURL, stopFake, err := fake.Start()
	if err != nil {
		return nil, "", err
	}
	defer stopFake() // after check.stop: the check process's connections to it are gone by then
	check, err := startProc(ctx, e.serveBin, e.env, e.serveArgs(fakeURL, data, archive)...)
	if err != nil {
		return nil, "", fmt.Errorf("recall row: %w", err)
	}
	bodies, err := handoffBodies(ctx, "http://"+check.addr, size)
	var found string
	if err == nil {
		fake.Reset()
		found, err = checkRecall(ctx, "http://"+check.addr, bodies[SideCompactd], fake.Requests)
	}
	if err == nil {
		err = refusedErr(fake)
	}
	check.stop()
	if err != nil {
		return nil, "", fmt.Errorf("recall row check: %w", err)
	}
	if e.cdRecall, err = startProc(ctx, e.serveBin, e.env, e.serveArgs("http://"+e.fake.addr, data, archive)...); err != nil {
		return nil, "", fmt.Errorf("recall row: %w", err)
	}
	return bodies, found, nil
}

// checkRecall sends body through the compactd at base and checks what reached the upstream
// (requests: its log) for the recall row: one Responses turn with the handoff in it, a function
// tool whose name says recall, and no compaction item.
func checkRecall(ctx context.Context, base string, body []byte, requests func() []fakeupstream.Recorded) (string, error) {
	client := newClient(1)
	defer client.CloseIdleConnections()
	status, resp := post(ctx, client, base+"/v1/responses", body)
	if status != http.StatusOK {
		return "", fmt.Errorf("handoff turn: status %d: %.300s", status, resp)
	}
	var turns []fakeupstream.Recorded
	for _, r := range requests() {
		if r.Kind == dialect.Responses {
			turns = append(turns, r)
		}
	}
	if len(turns) != 1 {
		return "", fmt.Errorf("the upstream got %d Responses turns for one handoff turn, want 1", len(turns))
	}
	return recallFound(turns[0].Body)
}

// recallFound checks one forwarded body of the recall row and says what it carries.
func recallFound(fwd []byte) (string, error) {
	// The prefix's first sentence has nothing JSON escapes, so it is found in the raw bytes.
	first, _, _ := strings.Cut(handoff.Prefix, ",")
	if !bytes.Contains(fwd, []byte(first)) {
		return "", errors.New("the forwarded body carries no handoff")
	}
	var tool string
	gjson.GetBytes(fwd, "tools").ForEach(func(_, t gjson.Result) bool {
		if n := t.Get("name").Str; t.Get("type").Str == "function" && strings.Contains(n, "recall") {
			tool = n
		}
		return tool == ""
	})
	if tool == "" {
		return "", errors.New("the forwarded body offers no recall tool")
	}
	compaction := false
	gjson.GetBytes(fwd, "input").ForEach(func(_, it gjson.Result) bool {
		compaction = it.Get("type").Str == "compaction"
		return !compaction
	})
	if compaction {
		return "", errors.New("the forwarded body still carries the compaction item")
	}
	return fmt.Sprintf("the upstream got the handoff and the %q tool, no compaction item (%s forwarded)", tool, fmtBytes(int64(len(fwd)))), nil
}
