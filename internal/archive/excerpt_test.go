package archive

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/compactd/compactd/internal/handoff"
)

func TestCut(t *testing.T) {
	long := strings.Repeat("alpha beta gamma ", 40) + "NEEDLE" + strings.Repeat(" delta épsilon zeta", 40)
	ms := strings.Index(long, "NEEDLE")
	cases := []struct {
		name     string
		text     string
		ms, me   int
		max      int
		contains string
		whole    bool
	}{
		{"fits whole", "short text", 0, 5, 100, "short text", true},
		{"centred", long, ms, ms + 6, 80, "NEEDLE", false},
		{"at start", long, 0, 5, 60, "alpha", false},
		{"at end", long, len(long) - 4, len(long), 60, "zeta", false},
		{"tiny budget", long, 0, 5, 8, "alpha", false},
		{"multibyte", strings.Repeat("é", 100), 100, 102, 21, "é", false},
	}
	for _, tc := range cases {
		got := cut(tc.text, tc.ms, tc.me, tc.max)
		if len(got) > tc.max {
			t.Errorf("%s: %d bytes > %d", tc.name, len(got), tc.max)
		}
		if !utf8.ValidString(got) {
			t.Errorf("%s: invalid UTF-8 %q", tc.name, got)
		}
		if !strings.Contains(got, tc.contains) {
			t.Errorf("%s: %q lacks %q", tc.name, got, tc.contains)
		}
		if (got == tc.text) != tc.whole {
			t.Errorf("%s: whole=%v, got %q", tc.name, !tc.whole, got)
		}
	}
}

// bestExcerpt is the first excerpt segmentExcerpts gives, the one a search shows first: its item
// index and text, or -1 and "" when no item matches.
func bestExcerpt(q []queryWord, items []json.RawMessage, maxBytes int) (int, string) {
	ex := segmentExcerpts(q, items, maxBytes, 1)
	if len(ex) == 0 {
		return -1, ""
	}
	return ex[0].index, ex[0].text
}

func TestBestExcerpt(t *testing.T) {
	items := []json.RawMessage{
		msg("user", "nothing relevant"),
		msg("user", "timeout only"),
		msg("assistant", "the parseConfig timeout again"),
		msg("user", "parseConfig timeout twice, later"),
	}
	idx, ex := bestExcerpt(parseQuery("parseConfig timeout"), items, 800)
	if idx != 2 || ex != "the parseConfig timeout again\nassistant" {
		t.Errorf("best = %d %q", idx, ex)
	}
	idx, ex = bestExcerpt(parseQuery("config"), items, 800) // through a part
	if idx != 2 || !strings.Contains(ex, "parseConfig") {
		t.Errorf("best by part = %d %q", idx, ex)
	}
	if idx, ex := bestExcerpt(parseQuery("x"), nil, 800); idx != -1 || ex != "" {
		t.Errorf("no items = %d %q", idx, ex)
	}
	if idx, ex := bestExcerpt(parseQuery("absent"), items, 800); idx != -1 || ex != "" {
		t.Errorf("no match = %d %q", idx, ex)
	}
}

// TestBestExcerptChoice covers the focused choice: which item wins and what the window holds.
func TestBestExcerptChoice(t *testing.T) {
	pad := func(n int) string { return strings.Repeat("filler words here ", n) }
	listing := "// package replica\nfunc helper() error {\n\treturn nil\n}\n" + pad(40) +
		"func syncSegmentReplica(ctx context.Context) (*Frame, error) {\n" + pad(40)
	cases := []struct {
		name     string
		query    string
		items    []json.RawMessage
		max      int
		want     int    // chosen item
		contains string // the excerpt must hold this
		lacks    string // and not this (empty: no check)
	}{
		{
			name:  "whole token beats parts",
			query: "syncSegmentReplica",
			items: []json.RawMessage{
				msg("tool", "sync the segment to the replica first"),
				msg("tool", "func syncSegmentReplica() error"),
			},
			max: 800, want: 1, contains: "func syncSegmentReplica",
		},
		{
			name:  "stop words do not count",
			query: "why rejected the cache",
			items: []json.RawMessage{
				msg("user", "why is the cache slow, and why the rush"),
				msg("assistant", "rejected the cache: it went stale"),
			},
			max: 800, want: 1, contains: "went stale",
		},
		{
			name:  "all stop words still match",
			query: "why the",
			items: []json.RawMessage{
				msg("user", "nothing here"),
				msg("user", "why though"),
			},
			max: 800, want: 1, contains: "why though",
		},
		{
			name:  "tie goes to the item repeating the words",
			query: "loadIndex",
			items: []json.RawMessage{
				msg("tool", "rg -n loadIndex internal"),
				msg("tool", "index.go:12: loadIndex()\nindex.go:40: func loadIndex() error"),
			},
			max: 800, want: 1, contains: "index.go:40",
		},
		{
			name:  "equal ties keep the first item",
			query: "loadIndex",
			items: []json.RawMessage{
				msg("tool", "loadIndex once"),
				msg("tool", "loadIndex again"),
			},
			max: 800, want: 0, contains: "once",
		},
		{
			name:  "window centres on the longest whole token, not the first word",
			query: "return type of syncSegmentReplica",
			items: []json.RawMessage{msg("tool", listing)},
			max:   200, want: 0, contains: "syncSegmentReplica(ctx", lacks: "func helper",
		},
		{
			name:  "part match is the fallback centre",
			query: "replica",
			items: []json.RawMessage{msg("tool", pad(40)+"call syncSegmentReplica now"+pad(40))},
			max:   120, want: 0, contains: "syncSegmentReplica",
		},
		{
			name:  "all parts present count as a part match",
			query: "parseConfig",
			items: []json.RawMessage{
				msg("user", "unrelated"),
				msg("user", "parse the config"),
			},
			max: 800, want: 1, contains: "parse the config",
		},
		{
			name:  "multibyte text stays valid and bounded",
			query: "ÉTAT clé",
			items: []json.RawMessage{msg("tool", strings.Repeat("é ", 200)+"clé ÉTAT"+strings.Repeat(" ü", 200))},
			max:   61, want: 0, contains: "clé",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			idx, ex := bestExcerpt(parseQuery(tc.query), tc.items, tc.max)
			if idx != tc.want {
				t.Errorf("item %d, want %d (excerpt %q)", idx, tc.want, ex)
			}
			if len(ex) > tc.max || !utf8.ValidString(ex) {
				t.Errorf("excerpt %d bytes (max %d), valid UTF-8 %v", len(ex), tc.max, utf8.ValidString(ex))
			}
			if !strings.Contains(ex, tc.contains) {
				t.Errorf("excerpt %q lacks %q", ex, tc.contains)
			}
			if tc.lacks != "" && strings.Contains(ex, tc.lacks) {
				t.Errorf("excerpt %q holds %q", ex, tc.lacks)
			}
		})
	}
}

