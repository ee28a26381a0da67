package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/compactd/compactd/internal/fakeupstream"
)

// postgresSchema is a fresh PostgreSQL schema for one test (dropped after it), as a DSN the
// replicas share; the test is skipped without COMPACTD_TEST_POSTGRES_DSN (.ci/run sets it).
func postgresSchema(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("COMPACTD_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("COMPACTD_TEST_POSTGRES_DSN not set; run `eval \"$(.ci/postgres.sh)\"` to run the replicas against PostgreSQL")
	}
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	schema := fmt.Sprintf("replicas_memo_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if _, err := admin.Exec(`CREATE SCHEMA ` + schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`) })
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "search_path=" + schema
}

// memoTurn sends a transparent Responses turn (no context_management) to r and returns the
// X-Compactd-Compaction header.
func memoTurn(t *testing.T, r *replica, input []any) (string, []any) {
	t.Helper()
	var hr *http.Response
	resp, err := r.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: "gpt-test"},
		option.WithJSONSet("input", input), option.WithResponseInto(&hr))
	if err != nil {
		t.Fatalf("%s: %v\n%s", r.name, err, r.log)
	}
	for _, o := range resp.Output {
		if o.Type == "compaction" {
			t.Fatalf("%s: a compaction item reached a client that asked for none", r.name)
		}
		input = append(input, map[string]any{"type": "message", "role": "assistant",
			"content": []map[string]any{{"type": "output_text", "text": o.Content[0].Text}}})
	}
	return hr.Header.Get("X-Compactd-Compaction"), input
}

// metric is the value of one sample line of r's /metrics ("" when absent).
func metric(t *testing.T, r *replica, sample string) string {
	t.Helper()
	resp, err := http.Get("http://" + r.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			return v
		}
	}
	return ""
}

// Three replicas sharing one PostgreSQL archive: a conversation a replica compacted
// transparently gets the memo's compaction applied on the other two (no summariser call), and a
// speculative summary one replica prepared is used by the crossing turn on another.
func TestReplicasShareMemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	dsn := postgresSchema(t)
	builtBinary(t)
	fake := fakeupstream.New(fakeupstream.Options{})
	fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	upstream, stopFake, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stopFake()
	keys := newKey(t, "k1").String()
	summaries := func() int {
		n := 0
		for _, r := range fake.Requests() {
			if r.Kind == fakeupstream.KindSummary {
				n++
			}
		}
		return n
	}

	t.Run("memo", func(t *testing.T) {
		var rs []*replica
		for i := range 3 {
			rs = append(rs, startReplica(t, fmt.Sprintf("replica-%d", i), upstream, keys,
				"--archive", dsn, "--compact-threshold", "responses=6000", "--speculative-fraction", "0"))
		}
		input := []any{map[string]any{"type": "message", "role": "developer", "content": "You are a careful coding agent."}}
		compactedOn, applied := -1, map[int]bool{}
		for turn := 0; turn < 30 && len(applied) < 2; turn++ {
			input = append(input, map[string]any{"type": "message", "role": "user", "content": fmt.Sprintf("turn %d %s", turn, filler(turn, 150))})
			i := turn % 3
			before := summaries()
			state, next := memoTurn(t, rs[i], input)
			input = next
			switch {
			case strings.HasPrefix(state, "compacted;"):
				if compactedOn >= 0 {
					t.Fatalf("turn %d: compacted again on %s right after %s compacted: the memo was not shared", turn, rs[i].name, rs[compactedOn].name)
				}
				compactedOn = i
			case strings.HasPrefix(state, "applied;"):
				if summaries() != before {
					t.Fatalf("turn %d on %s: applied, yet the summariser was called", turn, rs[i].name)
				}
				if i != compactedOn {
					applied[i] = true
				}
			}
		}
		if compactedOn < 0 || len(applied) < 2 {
			t.Fatalf("compacted on %d, applied on other replicas %v: want a compaction on one and memo hits on the two others", compactedOn, applied)
		}
	})

	t.Run("speculation", func(t *testing.T) {
		var rs []*replica
		for i := range 2 {
			rs = append(rs, startReplica(t, fmt.Sprintf("spec-%d", i), upstream, keys,
				"--archive", dsn, "--compact-threshold", "responses=6000", "--speculative-fraction", "0.5"))
		}
		input := []any{map[string]any{"type": "message", "role": "developer", "content": "You are a careful coding agent."}}
		// Below the threshold, past half of it, on replica 0: it speculates.
		for turn := 0; turn < 8; turn++ {
			input = append(input, map[string]any{"type": "message", "role": "user", "content": fmt.Sprintf("spec %d %s", turn, filler(100+turn, 150))})
			if state, next := memoTurn(t, rs[0], input); state != "" {
				t.Fatalf("turn %d compacted below the threshold: %s", turn, state)
			} else {
				input = next
			}
		}
		// Wait until every speculation replica 0 started is shared: the crossing turn cannot
		// await a job still running on another replica, and which of the started jobs it finds
		// (it tries the prefixes before its last few user messages) must not depend on timing.
		deadline := time.Now().Add(30 * time.Second)
		for {
			started := metric(t, rs[0], `compactd_speculative_compactions_total{outcome="started"}`)
			shared := metric(t, rs[0], `compactd_memo_total{outcome="spec_shared"}`)
			if started != "" && started != "0" && shared == started {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica 0 started %s speculative summaries and shared %s:\n%s", started, shared, rs[0].log)
			}
			time.Sleep(50 * time.Millisecond)
		}
		// Turns past the fraction that grew the conversation by less than --speculative-min-growth
		// (auto: a quarter of the threshold here) start no summary of their own.
		if v := metric(t, rs[0], `compactd_speculative_compactions_total{outcome="covered"}`); v == "0" || v == "" {
			t.Errorf("covered = %q: every turn past the fraction started a summary of its own", v)
		}
		before := summaries()
		// The crossing turn on replica 1 uses replica 0's summary: no summariser call of its own.
		input = append(input, map[string]any{"type": "message", "role": "user", "content": "cross " + filler(200, 1200)})
		state, _ := memoTurn(t, rs[1], input)
		if !strings.HasPrefix(state, "compacted;") {
			t.Fatalf("the crossing turn did not compact: %q", state)
		}
		if n := summaries() - before; n != 0 {
			t.Fatalf("the crossing turn on replica 1 made %d summariser calls; want the speculative summary replica 0 shared", n)
		}
		if v := metric(t, rs[1], `compactd_memo_total{outcome="spec_hit"}`); v != "1" {
			t.Fatalf("replica 1 spec_hit = %q, want 1", v)
		}
	})
}
