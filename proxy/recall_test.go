package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/proxy"
)

// plantedFact sits in a tool output that the summary (the fake's quotes of user messages) loses.
const plantedFact = "listen port is 8443 per ZETA-PLANT config"

// withArchive gives the harness a SQLite archive keyed by its own keyring.
func withArchive(t *testing.T, more func(*proxy.Config)) func(*proxy.Config) {
	return func(c *proxy.Config) {
		sealer, err := archive.KeyringSealer(c.Sealer.(*crypto.Keyring), "")
		if err != nil {
			t.Fatal(err)
		}
		st, err := archive.Open(context.Background(), filepath.Join(t.TempDir(), "archive.db"), sealer)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		c.Archive, c.RetainTokens = st, 1000
		if more != nil {
			more(c)
		}
	}
}

// recallHistory is a history long enough to compact whose tool output holds the planted fact.
func recallHistory() []any {
	items := toAny(history(6, 400))
	return append(items[:3:3], append([]any{
		map[string]any{"type": "function_call", "call_id": "call_cfg", "name": "shell", "arguments": `{"command":["bash","-lc","cat config.yaml"]}`},
		map[string]any{"type": "function_call_output", "call_id": "call_cfg", "output": "Exit code: 0\nWall time: 0.01 seconds\nOutput:\nserver:\n  port: 8443\n  # " + plantedFact + "\n"},
	}, items[3:]...)...)
}

// compactThenAsk compacts a history and returns the next turn's input, whose last user message
// makes the fake model call the recall tool.
func compactThenAsk(t *testing.T, h *harness) []any {
	t.Helper()
	items := recallHistory()
	resp, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", items), threshold(2000), option.WithHeader("X-Compactd-Session", "conv-recall"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Output[0].Type != "compaction" {
		t.Fatal("first turn did not compact")
	}
	for _, o := range resp.Output {
		items = append(items, json.RawMessage(o.RawJSON()))
	}
	return append(items, map[string]any{"role": "user", "content": `Which port? [[call:compactd_recall {"query":"ZETA-PLANT port"}]]`})
}

// assertRecallRound checks what the upstream saw: the recall tool offered, then its result fed back.
func assertRecallRound(t *testing.T, h *harness, firstTurnRequests int) {
	t.Helper()
	up := h.upstream(dialect.Responses)[firstTurnRequests:]
	if len(up) != 2 {
		t.Fatalf("turn two made %d upstream calls, want 2 (recall round + answer)", len(up))
	}
	if gjson.GetBytes(up[0].Body, `tools.#(name=="compactd_recall")`).Raw == "" {
		t.Error("recall tool not offered to the upstream")
	}
	out := gjson.GetBytes(up[1].Body, `input.#(type=="function_call_output").output`).Str
	if !strings.Contains(out, plantedFact) {
		t.Errorf("recall result fed back upstream lacks the planted fact: %.300q", out)
	}
}

func TestRecallJSONIsInvisibleToTheClient(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, withArchive(t, nil))
	next := compactThenAsk(t, h)
	before := len(h.upstream(dialect.Responses))
	resp, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", next))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range resp.Output {
		if o.Type == "function_call" {
			t.Errorf("client saw a recall item: %s", o.RawJSON())
		}
	}
	if !strings.HasPrefix(resp.OutputText(), "MOCK-REPLY") {
		t.Errorf("answer = %q", resp.OutputText())
	}
	if strings.Contains(resp.RawJSON(), `"name":"compactd_recall"`) {
		t.Error("the response names the recall tool")
	}
	assertRecallRound(t, h, before)

	// Usage is the sum of both rounds: replay the recorded rounds against a fresh fake.
	var want int64
	fresh := fakeupstream.New(fakeupstream.Options{})
	for _, r := range h.upstream(dialect.Responses)[before:] {
		rec := httptestRecorder(fresh, r.Body)
		want += gjson.GetBytes(rec, "usage.input_tokens").Int()
	}
	if resp.Usage.InputTokens != want {
		t.Errorf("usage.input_tokens = %d, want the sum of both rounds %d", resp.Usage.InputTokens, want)
	}
}