// BenchmarkSegmentExcerpts measures choosing and cutting the excerpts of a 60-item segment, the
// work Search does for each of its hits after decrypting it.
func BenchmarkSegmentExcerpts(b *testing.B) {
	var items []json.RawMessage
	for i := range 60 {
		items = append(items, msg("tool", fmt.Sprintf("internal/pkg%d/file.go:%d: func handleRequest%d(ctx context.Context) error {\n%s",
			i, 10*i, i, strings.Repeat("\tif err := doThing(ctx); err != nil { return err }\n", 20))))
	}
	q := parseQuery("return type of handleRequest42")
	b.ReportAllocs()
	for b.Loop() {
		segmentExcerpts(q, items, 800, maxItemsPerHit)
	}
}

// TestSegmentExcerpts covers what one segment gives a search: the best item, the items that
// match as well as it does (in conversation order, so a later correction reads after what it
// corrects), and never compactd's own writing that came back in the history.
func TestSegmentExcerpts(t *testing.T) {
	call := json.RawMessage(`{"type":"function_call","call_id":"c1","name":"exec_command","arguments":"{\"cmd\":\"rg -n retryAccountWebhook internal\"}"}`)
	out := json.RawMessage(`{"type":"function_call_output","call_id":"c1","output":"internal/a/b.go:41:\tif err := h.retryAccountWebhook(ctx, id); err != nil {\ninternal/x/order_client.go:1832:func retryAccountWebhook(ctx context.Context) error {\ninternal/c/d.go:77:\tif err := h.retryAccountWebhook(ctx, id); err != nil {"}`)
	echo := msg("assistant", "MOCK-REPLY 3: Verbatim excerpts from this conversation's archived history matching \"retryAccountWebhook\", best first:\n[1] retryAccountWebhook retryAccountWebhook retryAccountWebhook")
	summary := msg("user", handoff.Text("retryAccountWebhook retryAccountWebhook", ""))
	messagesSummary := msg("user", handoff.MessagesText("retryAccountWebhook", "## Facts ledger\n- retryAccountWebhook"))
	ledger := msg("user", "This session is being continued.\n<summary>\nwork so far\n## Facts ledger\n### Values\n- `retryAccountWebhook retryAccountWebhook`\n</summary>")
	cases := []struct {
		name  string
		query string
		items []json.RawMessage
		want  []int    // item indexes, in order
		holds []string // each excerpt, in order, holds this
	}{
		{
			name: "the output that defines the name, with its call before it", query: "retryAccountWebhook",
			items: []json.RawMessage{msg("user", "unrelated"), call, out},
			want:  []int{1, 2}, holds: []string{"rg -n retryAccountWebhook", "order_client.go:1832:func retryAccountWebhook"},
		},
		{
			name: "a correction reads after what it corrects", query: "publishWebhookInvoice",
			items: []json.RawMessage{
				msg("assistant", "I'll set the batch limit for publishWebhookInvoice to 32, as in the other workers."),
				msg("user", "Wait, that is wrong. Correction: the batch limit for publishWebhookInvoice must be 229, not 32."),
			},
			want: []int{0, 1}, holds: []string{"to 32", "must be 229"},
		},
		{
			name: "compactd's own recall quote, summary and ledger are not history", query: "retryAccountWebhook",
			items: []json.RawMessage{echo, summary, messagesSummary, ledger, out},
			want:  []int{4}, holds: []string{"order_client.go:1832"},
		},
		{
			name: "the model's words before a quoted recall result stay searchable", query: "deployWindow",
			items: []json.RawMessage{msg("assistant", "deployWindow is Tuesday. Verbatim excerpts from this conversation's archived history matching \"x\":\nnothing")},
			want:  []int{0}, holds: []string{"deployWindow is Tuesday"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := inConversationOrder(segmentExcerpts(parseQuery(tc.query), tc.items, 800, 3))
			var idx []int
			for _, e := range got {
				idx = append(idx, e.index)
			}
			if fmt.Sprint(idx) != fmt.Sprint(tc.want) {
				t.Fatalf("items %v, want %v (%+v)", idx, tc.want, got)
			}
			for i, e := range got {
				if !strings.Contains(e.text, tc.holds[i]) {
					t.Errorf("excerpt %d %q lacks %q", i, e.text, tc.holds[i])
				}
				if strings.Contains(e.text, "Verbatim excerpts") {
					t.Errorf("excerpt %d quotes a recall result: %q", i, e.text)
				}
			}
		})
	}
}
