package archive

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/handoff"
)

func msg(role, text string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"type": "message", "role": role,
		"content": []any{map[string]any{"type": "input_text", "text": text}}})
	return b
}

func call(name, args, output string) []json.RawMessage {
	c, _ := json.Marshal(map[string]any{"type": "function_call", "name": name, "arguments": args, "call_id": "call_1"})
	o, _ := json.Marshal(map[string]any{"type": "function_call_output", "call_id": "call_1", "output": output})
	return []json.RawMessage{c, o}
}

// plantedItems holds an identifier, a path, an error text and a number, each in a different item,
// among filler, with deliberately odd spacing so byte-exactness is visible.
func plantedItems() []json.RawMessage {
	items := []json.RawMessage{
		msg("user", "Please fix the loader; it crashes at start-up."),
		json.RawMessage(`{"type":"message",  "role":"assistant","content":[{"type":"output_text","text":"Looking at parseConfigFromEnv now."}]}`),
	}
	items = append(items, call("shell", `{"cmd":"cat internal/zephyr/loader.go"}`,
		"package zephyr\nfunc parseConfigFromEnv() error { return errQuota }\n")...)
	items = append(items, msg("user", "The log says ERR_QUOTA_EXHAUSTED: connection refused by upstream after 3 retries."))
	items = append(items, msg("assistant", "The retry budget is 48213 milliseconds, which is too long."))
	items = append(items, json.RawMessage(`{"type":"reasoning","encrypted_content":"gAAAAABopaqueblobXYZ","summary":[]}`))
	return items
}

func fillerItems(n int, topic string) []json.RawMessage {
	var items []json.RawMessage
	for i := 0; i < n; i++ {
		items = append(items, msg("user", fmt.Sprintf("Unrelated note %d about %s and the weather in general.", i, topic)))
	}
	return items
}

