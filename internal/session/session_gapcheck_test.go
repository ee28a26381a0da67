package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// barrierChecker blocks every call until n calls are in flight at once, then lets them all go.
// If GapCheck ran the checkers one after another the barrier would never open and the test would
// hang (and fail on the test deadline); no clock is involved.
type barrierChecker struct {
	n        int
	mu       sync.Mutex
	inflight int
	calls    []string // category of each call
	open     chan struct{}
	answer   func(category, excerpt string) []string
}

func newBarrierChecker(n int, answer func(category, excerpt string) []string) *barrierChecker {
	return &barrierChecker{n: n, open: make(chan struct{}), answer: answer}
}

func (b *barrierChecker) Check(ctx context.Context, category, excerpt string) ([]string, error) {
	b.mu.Lock()
	b.inflight++
	b.calls = append(b.calls, category)
	if b.inflight == b.n {
		close(b.open)
	}
	b.mu.Unlock()
	select {
	case <-b.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return b.answer(category, excerpt), nil
}

func TestGapCheckRunsCheckersInParallel(t *testing.T) {
	sessions := []Session{mustParse(t, codexFixture, FormatAuto)}
	tests := []struct {
		checkers, chunkTokens int
	}{
		{3, 1 << 20}, // one chunk: one call per category
		{5, 4000},    // categories cycle; checkers sharing one split the chunks
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.checkers), func(t *testing.T) {
			chunks := ChunkRaw(RenderRaw(sessions, 800), tt.chunkTokens)
			if tt.checkers > 3 && len(chunks) < 2 {
				t.Fatalf("need several chunks, got %d", len(chunks))
			}
			fake := newBarrierChecker(tt.checkers, func(category, _ string) []string {
				return []string{"- shared finding", "* " + category + " finding  ", "none"}
			})
			findings, err := GapCheck(context.Background(), fake, sessions, GapCheckOptions{Checkers: tt.checkers, ChunkTokens: tt.chunkTokens})
			if err != nil {
				t.Fatal(err)
			}
			if want := len(GapCategories) * len(chunks); len(fake.calls) != want {
				t.Errorf("%d calls, want one per category and chunk (%d)", len(fake.calls), want)
			}
			// Every call repeats "shared finding": it must appear once, under the first category.
			want := []Finding{
				{GapCategories[0], "shared finding"},
				{GapCategories[0], GapCategories[0] + " finding"},
				{GapCategories[1], GapCategories[1] + " finding"},
				{GapCategories[2], GapCategories[2] + " finding"},
			}
			if fmt.Sprint(findings) != fmt.Sprint(want) {
				t.Errorf("findings:\n got %v\nwant %v", findings, want)
			}
		})
	}
}

func TestGapCheckSeesToolOutput(t *testing.T) {
	sessions := []Session{mustParse(t, claudeFixture, FormatAuto)}
	var mu sync.Mutex
	var excerpts []string
	fake := checkerFunc(func(_ context.Context, _ string, excerpt string) ([]string, error) {
		mu.Lock()
		excerpts = append(excerpts, excerpt)
		mu.Unlock()
		return nil, nil
	})
	if _, err := GapCheck(context.Background(), fake, sessions, GapCheckOptions{Checkers: 1}); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(excerpts, "")
	// The escaping failure only appears in tool output, which the reduction drops.
	if !strings.Contains(all, "TestExportEscaping/quote_in_field") {
		t.Error("raw excerpt lacks the tool output the gap checker is meant to search")
	}
	for _, e := range excerpts {
		if n := CountTokens(e); n > 24000 {
			t.Errorf("excerpt of %d tokens exceeds the chunk budget", n)
		}
	}
}

type checkerFunc func(ctx context.Context, category, excerpt string) ([]string, error)

func (f checkerFunc) Check(ctx context.Context, c, e string) ([]string, error) { return f(ctx, c, e) }

func TestGapCheckError(t *testing.T) {
	boom := errors.New("summariser down")
	fake := checkerFunc(func(ctx context.Context, category, _ string) ([]string, error) {
		if category == GapCategories[1] {
			return nil, boom
		}
		<-ctx.Done() // the failure must cancel the other checkers
		return nil, ctx.Err()
	})
	_, err := GapCheck(context.Background(), fake, []Session{mustParse(t, codexFixture, FormatAuto)}, GapCheckOptions{Checkers: 3})
	if !errors.Is(err, boom) {
		t.Errorf("err = %v, want %v", err, boom)
	}
}

func TestNormaliseFinding(t *testing.T) {
	tests := []struct{ in, text, key string }{
		{"- Chose CAS bucket over x/time/rate.", "Chose CAS bucket over x/time/rate.", "chose cas bucket over x/time/rate"},
		{"  2) `pageSize` = 500  ", "`pageSize` = 500", "`pagesize` = 500"},
		{"*   spaced\tout   text", "spaced out text", "spaced out text"},
		{"- none", "", ""},
		{"Nothing found.", "", ""},
		{"", "", ""},
	}
	for _, tt := range tests {
		text, key := normaliseFinding(tt.in)
		if text != tt.text || key != tt.key {
			t.Errorf("normaliseFinding(%q) = %q, %q; want %q, %q", tt.in, text, key, tt.text, tt.key)
		}
	}
	if got := ParseFindingLines("Here you go:\n- a\n- b\n"); fmt.Sprint(got) != "[a b]" {
		t.Errorf("ParseFindingLines bulleted = %q", got)
	}
	if got := ParseFindingLines("a\n\nb"); fmt.Sprint(got) != "[a b]" {
		t.Errorf("ParseFindingLines plain = %q", got)
	}
}

// TestOpenAIGapChecker drives the Responses implementation against a local stand-in server.
func TestOpenAIGapChecker(t *testing.T) {
	var got struct {
		Model        string `json:"model"`
		Instructions string `json:"instructions"`
		Input        string `json:"input"`
		Store        *bool  `json:"store"`
	}
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/responses" {
			http.NotFound(w, r)
			return
		}
		auth = r.Header.Get("Authorization")
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &got); err != nil {
			t.Errorf("request body: %v", err)
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m",
			"output":[{"type":"message","id":"msg_1","role":"assistant","status":"completed",
			"content":[{"type":"output_text","annotations":[],"text":"- Rejected golang.org/x/time/rate: allocates per call\n- none"}]}],
			"parallel_tool_calls":false,"tool_choice":"auto","tools":[]}`)
	}))
	defer srv.Close()
	c := NewOpenAIGapChecker(srv.URL+"/v1", "sk-test", "gpt-test")
	findings, err := c.Check(context.Background(), GapCategories[0], "raw excerpt text")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(findings) != "[Rejected golang.org/x/time/rate: allocates per call none]" {
		t.Errorf("findings = %q", findings)
	}
	if got.Model != "gpt-test" || got.Input != "raw excerpt text" || !strings.Contains(got.Instructions, GapCategories[0]) {
		t.Errorf("request = %+v", got)
	}
	if got.Store == nil || *got.Store {
		t.Error("store should be false: session logs must not be retained by the summariser")
	}
	if auth != "Bearer sk-test" {
		t.Errorf("Authorization = %q", auth)
	}
}

func BenchmarkRenderChunk(b *testing.B) {
	s := []Session{mustParse(b, codexFixture, FormatAuto)}
	CountTokens("warm")
	b.ReportAllocs()
	for b.Loop() {
		_ = ChunkRaw(RenderRaw(s, 800), 24000)
	}
}