func TestRecallSSEIsInvisibleToTheClient(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{Deltas: 3}, withArchive(t, nil))
	next := compactThenAsk(t, h)
	before := len(h.upstream(dialect.Responses))
	stream := h.client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", next))
	seq := int64(-1)
	var text strings.Builder
	var completed responses.Response
	created := 0
	for stream.Next() {
		ev := stream.Current()
		if strings.Contains(ev.RawJSON(), `"name":"compactd_recall"`) {
			t.Errorf("client saw a recall event: %s", ev.RawJSON())
		}
		if ev.SequenceNumber != seq+1 {
			t.Errorf("%s: sequence_number %d after %d", ev.Type, ev.SequenceNumber, seq)
		}
		seq = ev.SequenceNumber
		switch ev.Type {
		case "response.created":
			created++
		case "response.output_text.delta":
			if ev.OutputIndex != 0 {
				t.Errorf("answer at output_index %d, want 0", ev.OutputIndex)
			}
			text.WriteString(ev.Delta)
		case "response.completed":
			completed = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if created != 1 {
		t.Errorf("%d response.created events, want 1", created)
	}
	if !strings.HasPrefix(text.String(), "MOCK-REPLY") || len(completed.Output) != 1 || completed.Output[0].Type != "message" {
		t.Errorf("final response: text %q, output %v", text.String(), completed.Output)
	}
	assertRecallRound(t, h, before)
}

func TestRecallOffWithoutArchiveOrWhenDisabled(t *testing.T) {
	for name, mutate := range map[string]func(*proxy.Config){
		"no archive": retain(1000),
		"disabled":   withArchive(t, func(c *proxy.Config) { c.Recall.Disabled = true }),
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, fakeupstream.Options{}, mutate)
			next := compactThenAsk(t, h)
			before := len(h.upstream(dialect.Responses))
			if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", next)); err != nil {
				t.Fatal(err)
			}
			up := h.upstream(dialect.Responses)[before:]
			if len(up) != 1 || strings.Contains(string(up[0].Body), `"compactd_recall","description"`) {
				t.Errorf("recall offered or run: %d upstream calls", len(up))
			}
		})
	}
}

func TestArchiveLineageAcrossCompactions(t *testing.T) {
	var store archive.Store
	h := newHarness(t, fakeupstream.Options{}, withArchive(t, func(c *proxy.Config) { store = c.Archive; c.Recall.Disabled = true }))
	var items []any
	var lastItem string
	for round := 0; round < 3; round++ {
		items = append(items, toAny(history(6, 400))...)
		req := option.WithHeader("X-Compactd-Session", "conv-lineage")
		resp, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", items), threshold(2000), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Output[0].Type != "compaction" {
			t.Fatalf("round %d did not compact", round)
		}
		lastItem = resp.Output[0].AsCompaction().ID
		for _, o := range resp.Output {
			items = append(items, json.RawMessage(o.RawJSON()))
		}
	}
	convs, err := store.Conversations(context.Background(), "")
	if err != nil || len(convs) != 1 || convs[0].ID != "conv-lineage" || convs[0].Segments != 3 {
		t.Fatalf("conversations = %+v, err %v", convs, err)
	}
	hits, err := store.Search(context.Background(), archive.Query{Text: marker("A", 0), Conversation: "conv-lineage", Limit: 10})
	if err != nil || len(hits) == 0 {
		t.Fatalf("search: %v hits, err %v", len(hits), err)
	}
	// Walk back from the newest segment: three segments, linked.
	refs, err := store.Lineage(context.Background(), "", newestSegment(t, store, hits))
	if err != nil || len(refs) != 3 {
		t.Errorf("lineage = %v (err %v), want 3 linked segments (last item %s)", refs, err, lastItem)
	}
}

func newestSegment(t *testing.T, st archive.Store, hits []archive.Hit) string {
	t.Helper()
	newest := hits[0]
	for _, h := range hits {
		if h.CreatedAt.After(newest.CreatedAt) {
			newest = h
		}
	}
	return newest.SegmentID
}

func TestAdminAPI(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, withArchive(t, func(c *proxy.Config) { c.AdminToken = "s3cret-admin" }))
	compactThenAsk(t, h)
	do := func(method, path, token string) (int, []byte) {
		req, _ := http.NewRequest(method, h.proxyURL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	search := "/v1/compactd/conversations/conv-recall/search?q=ZETA-PLANT"
	for _, tok := range []string{"", "wrong", "s3cret-admin-but-longer"} {
		if code, _ := do("GET", search, tok); code != http.StatusUnauthorized {
			t.Errorf("token %q: status %d, want 401", tok, code)
		}
	}
	code, body := do("GET", search, "s3cret-admin")
	if code != 200 || !strings.Contains(gjson.GetBytes(body, "data.0.excerpt").Str, plantedFact) {
		t.Fatalf("search: %d %s", code, body)
	}
	if code, body := do("DELETE", "/v1/compactd/conversations/conv-recall", "s3cret-admin"); code != 200 || gjson.GetBytes(body, "segments").Int() != 1 {
		t.Fatalf("delete: %d %s", code, body)
	}
	if _, body := do("GET", search, "s3cret-admin"); len(gjson.GetBytes(body, "data").Array()) != 0 {
		t.Errorf("deleted history still found: %s", body)
	}
	// Without a token configured the API does not exist.
	off := newHarness(t, fakeupstream.Options{}, withArchive(t, nil))
	req, _ := http.NewRequest("GET", off.proxyURL+search, nil)
	req.Header.Set("Authorization", "Bearer anything")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("admin API without a token configured: %d, want 404", resp.StatusCode)
	}
}