func testStore(t *testing.T, open func(t *testing.T) Store) {
	ctx := context.Background()
	t.Run("Retention", func(t *testing.T) { testRetention(t, open) })
	t.Run("RetentionInBatchesOf2", func(t *testing.T) {
		defer func(n int) { pruneBatch = n }(pruneBatch)
		pruneBatch = 2 // every pass crosses batch boundaries
		testRetention(t, open)
	})

	t.Run("PutGetRoundTrip", func(t *testing.T) {
		st := open(t)
		items := plantedItems()
		created := time.Date(2026, 3, 4, 5, 6, 7, 891234567, time.UTC)
		ref, err := st.Put(ctx, Segment{Tenant: "acme", Conversation: "conv-1", Kind: KindSession,
			CreatedAt: created, Items: items, Meta: map[string]string{"model": "gpt-5"}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(ref.ID, "seg_") || len(ref.Hash) != 64 {
			t.Fatalf("ref = %+v", ref)
		}
		got, err := st.Get(ctx, "acme", ref.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Items) != len(items) {
			t.Fatalf("got %d items, want %d", len(got.Items), len(items))
		}
		for i := range items {
			if !bytes.Equal(got.Items[i], items[i]) {
				t.Errorf("item %d:\n got %s\nwant %s", i, got.Items[i], items[i])
			}
		}
		want := created.Truncate(time.Microsecond)
		if !got.CreatedAt.Equal(want) || got.Conversation != "conv-1" || got.Kind != KindSession ||
			got.Tenant != "acme" || got.ID != ref.ID || got.Meta["model"] != "gpt-5" {
			t.Errorf("got %+v", got)
		}
		// Defaults: tenant, kind, created_at.
		ref2, err := st.Put(ctx, Segment{Conversation: "conv-2", Items: []json.RawMessage{msg("user", "hi")}})
		if err != nil {
			t.Fatal(err)
		}
		got2, err := st.Get(ctx, "", ref2.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got2.Tenant != DefaultTenant || got2.Kind != KindCompaction || time.Since(got2.CreatedAt) > time.Hour {
			t.Errorf("defaults not applied: %+v", got2)
		}
		if _, err := st.Put(ctx, Segment{Items: items}); err == nil {
			t.Error("Put without conversation succeeded")
		}
		if _, err := st.Put(ctx, Segment{ID: ref.ID, Tenant: "acme", Conversation: "c", Items: items}); err == nil {
			t.Error("Put with a duplicate id succeeded")
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		st := open(t)
		ref, err := st.Put(ctx, Segment{Tenant: "acme", Conversation: "c", Items: plantedItems()})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ tenant, id string }{{"acme", "seg_missing"}, {"other", ref.ID}, {"", ref.ID}} {
			if _, err := st.Get(ctx, tc.tenant, tc.id); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get(%q,%q) err = %v, want ErrNotFound", tc.tenant, tc.id, err)
			}
			if _, err := st.Lineage(ctx, tc.tenant, tc.id); !errors.Is(err, ErrNotFound) {
				t.Errorf("Lineage(%q,%q) err = %v, want ErrNotFound", tc.tenant, tc.id, err)
			}
		}
	})

	t.Run("Search", func(t *testing.T) {
		st := open(t)
		target, err := st.Put(ctx, Segment{Tenant: "acme", Conversation: "conv-target",
			Items: append(fillerItems(3, "gardening"), plantedItems()...)})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			if _, err := st.Put(ctx, Segment{Tenant: "acme", Conversation: fmt.Sprintf("conv-other-%d", i),
				Items: fillerItems(4, "loader cooking")}); err != nil {
				t.Fatal(err)
			}
		}
		// The same planted strings in another tenant must never surface for acme, and vice versa.
		other, err := st.Put(ctx, Segment{Tenant: "globex", Conversation: "conv-target", Items: plantedItems()})
		if err != nil {
			t.Fatal(err)
		}
		const offset = 3 // filler items before the planted ones
		cases := []struct {
			name, text string
			item       int    // expected best item index
			excerpt    string // must appear in the excerpt
		}{
			{"identifier", "parseConfigFromEnv", offset + 1, "parseConfigFromEnv"},
			{"identifier part", "config from env", offset + 1, "parseConfigFromEnv"},
			{"path", "internal/zephyr/loader.go", offset + 2, "internal/zephyr/loader.go"},
			{"path parts", "zephyr/loader", offset + 2, "loader.go"},
			{"error code", "ERR_QUOTA_EXHAUSTED", offset + 4, "ERR_QUOTA_EXHAUSTED"},
			{"error text", "connection refused by upstream", offset + 4, "connection refused by upstream"},
			{"number", "48213", offset + 5, "48213"},
			{"case-insensitive", "err_quota_exhausted", offset + 4, "ERR_QUOTA_EXHAUSTED"},
			{"partial words fall back to OR", "exhausted nonexistentword", offset + 4, "ERR_QUOTA_EXHAUSTED"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				hits, err := st.Search(ctx, Query{Text: tc.text, Tenant: "acme"})
				if err != nil {
					t.Fatal(err)
				}
				if len(hits) == 0 {
					t.Fatalf("no hits for %q", tc.text)
				}
				h := hits[0]
				if h.SegmentID != target.ID || h.Conversation != "conv-target" || h.Kind != KindCompaction {
					t.Fatalf("top hit = %+v, want segment %s", h, target.ID)
				}
				if h.ItemIndex != tc.item {
					t.Errorf("ItemIndex = %d, want %d (excerpt %q)", h.ItemIndex, tc.item, h.Excerpt)
				}
				if !strings.Contains(h.Excerpt, tc.excerpt) {
					t.Errorf("excerpt %q lacks %q", h.Excerpt, tc.excerpt)
				}
				for i := 1; i < len(hits); i++ {
					if hits[i].Score > hits[i-1].Score {
						t.Errorf("hits not ordered by score: %v then %v", hits[i-1].Score, hits[i].Score)
					}
					if hits[i].SegmentID == other.ID {
						t.Errorf("hit from another tenant")
					}
				}
			})
		}
		t.Run("tenant isolation", func(t *testing.T) {
			hits, err := st.Search(ctx, Query{Text: "parseConfigFromEnv", Tenant: "globex"})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(segmentsOf(hits), []string{other.ID}) {
				t.Fatalf("globex hits = %+v, want only %s", hits, other.ID)
			}
			hits, err = st.Search(ctx, Query{Text: "parseConfigFromEnv", Tenant: "initech"})
			if err != nil || len(hits) != 0 {
				t.Fatalf("initech hits = %+v, %v; want none", hits, err)
			}
		})
		t.Run("filters", func(t *testing.T) {
			hits, err := st.Search(ctx, Query{Text: "loader", Tenant: "acme", Conversation: "conv-other-2"})
			if err != nil {
				t.Fatal(err)
			}
			if len(segmentsOf(hits)) != 1 || hits[0].Conversation != "conv-other-2" {
				t.Fatalf("conversation filter: %+v", hits)
			}
			hits, err = st.Search(ctx, Query{Text: "loader", Tenant: "acme", Kind: KindSession})
			if err != nil || len(hits) != 0 {
				t.Fatalf("kind filter: %+v, %v", hits, err)
			}
			hits, err = st.Search(ctx, Query{Text: "loader", Tenant: "acme", Limit: 2})
			if err != nil || len(hits) != 2 {
				t.Fatalf("limit: %d hits, %v", len(hits), err)
			}
		})
		t.Run("excerpt budget", func(t *testing.T) {
			hits, err := st.Search(ctx, Query{Text: "48213", Tenant: "acme", ExcerptBytes: 30})
			if err != nil || len(hits) == 0 {
				t.Fatal(hits, err)
			}
			if e := hits[0].Excerpt; len(e) > 30 || !strings.Contains(e, "48213") {
				t.Errorf("excerpt %q (%d bytes)", e, len(e))
			}
		})
		t.Run("opaque payloads are not indexed", func(t *testing.T) {
			hits, err := st.Search(ctx, Query{Text: "gAAAAABopaqueblobXYZ", Tenant: "acme"})
			if err != nil || len(hits) != 0 {
				t.Fatalf("hits = %+v, %v", hits, err)
			}
		})
		if _, err := st.Search(ctx, Query{Text: " ,;! ", Tenant: "acme"}); !errors.Is(err, ErrEmptyQuery) {
			t.Errorf("empty query err = %v", err)
		}
	})

	t.Run("what a model searches for", func(t *testing.T) {
		// The words a model searches with after a compaction: a function's name for where it is
		// defined, a subject for what the user said of it. The answers sit in a tool output beside
		// its call and in a user's correction beside what it corrects; compactd's own writing that
		// came back in the history (a quoted recall result, a handoff) repeats the words more
		// often than either, and must not be what the search returns.
		st := open(t)
		items := []json.RawMessage{
			json.RawMessage(`{"type":"function_call","call_id":"c1","name":"exec_command","arguments":"{\"cmd\":\"rg -n retryAccountWebhook internal\"}"}`),
			json.RawMessage(`{"type":"function_call_output","call_id":"c1","output":"internal/a/b.go:41:\tif err := h.retryAccountWebhook(ctx, id); err != nil {\ninternal/x/order_client.go:1832:func retryAccountWebhook(ctx context.Context) error {"}`),
			msg("assistant", "I'll set the batch limit for publishWebhookInvoice to 32, as in the other workers."),
			msg("user", "Wait, that is wrong. Correction: the batch limit for publishWebhookInvoice must be 229, not 32."),
			msg("assistant", "MOCK-REPLY 4: "+handoff.RecallHeader+" matching \"publishWebhookInvoice retryAccountWebhook\":\n"+
				strings.Repeat("publishWebhookInvoice retryAccountWebhook to 32\n", 5)),
			msg("user", handoff.Text(strings.Repeat("publishWebhookInvoice retryAccountWebhook ", 5), "")),
		}
		if _, err := st.Put(ctx, Segment{Tenant: "acme", Conversation: "conv-agent", Items: items}); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			query string
			want  []string // excerpts, in this order, among the hits
		}{
			{"retryAccountWebhook", []string{"rg -n retryAccountWebhook", "order_client.go:1832:func retryAccountWebhook"}},
			{"publishWebhookInvoice", []string{"to 32, as in", "must be 229"}},
		}
		for _, tc := range cases {
			hits, err := st.Search(ctx, Query{Text: tc.query, Tenant: "acme", Conversation: "conv-agent"})
			if err != nil {
				t.Fatal(err)
			}
			next := 0
			for _, h := range hits {
				if strings.Contains(h.Excerpt, handoff.RecallHeader) || strings.Contains(h.Excerpt, "Another language model") {
					t.Errorf("%q: a hit quotes compactd's own writing: %q", tc.query, h.Excerpt)
				}
				if next < len(tc.want) && strings.Contains(h.Excerpt, tc.want[next]) {
					next++
				}
			}
			if next < len(tc.want) {
				t.Errorf("%q: hits %+v lack %q (in order %q)", tc.query, hits, tc.want[next], tc.want)
			}
		}
	})
	t.Run("Lineage", func(t *testing.T) {
		st := open(t)
		var refs []Ref
		prev := ""
		for i := 0; i < 3; i++ {
			r, err := st.Put(ctx, Segment{Tenant: "acme", Conversation: "c", Previous: prev,
				Items: fillerItems(2, fmt.Sprint("round ", i))})
			if err != nil {
				t.Fatal(err)
			}
			refs = append(refs, r)
			prev = r.ID
		}
		got, err := st.Lineage(ctx, "acme", refs[2].ID)
		if err != nil {
			t.Fatal(err)
		}
		want := []Ref{refs[2], refs[1], refs[0]}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("lineage = %v, want %v", got, want)
		}
		got, err = st.Lineage(ctx, "acme", refs[0].ID)
		if err != nil || len(got) != 1 || got[0] != refs[0] {
			t.Fatalf("root lineage = %v, %v", got, err)
		}
		// Distinct segments with equal items still hash differently (the header is hashed too).
		if refs[0].Hash == refs[1].Hash {
			t.Error("equal hashes for distinct segments")
		}
		seg, err := st.Get(ctx, "acme", refs[1].ID)
		if err != nil || seg.Previous != refs[0].ID {
			t.Fatalf("Get previous = %q, %v", seg.Previous, err)
		}
	})

	t.Run("Conversations", func(t *testing.T) {
		st := open(t)
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for i, c := range []string{"a", "a", "b"} {
			if _, err := st.Put(ctx, Segment{Tenant: "acme", Conversation: c, CreatedAt: t0.Add(time.Duration(i) * time.Hour),
				Items: fillerItems(2, c)}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.Put(ctx, Segment{Tenant: "globex", Conversation: "z", Items: fillerItems(1, "z")}); err != nil {
			t.Fatal(err)
		}
		got, err := st.Conversations(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].ID != "b" || got[1].ID != "a" {
			t.Fatalf("conversations = %+v", got)
		}
		a := got[1]
		if a.Segments != 2 || a.Bytes <= 0 || !a.First.Equal(t0) || !a.Last.Equal(t0.Add(time.Hour)) {
			t.Errorf("a = %+v", a)
		}
	})

	t.Run("DeleteConversation", func(t *testing.T) {
		st := open(t)
		var gone []Ref
		for i := 0; i < 2; i++ {
			r, err := st.Put(ctx, Segment{Tenant: "acme", Conversation: "doomed", Items: plantedItems()})
			if err != nil {
				t.Fatal(err)
			}
			gone = append(gone, r)
		}
		keep, err := st.Put(ctx, Segment{Tenant: "acme", Conversation: "kept", Items: fillerItems(2, "parseConfigFromEnv")})
		if err != nil {
			t.Fatal(err)
		}
		other, err := st.Put(ctx, Segment{Tenant: "globex", Conversation: "doomed", Items: plantedItems()})
		if err != nil {
			t.Fatal(err)
		}
		before := indexRows(t, st)
		n, err := st.DeleteConversation(ctx, "acme", "doomed")
		if err != nil || n != 2 {
			t.Fatalf("deleted %d, %v; want 2", n, err)
		}
		if after := indexRows(t, st); after != before-2 {
			t.Errorf("index rows %d → %d, want −2", before, after)
		}
		for _, r := range gone {
			if _, err := st.Get(ctx, "acme", r.ID); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get deleted: %v", err)
			}
		}
		hits, err := st.Search(ctx, Query{Text: "parseConfigFromEnv", Tenant: "acme"})
		if err != nil || !slices.Equal(segmentsOf(hits), []string{keep.ID}) {
			t.Fatalf("after delete hits = %+v, %v; want only the kept segment", hits, err)
		}
		if _, err := st.Get(ctx, "globex", other.ID); err != nil {
			t.Errorf("other tenant's conversation affected: %v", err)
		}
		if n, err := st.DeleteConversation(ctx, "acme", "doomed"); err != nil || n != 0 {
			t.Errorf("second delete = %d, %v", n, err)
		}
	})

	t.Run("PruneByAge", func(t *testing.T) {
		st := open(t)
		old, err := st.Put(ctx, Segment{Conversation: "c", CreatedAt: time.Now().Add(-48 * time.Hour), Items: plantedItems()})
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := st.Put(ctx, Segment{Conversation: "c", Items: fillerItems(1, "fresh")})
		if err != nil {
			t.Fatal(err)
		}
		n, err := st.Prune(ctx, Retention{MaxAge: 24 * time.Hour})
		if err != nil || n != 1 {
			t.Fatalf("pruned %d, %v; want 1", n, err)
		}
		if _, err := st.Get(ctx, "", old.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("old segment survived: %v", err)
		}
		if _, err := st.Get(ctx, "", fresh.ID); err != nil {
			t.Errorf("fresh segment pruned: %v", err)
		}
		if hits, err := st.Search(ctx, Query{Text: "48213"}); err != nil || len(hits) != 0 {
			t.Errorf("pruned segment still searchable: %+v, %v", hits, err)
		}
		// Lineage stops at the pruned link instead of failing.
		child, err := st.Put(ctx, Segment{Conversation: "c", Previous: old.ID, Items: fillerItems(1, "x")})
		if err != nil {
			t.Fatal(err)
		}
		if l, err := st.Lineage(ctx, "", child.ID); err != nil || len(l) != 1 {
			t.Errorf("lineage over pruned link = %v, %v", l, err)
		}
		if n, err := st.Prune(ctx, Retention{}); err != nil || n != 0 {
			t.Errorf("zero retention pruned %d, %v", n, err)
		}
	})

	t.Run("PruneBySize", func(t *testing.T) {
		st := open(t)
		t0 := time.Now().Add(-time.Hour)
		var ids []string
		for i := 0; i < 4; i++ { // one conversation per segment, so Conversations reports each size
			r, err := st.Put(ctx, Segment{Conversation: fmt.Sprint("c", i), CreatedAt: t0.Add(time.Duration(i) * time.Minute),
				Items: fillerItems(3+i, "size")})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.ID)
		}
		convs, err := st.Conversations(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		size := map[string]int64{}
		var total int64
		for _, c := range convs {
			size[c.ID] = c.Bytes
			total += c.Bytes
		}
		// A budget that the oldest two must go to meet.
		budget := total - size["c0"] - size["c1"]
		n, err := st.Prune(ctx, Retention{MaxBytes: budget})
		if err != nil || n != 2 {
			t.Fatalf("pruned %d, %v; want 2", n, err)
		}
		for i, id := range ids {
			_, err := st.Get(ctx, "", id)
			if gone := errors.Is(err, ErrNotFound); gone != (i < 2) {
				t.Errorf("segment %d: err = %v", i, err)
			}
		}
		if n, err := st.Prune(ctx, Retention{MaxBytes: budget}); err != nil || n != 0 {
			t.Errorf("second prune = %d, %v", n, err)
		}
	})

	t.Run("Tamper", func(t *testing.T) {
		st := open(t)
		a, err := st.Put(ctx, Segment{Tenant: "acme", Conversation: "c", Items: plantedItems()})
		if err != nil {
			t.Fatal(err)
		}
		b, err := st.Put(ctx, Segment{Tenant: "acme", Conversation: "c", Items: fillerItems(2, "b")})
		if err != nil {
			t.Fatal(err)
		}
		ss := st.(*sqlStore)
		var sealedA, sealedB string
		row := func(id string) *sql.Row {
			return ss.db.QueryRowContext(ctx, ss.q(`SELECT sealed FROM archive_segments WHERE tenant = ? AND id = ?`), "acme", id)
		}
		if err := row(a.ID).Scan(&sealedA); err != nil {
			t.Fatal(err)
		}
		if err := row(b.ID).Scan(&sealedB); err != nil {
			t.Fatal(err)
		}
		set := func(id, col string, v any) {
			t.Helper()
			if _, err := ss.db.ExecContext(ctx, ss.q(`UPDATE archive_segments SET `+col+` = ? WHERE tenant = ? AND id = ?`), v, "acme", id); err != nil {
				t.Fatal(err)
			}
		}
		flipped := []byte(sealedA)
		i := len(flipped) / 2
		flipped[i] = map[bool]byte{true: 'B', false: 'A'}[flipped[i] == 'A']
		cases := []struct {
			name, col string
			v         any
		}{
			{"flipped ciphertext", "sealed", string(flipped)},
			{"swapped blob", "sealed", sealedB},
			{"hash", "hash", strings.Repeat("0", 64)},
			{"conversation column", "conversation", "c2"},
			{"previous column", "previous", b.ID},
			{"created_at column", "created_at", 1},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				var orig any
				if err := ss.db.QueryRowContext(ctx, ss.q(`SELECT `+tc.col+` FROM archive_segments WHERE tenant = ? AND id = ?`), "acme", a.ID).Scan(&orig); err != nil {
					t.Fatal(err)
				}
				set(a.ID, tc.col, tc.v)
				defer set(a.ID, tc.col, orig)
				if _, err := st.Get(ctx, "acme", a.ID); !errors.Is(err, ErrIntegrity) {
					t.Errorf("Get err = %v, want ErrIntegrity", err)
				}
				if _, err := st.Search(ctx, Query{Text: "48213", Tenant: "acme"}); !errors.Is(err, ErrIntegrity) {
					t.Errorf("Search err = %v, want ErrIntegrity", err)
				}
			})
		}
		if _, err := st.Get(ctx, "acme", a.ID); err != nil {
			t.Errorf("restored segment: %v", err)
		}
	})

	t.Run("Reopen", func(t *testing.T) {
		// Migrations are idempotent: opening twice over the same database works.
		st := open(t)
		if _, err := st.Put(ctx, Segment{Conversation: "c", Items: plantedItems()}); err != nil {
			t.Fatal(err)
		}
		if err := st.(*sqlStore).migrate(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// indexRows counts blind-index documents.
func indexRows(t *testing.T, st Store) int {
	t.Helper()
	ss := st.(*sqlStore)
	table := "archive_fts"
	if ss.d.docInRow {
		table = "archive_segments"
	}
	var n int
	if err := ss.db.QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func openSQLiteT(t *testing.T) Store {
	t.Helper()
	st, err := Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "a", "archive.db"), newTestSealer())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestSQLite(t *testing.T) { testStore(t, openSQLiteT) }

func TestPostgres(t *testing.T) {
	dsn := os.Getenv("COMPACTD_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("COMPACTD_TEST_POSTGRES_DSN not set; run `eval \"$(.ci/postgres.sh)\"` to test the PostgreSQL backend")
	}
	ctx := context.Background()
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	n := 0
	testStore(t, func(t *testing.T) Store {
		// A schema per store keeps runs independent (Prune is global) and leaves nothing behind.
		n++
		schema := fmt.Sprintf("archive_test_%d_%d", os.Getpid(), n)
		if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { admin.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`) })
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		st, err := Open(ctx, dsn+sep+"search_path="+schema, newTestSealer())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	})
}

// TestOpenExistingPostgres: OpenExisting on a database (here a schema) without the archive's
// tables refuses and creates none; once Open made them, it opens.
func TestOpenExistingPostgres(t *testing.T) {
	dsn := os.Getenv("COMPACTD_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("COMPACTD_TEST_POSTGRES_DSN not set; run `eval \"$(.ci/postgres.sh)\"` to test the PostgreSQL backend")
	}
	ctx := context.Background()
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	schema := fmt.Sprintf("archive_test_existing_%d", os.Getpid())
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	defer admin.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	sdsn := dsn + sep + "search_path=" + schema
	tables := func() int {
		var n int
		if err := admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_tables WHERE schemaname = $1`, schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := OpenExisting(ctx, sdsn, newTestSealer()); !errors.Is(err, ErrNoArchive) {
		t.Errorf("err = %v, want ErrNoArchive", err)
	}
	if n := tables(); n != 0 {
		t.Errorf("OpenExisting created %d tables", n)
	}
	st, err := Open(ctx, sdsn, newTestSealer())
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = OpenExisting(ctx, sdsn, newTestSealer())
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
}

// segmentsOf lists the segments of hits, each once, in order: a segment may give several items.
func segmentsOf(hits []Hit) []string {
	var ids []string
	for _, h := range hits {
		if !slices.Contains(ids, h.SegmentID) {
			ids = append(ids, h.SegmentID)
		}
	}
	return ids
}
