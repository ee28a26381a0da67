package archive

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func eventLogT(t *testing.T, st Store, o EventOptions) *EventLog {
	t.Helper()
	l, err := NewEventLog(st, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testEvents(t *testing.T, open func(t *testing.T) Store) {
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).UTC()

	t.Run("RoundTripWithAndWithoutContent", func(t *testing.T) {
		st := open(t)
		l := eventLogT(t, st, EventOptions{})
		evs := []Event{
			{Tenant: "acme", Conversation: "c1", Owner: "o1", Kind: EventCompaction, CreatedAt: base,
				API: "openai", Route: "/v1/responses", Client: "codex", Trigger: "threshold", Outcome: "ok", Model: "m",
				Item: "cmp_1", Segment: "seg_1", Before: 9000, After: 1200, Items: 14, Latency: 1500 * time.Millisecond,
				Content: &EventContent{Summary: "the summary <script>", Ledger: "## Facts ledger\n- `PORT=7431`"}},
			{Tenant: "acme", Conversation: "c1", Owner: "o1", Kind: EventRecall, CreatedAt: base.Add(time.Minute),
				Items: 1, Content: &EventContent{Query: "PORT", Excerpts: []EventExcerpt{{Segment: "seg_1", Item: 3, Text: "PORT=7431"}}}},
			{Tenant: "acme", Conversation: "c1", Owner: "o2", Kind: EventMemoApplied, CreatedAt: base.Add(2 * time.Minute), Items: 20},
		}
		if err := l.Append(ctx, evs); err != nil {
			t.Fatal(err)
		}
		got, err := l.List(ctx, "acme", "c1", false)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || got[0].Kind != EventCompaction || got[2].Kind != EventMemoApplied {
			t.Fatalf("List = %+v, want the three events oldest first", got)
		}
		if c := got[0]; c.Content != nil || !c.Sealed || c.Bytes == 0 || c.Before != 9000 || c.After != 1200 || c.Items != 14 ||
			c.Latency != 1500*time.Millisecond || c.Segment != "seg_1" || c.Client != "codex" || c.Owner != "o1" {
			t.Errorf("compaction row without content = %+v", c)
		}
		if got[2].Sealed {
			t.Error("a memo row without content is marked sealed")
		}
		got, err = l.List(ctx, "acme", "c1", true)
		if err != nil {
			t.Fatal(err)
		}
		if c := got[0].Content; c == nil || c.Summary != "the summary <script>" || !strings.Contains(c.Ledger, "PORT=7431") {
			t.Errorf("compaction content = %+v", c)
		}
		if c := got[1].Content; c == nil || c.Query != "PORT" || len(c.Excerpts) != 1 || c.Excerpts[0].Text != "PORT=7431" {
			t.Errorf("recall content = %+v", c)
		}
		// Another tenant sees nothing of it, under the same label.
		if other, err := l.List(ctx, "other", "c1", true); err != nil || len(other) != 0 {
			t.Errorf("tenant other lists %d events of acme's conversation (err %v)", len(other), err)
		}
	})

	t.Run("SealedContentIsBoundToItsRow", func(t *testing.T) {
		st := open(t)
		l := eventLogT(t, st, EventOptions{})
		for _, conv := range []string{"c1", "c2"} {
			if err := l.Append(ctx, []Event{{Conversation: conv, Kind: EventCompaction, Content: &EventContent{Summary: "secret of " + conv}}}); err != nil {
				t.Fatal(err)
			}
		}
		s := st.(*sqlStore)
		// Moving c2's blob onto c1's row, or relabelling a row, must not open.
		if _, err := s.db.ExecContext(ctx, s.q(`UPDATE archive_events SET sealed = (SELECT sealed FROM archive_events WHERE conversation = 'c2') WHERE conversation = 'c1'`)); err != nil {
			t.Fatal(err)
		}
		got, err := l.List(ctx, "default", "c1", true)
		if !errors.Is(err, ErrIntegrity) || len(got) != 1 || got[0].Content != nil {
			t.Errorf("a moved blob: List = %+v, %v; want the row without content and ErrIntegrity", got, err)
		}
		if _, err := s.db.ExecContext(ctx, s.q(`UPDATE archive_events SET conversation = 'c3' WHERE conversation = 'c2'`)); err != nil {
			t.Fatal(err)
		}
		if got, err := l.List(ctx, "default", "c3", true); !errors.Is(err, ErrIntegrity) || len(got) != 1 || got[0].Content != nil {
			t.Errorf("a relabelled row: List = %+v, %v; want ErrIntegrity", got, err)
		}
	})

	t.Run("ContentIsCut", func(t *testing.T) {
		st := open(t)
		l := eventLogT(t, st, EventOptions{})
		huge := strings.Repeat("é", 200_000)
		ex := make([]EventExcerpt, 40)
		for i := range ex {
			ex[i] = EventExcerpt{Segment: "seg", Text: huge}
		}
		if err := l.Append(ctx, []Event{{Conversation: "c", Kind: EventRecall, Content: &EventContent{Summary: huge, Ledger: huge, Query: huge, Excerpts: ex}}}); err != nil {
			t.Fatal(err)
		}
		got, err := l.List(ctx, "", "c", true)
		if err != nil || len(got) != 1 || got[0].Content == nil {
			t.Fatalf("List = %+v, %v", got, err)
		}
		c := got[0].Content
		total := len(c.Summary) + len(c.Ledger) + len(c.Query)
		for _, x := range c.Excerpts {
			total += len(x.Text)
		}
		if total > MaxEventContent || len(c.Excerpts) != maxExcerpts || !strings.HasSuffix(c.Summary, "…[cut]") || !strings.HasPrefix(c.Summary, "éé") {
			t.Errorf("content of %d bytes, %d excerpts (summary ends %q); want at most %d bytes, %d excerpts, cut texts",
				total, len(c.Excerpts), c.Summary[len(c.Summary)-12:], MaxEventContent, maxExcerpts)
		}
	})

	t.Run("PerTenantCap", func(t *testing.T) {
		st := open(t)
		l := eventLogT(t, st, EventOptions{MaxPerTenant: 5})
		for i := range 8 {
			if err := l.Append(ctx, []Event{{Tenant: "a", Conversation: "c", Kind: EventMemoApplied, Items: i, CreatedAt: base.Add(time.Duration(i) * time.Second)}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Append(ctx, []Event{{Tenant: "b", Conversation: "c", Kind: EventMemoApplied}}); err != nil {
			t.Fatal(err)
		}
		got, _ := l.List(ctx, "a", "c", false)
		if len(got) != 5 || got[0].Items != 3 || got[4].Items != 7 {
			t.Errorf("tenant a holds %d rows (%+v); want its newest 5, items 3…7", len(got), got)
		}
		if got, _ := l.List(ctx, "b", "c", false); len(got) != 1 {
			t.Errorf("tenant b holds %d rows, want 1: the cap is per tenant", len(got))
		}
	})

	t.Run("DeletedWithTheConversation", func(t *testing.T) {
		st := open(t)
		l := eventLogT(t, st, EventOptions{})
		if _, err := st.Put(ctx, Segment{Tenant: "a", Conversation: "gone", Items: plantedItems()}); err != nil {
			t.Fatal(err)
		}
		for _, e := range []Event{{Tenant: "a", Conversation: "gone", Kind: EventCompaction}, {Tenant: "a", Conversation: "kept", Kind: EventCompaction},
			{Tenant: "b", Conversation: "gone", Kind: EventCompaction}} {
			if err := l.Append(ctx, []Event{e}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.DeleteConversation(ctx, "a", "gone"); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			tenant, conv string
			want         int
		}{{"a", "gone", 0}, {"a", "kept", 1}, {"b", "gone", 1}} {
			if got, _ := l.List(ctx, c.tenant, c.conv, false); len(got) != c.want {
				t.Errorf("%s/%s: %d events after deleting a/gone, want %d", c.tenant, c.conv, len(got), c.want)
			}
		}
	})

	t.Run("PrunedByAge", func(t *testing.T) {
		st := open(t)
		l := eventLogT(t, st, EventOptions{})
		old, recent := time.Now().Add(-48*time.Hour), time.Now().Add(-time.Minute)
		if err := l.Append(ctx, []Event{{Conversation: "c", Kind: EventCompaction, CreatedAt: old}, {Conversation: "c", Kind: EventRecall, CreatedAt: recent}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Prune(ctx, Retention{MaxAge: 24 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		if got, _ := l.List(ctx, "", "c", false); len(got) != 1 || got[0].Kind != EventRecall {
			t.Errorf("after pruning by age: %+v, want only the recent recall", got)
		}
	})

	t.Run("Summaries", func(t *testing.T) {
		st := open(t)
		l := eventLogT(t, st, EventOptions{})
		evs := []Event{
			{Tenant: "a", Conversation: "c1", Owner: "o1", Kind: EventCompaction, API: "openai", Client: "codex", Before: 1000, After: 100, CreatedAt: base},
			{Tenant: "a", Conversation: "c1", Owner: "o1", Kind: EventCompaction, API: "openai", Client: "codex", Before: 2000, After: 500, CreatedAt: base.Add(time.Minute)},
			{Tenant: "a", Conversation: "c1", Owner: "o2", Kind: EventCompactionFailed, API: "chat", Client: "sdk", CreatedAt: base.Add(2 * time.Minute)},
			{Tenant: "a", Conversation: "c1", Owner: "o1", Kind: EventMemoApplied, API: "openai", Client: "codex", CreatedAt: base.Add(3 * time.Minute)},
			{Tenant: "a", Conversation: "c1", Owner: "o1", Kind: EventRecall, API: "openai", Client: "codex", CreatedAt: base.Add(4 * time.Minute)},
			{Tenant: "a", Conversation: "c2", Kind: EventCompaction, API: "anthropic", Client: "claude_code", Before: 10, After: 5, CreatedAt: base.Add(10 * time.Minute)},
			{Tenant: "b", Conversation: "c3", Kind: EventCompaction, CreatedAt: base},
		}
		if err := l.Append(ctx, evs); err != nil {
			t.Fatal(err)
		}
		got, err := l.Summaries(ctx, "a", time.Time{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Conversation != "c2" || got[1].Conversation != "c1" {
			t.Fatalf("Summaries = %+v, want c2 then c1", got)
		}
		c1 := got[1]
		if c1.Compactions != 2 || c1.Failures != 1 || c1.TokensSaved != 2400 || c1.MemoHits != 1 || c1.Recalls != 1 || c1.Owners != 2 ||
			!c1.Last.Equal(base.Add(4*time.Minute).Truncate(time.Microsecond)) ||
			fmt.Sprint(c1.APIs) != "[chat openai]" || fmt.Sprint(c1.Clients) != "[codex sdk]" {
			t.Errorf("c1 = %+v", c1)
		}
		if got, _ := l.Summaries(ctx, "a", base.Add(5*time.Minute), 0); len(got) != 1 || got[0].Conversation != "c2" {
			t.Errorf("since: %+v, want only c2", got)
		}
		ts, err := l.Tenants(ctx)
		if err != nil || fmt.Sprint(ts) != "[a b]" {
			t.Errorf("Tenants = %v, %v", ts, err)
		}
	})
}

func TestEventsSQLite(t *testing.T) { testEvents(t, openSQLiteT) }

func TestEventsPostgres(t *testing.T) { testEvents(t, postgresOpener(t)) }