// httptestRecorder serves body to h as a POST /v1/responses and returns the response body.
func httptestRecorder(h http.Handler, body []byte) []byte {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/responses", bytes.NewReader(body)))
	return rec.Body.Bytes()
}

// The facts ledger is sealed with the summary and rendered after it; with GapCheck a second
// summariser pass adds what is still missing.
func TestLedgerAndGapCheck(t *testing.T) {
	for _, gap := range []bool{false, true} {
		h := newHarness(t, fakeupstream.Options{}, withArchive(t, func(c *proxy.Config) { c.GapCheck = gap; c.Recall.Disabled = true }))
		if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
			option.WithJSONSet("input", recallHistory()), threshold(2000)); err != nil {
			t.Fatal(err)
		}
		calls := len(h.upstream(fakeupstream.KindSummary))
		if want := map[bool]int{false: 1, true: 2}[gap]; calls != want {
			t.Errorf("gap=%v: %d summariser calls, want %d", gap, calls, want)
		}
		handoffText := h.lastUpstreamInput(t)
		last := handoffText[len(handoffText)-1].Get("content.0.text").Str
		if !strings.Contains(last, "## Facts ledger") || !strings.Contains(last, "cat config.yaml") {
			t.Errorf("gap=%v: handoff lacks the ledger with the command run: %q", gap, last[len(handoff.Prefix):])
		}
		if strings.Contains(last, "### Gap check") != gap {
			t.Errorf("gap=%v: gap-check section present = %v", gap, !gap)
		}
	}
}

// A Responses round that calls the recall tool beside one of the client's function tools: the
// client's call is not relayed and not sent upstream without its output (the API refuses a
// function_call with no function_call_output); the model is asked again with the recall result.
func TestRecallBesideAClientToolCall(t *testing.T) {
	const (
		note   = `{"id":"msg_1","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Let me check.","annotations":[]}]}`
		shell  = `{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_shell","name":"shell","arguments":"{\"command\":[\"ls\"]}"}`
		recall = `{"id":"fc_2","type":"function_call","status":"completed","call_id":"call_rec","name":"compactd_recall","arguments":"{\"query\":\"ZETA-PLANT port\"}"}`
		answer = `{"id":"msg_2","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"8443.","annotations":[]}]}`
	)
	rounds := [][]string{{note, shell, recall}, {answer}}
	var mu sync.Mutex
	var bodies [][]byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		out := rounds[min(len(bodies), len(rounds))-1]
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"resp_s","object":"response","status":"completed","model":"m","output":[`+strings.Join(out, ",")+
			`],"usage":{"input_tokens":100,"input_tokens_details":{"cached_tokens":0},"output_tokens":10,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":110}}`)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	h := newHarness(t, fakeupstream.Options{}, withArchive(t, func(c *proxy.Config) { c.Upstream = u }))
	resp, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", recallHistory()), threshold(2000), option.WithHeader("X-Compactd-Session", "conv-mixed"))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 2 {
		t.Fatalf("%d upstream rounds, want 2", len(bodies))
	}
	in := gjson.GetBytes(bodies[1], "input").Array()
	tail := in[len(in)-3:]
	if tail[0].Get("id").Str != "msg_1" || tail[1].Get("call_id").Str != "call_rec" || tail[2].Get("type").Str != "function_call_output" ||
		tail[2].Get("call_id").Str != "call_rec" || !strings.Contains(tail[2].Get("output").Str, plantedFact) {
		t.Errorf("round 2 input ends with %v, want the message, the recall call and its output", tail)
	}
	if strings.Contains(string(bodies[1]), "call_shell") {
		t.Error("the client's call went upstream without its output")
	}
	var types []string
	for _, o := range resp.Output {
		types = append(types, o.Type)
	}
	if strings.Join(types, ",") != "compaction,message,message" || strings.Contains(resp.RawJSON(), "call_shell") || strings.Contains(resp.RawJSON(), "compactd_recall") {
		t.Errorf("client output %v: %s", types, resp.RawJSON())
	}
	if resp.Usage.InputTokens != 200 || resp.Usage.TotalTokens != 220 {
		t.Errorf("usage %s, want two rounds summed", resp.Usage.RawJSON())
	}
}
