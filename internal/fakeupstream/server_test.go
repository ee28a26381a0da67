package fakeupstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
)

// summariserPrompt mirrors compact/summarizer's user message: entries labelled "[role]" and
// separated by blank lines, inside <conversation> tags.
const summariserPrompt = "<previous_summary>\nold\n</previous_summary>\n\n<conversation>\n" +
	"[user] please refactor the parser so that it streams instead of buffering the whole body, thanks a lot\n\n" +
	"[assistant] Sure.\n\n" +
	"[tool call] shell({\"cmd\":\"ls\"})\n\n" +
	"[tool output call_1] a.go\nb.go\n\n" +
	"[user] now\nrun the tests\n</conversation>"

func TestDefaultSummary(t *testing.T) {
	cases := []struct{ name, transcript, want string }{
		{"empty", "", "FAKE-SUMMARY: 0 user entries\nEntries: 0."},
		{"one user", "[user] hi", "FAKE-SUMMARY: 1 user entry\nuser: \"hi\"\nEntries: 1."},
		{"labels with spaces count, long quotes cut at 80, newlines folded",
			mustTranscript(t, summariserPrompt),
			"FAKE-SUMMARY: 2 user entries\n" +
				"user: \"please refactor the parser so that it streams instead of buffering the whole bod\"\n" +
				"user: \"now run the tests\"\nEntries: 5."},
		{"a summary is not an entry", "[user] " + DefaultSummary("[user] x"),
			"FAKE-SUMMARY: 1 user entry\nuser: \"FAKE-SUMMARY: 1 user entry user: \\\"x\\\" Entries: 1.\"\nEntries: 1."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := DefaultSummary(tc.transcript); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func mustTranscript(t *testing.T, s string) string {
	t.Helper()
	tr, ok := extractTranscript(s)
	if !ok {
		t.Fatal("no <conversation>")
	}
	return tr
}

func TestSummariserCalls(t *testing.T) {
	content := marshal(summariserPrompt) // no HTML escaping, so the tag can be edited out below
	cases := []struct{ name, path, body, textPath string }{
		{"responses", "/v1/responses", `{"model":"s","instructions":"summarise","input":[{"role":"user","content":` + string(content) + `}]}`,
			"output.0.content.0.text"},
		{"responses string input", "/v1/responses", `{"model":"s","input":` + string(content) + `}`, "output.0.content.0.text"},
		{"chat", "/v1/chat/completions", `{"model":"s","messages":[{"role":"system","content":"summarise"},{"role":"user","content":` + string(content) + `}]}`,
			"choices.0.message.content"},
		{"messages", "/v1/messages", `{"model":"s","max_tokens":100,"messages":[{"role":"user","content":[{"type":"text","text":` + string(content) + `}]}]}`,
			"content.0.text"},
	}
	want := DefaultSummary(mustTranscript(t, summariserPrompt))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, base := start(t, Options{})
			status, _, body := post(t, base+tc.path, tc.body)
			if status != 200 {
				t.Fatalf("status %d: %s", status, body)
			}
			if got := gjson.GetBytes(body, tc.textPath).String(); got != want {
				t.Errorf("summary\n%s\nwant\n%s", got, want)
			}
			if r := s.Requests(); len(r) != 1 || r[0].Kind != KindSummary {
				t.Errorf("log %+v", r)
			}
			// A summariser call does not advance the turn counter.
			_, _, body = post(t, base+tc.path, strings.Replace(tc.body, "<conversation>", "conv", 1))
			if got := gjson.GetBytes(body, tc.textPath).String(); !strings.HasPrefix(got, "MOCK-REPLY 1: ") {
				t.Errorf("next turn: %q", got)
			}
		})
	}

	t.Run("custom summaries see the transcript", func(t *testing.T) {
		var seen string
		_, base := start(t, Options{Summaries: func(tr string) string { seen = tr; return "CUSTOM" }})
		_, _, body := post(t, base+"/v1/responses", cases[0].body)
		if got := gjson.GetBytes(body, "output.0.content.0.text").String(); got != "CUSTOM" {
			t.Errorf("text %q", got)
		}
		if seen != mustTranscript(t, summariserPrompt) || strings.Contains(seen, "<conversation>") {
			t.Errorf("transcript %q", seen)
		}
	})
}

func TestCompactionRejected(t *testing.T) {
	cases := []struct{ name, path, body string }{
		{"trigger", "/v1/responses", `{"model":"m","stream":true,"input":[{"role":"user","content":"hi"},{"type":"compaction_trigger"}]}`},
		{"compaction item", "/v1/responses", `{"model":"m","input":[{"type":"compaction","encrypted_content":"x"},{"role":"user","content":"hi"}]}`},
		{"legacy alias", "/v1/responses", `{"model":"m","input":[{"type":"compaction_summary","encrypted_content":"x"}]}`},
		{"context_management", "/v1/responses", `{"model":"m","input":"hi","context_management":[{"type":"compaction","compact_threshold":1000}]}`},
		{"anthropic block", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"compaction","content":"s"}]},{"role":"user","content":"hi"}]}`},
		{"anthropic edit", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"context_management":{"edits":[{"type":"compact_20260112"}]}}`},
		{"anthropic on-demand", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"compaction":{"type":"summarize"}}`},
	}
	s, base := start(t, Options{})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, hdr, body := post(t, base+tc.path, tc.body)
			if status != 400 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
				t.Fatalf("status %d type %q", status, hdr.Get("Content-Type"))
			}
			checkEnvelope(t, tc.path, body, "invalid_request_error")
		})
	}
	// Clear-thinking edits are ordinary traffic (Claude Code always sends one): not refused.
	status, _, body := post(t, base+"/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}}`)
	if status != 200 || gjson.GetBytes(body, "content.0.text").String() != "MOCK-REPLY 1: hi" {
		t.Errorf("clear_thinking: %d %s", status, body)
	}
	if n := len(s.Requests()); n != len(cases)+1 {
		t.Errorf("logged %d requests", n)
	}
}

// checkEnvelope asserts the error body has every key of its dialect's envelope.
func checkEnvelope(t *testing.T, path string, body []byte, typ string) {
	t.Helper()
	if strings.HasPrefix(path, "/v1/messages") {
		if gjson.GetBytes(body, "type").String() != "error" || gjson.GetBytes(body, "error.type").String() != typ ||
			gjson.GetBytes(body, "error.message").String() == "" || !strings.HasPrefix(gjson.GetBytes(body, "request_id").String(), "req_") {
			t.Errorf("anthropic envelope: %s", body)
		}
		return
	}
	e := gjson.GetBytes(body, "error")
	for _, k := range []string{"message", "type", "param", "code"} {
		if !e.Get(k).Exists() {
			t.Errorf("openai envelope lacks %q: %s", k, body)
		}
	}
	if e.Get("type").String() != typ {
		t.Errorf("type %q, want %q", e.Get("type").String(), typ)
	}
}

func TestFaultStatus(t *testing.T) {
	cases := []struct {
		path, status, typ string
		retryAfter        bool
	}{
		{"/v1/responses", "429", "requests", true},
		{"/v1/responses", "500", "server_error", false},
		{"/v1/chat/completions", "400", "invalid_request_error", false},
		{"/v1/messages", "429", "rate_limit_error", true},
		{"/v1/messages", "529", "overloaded_error", false},
		{"/v1/messages/count_tokens", "401", "authentication_error", false},
	}
	_, base := start(t, Options{})
	for _, tc := range cases {
		t.Run(tc.path+"/"+tc.status, func(t *testing.T) {
			status, hdr, body := post(t, base+tc.path, `{"model":"m","stream":true,"input":"hi","messages":[{"role":"user","content":"hi"}]}`,
				HeaderStatus, tc.status)
			if fmt.Sprint(status) != tc.status {
				t.Errorf("status %d", status)
			}
			if (hdr.Get("Retry-After") == "1") != tc.retryAfter {
				t.Errorf("Retry-After %q", hdr.Get("Retry-After"))
			}
			checkEnvelope(t, tc.path, body, tc.typ)
		})
	}
}

func TestFaultCut(t *testing.T) {
	cases := []struct {
		path, body string
		cut        int
	}{
		{"/v1/responses", `{"model":"m","stream":true,"input":"hi"}`, 0},
		{"/v1/responses", `{"model":"m","stream":true,"input":"hi"}`, 5},
		{"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, 2},
		{"/v1/messages", `{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, 3},
	}
	_, base := start(t, Options{})
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%d", tc.path, tc.cut), func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, base+tc.path, strings.NewReader(tc.body))
			req.Header.Set(HeaderCut, fmt.Sprint(tc.cut))
			resp, err := httpClient().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err == nil {
				t.Fatalf("stream ended cleanly: %s", got)
			}
			datas, partial := eventDatas(got)
			if len(datas) != tc.cut || !partial {
				t.Errorf("got %d whole events (a partial one after: %v), want %d and a partial one: %q", len(datas), partial, tc.cut, got)
			}
		})
	}
}

func TestNotFoundAndModels(t *testing.T) {
	s, base := start(t, Options{})
	status, _, body := post(t, base+"/v1/responses/compact", `{"model":"m","input":"hi"}`)
	if status != 404 {
		t.Errorf("compact: %d", status)
	}
	checkEnvelope(t, "/v1/responses/compact", body, "invalid_request_error")

	resp, err := httpClient().Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, ModelsList()) || !json.Valid(got) {
		t.Errorf("models %d %s", resp.StatusCode, got)
	}
	kinds := []dialect.Name{}
	for _, r := range s.Requests() {
		kinds = append(kinds, r.Kind)
	}
	if !slices.Equal(kinds, []dialect.Name{KindOther, KindOther}) {
		t.Errorf("kinds %v", kinds)
	}
}

func TestInvalidJSON(t *testing.T) {
	_, base := start(t, Options{})
	for _, path := range []string{"/v1/responses", "/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens"} {
		status, _, body := post(t, base+path, `{"model":`)
		if status != 400 {
			t.Errorf("%s: %d", path, status)
		}
		checkEnvelope(t, path, body, "invalid_request_error")
	}
}

func TestRequestLog(t *testing.T) {
	s, base := start(t, Options{})
	body := `{"model":"m","input":"hi"}`
	post(t, base+"/v1/responses?x=1", body, "Authorization", "Bearer k", "X-Custom", "v")
	post(t, base+"/v1/messages?beta=true", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"yo"}]}`)
	r := s.Requests()
	if len(r) != 2 {
		t.Fatalf("%d requests", len(r))
	}
	if r[0].Method != "POST" || r[0].Path != "/v1/responses" || r[0].RawQuery != "x=1" || string(r[0].Body) != body ||
		r[0].Header.Get("X-Custom") != "v" || r[0].Kind != dialect.Responses {
		t.Errorf("first %+v", r[0])
	}
	if r[1].Path != "/v1/messages" || r[1].RawQuery != "beta=true" || r[1].Kind != dialect.Messages {
		t.Errorf("second %+v", r[1])
	}
	// The copy is the caller's: changing it does not change the log.
	r[0].Header.Set("X-Custom", "changed")
	r[0] = Recorded{}
	if got := s.Requests(); got[0].Header.Get("X-Custom") != "v" {
		t.Error("log shares state with the copy")
	}

	s.Reset()
	if len(s.Requests()) != 0 {
		t.Error("Reset kept requests")
	}
	_, _, out := post(t, base+"/v1/responses", body)
	if got := gjson.GetBytes(out, "output.0.content.0.text").String(); got != "MOCK-REPLY 1: hi" {
		t.Errorf("counter not reset: %q", got)
	}

	s2, base2 := start(t, Options{DropBodies: true})
	post(t, base2+"/v1/responses", body)
	if r := s2.Requests(); r[0].Body != nil {
		t.Errorf("DropBodies kept %q", r[0].Body)
	}
}

// TestConcurrent runs under -race: parallel turns on all routes while the log is read.
func TestConcurrent(t *testing.T) {
	s, base := start(t, Options{Deltas: 3})
	const n = 40
	paths := []string{"/v1/responses", "/v1/chat/completions", "/v1/messages"}
	var wg sync.WaitGroup
	texts := make([]string, n)
	for i := range n {
		wg.Go(func() {
			path := paths[i%3]
			body := fmt.Sprintf(`{"model":"m","max_tokens":5,"input":"q%d","messages":[{"role":"user","content":"q%d"}]}`, i, i)
			status, _, out := post(t, base+path, body)
			if status != 200 {
				t.Errorf("%s: %d", path, status)
			}
			for _, p := range []string{"output.0.content.0.text", "choices.0.message.content", "content.0.text"} {
				if v := gjson.GetBytes(out, p); v.Exists() {
					texts[i] = v.String()
				}
			}
		})
		wg.Go(func() { _ = s.Requests() })
	}
	wg.Wait()
	if got := len(s.Requests()); got != n {
		t.Errorf("logged %d, want %d", got, n)
	}
	// Each route numbers its turns 1..k with no gaps or repeats.
	re := regexp.MustCompile(`^MOCK-REPLY (\d+): q(\d+)$`)
	seen := map[int]map[string]bool{}
	for i, txt := range texts {
		m := re.FindStringSubmatch(txt)
		if m == nil || m[2] != fmt.Sprint(i) {
			t.Fatalf("reply %d: %q", i, txt)
		}
		if seen[i%3] == nil {
			seen[i%3] = map[string]bool{}
		}
		seen[i%3][m[1]] = true
	}
	for route, nums := range seen {
		for k := 1; k <= len(nums); k++ {
			if !nums[fmt.Sprint(k)] {
				t.Errorf("route %d lacks turn %d: %v", route, k, nums)
			}
		}
	}
}

// TestDeterministic: two fresh servers fed the same requests write the same bytes.
func TestDeterministic(t *testing.T) {
	reqs := []struct{ path, body string }{
		{"/v1/responses", `{"model":"m","input":"one"}`},
		{"/v1/responses", `{"model":"m","stream":true,"input":"two [[call:f {\"a\":1}]]"}`},
		{"/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"three"}]}`},
		{"/v1/messages", `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"four"}]}`},
		{"/v1/responses", `{"model":"m","input":"<conversation>\n[user] x\n</conversation>"}`},
	}
	run := func() [][]byte {
		_, base := start(t, Options{})
		var out [][]byte
		for _, r := range reqs {
			_, _, b := post(t, base+r.path, r.body)
			out = append(out, b)
		}
		return out
	}
	a, b := run(), run()
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Errorf("request %d differs:\n%s\n%s", i, a[i], b[i])
		}
	}
	if bytes.Equal(a[0], a[4]) {
		t.Error("different requests gave the same bytes")
	}
}

// TestStopCancelsDelays: stop returns while a request sits in a long delay, and the client sees
// the connection go.
func TestStopCancelsDelays(t *testing.T) {
	s := New(Options{FirstByteDelay: time.Hour})
	base, stop, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		resp, err := httpClient().Post(base+"/v1/responses", "application/json", strings.NewReader(`{"input":"hi"}`))
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	for len(s.Requests()) == 0 {
		time.Sleep(time.Millisecond)
	}
	stop()
	stop() // idempotent
	if err := <-errc; err == nil {
		t.Error("request succeeded after stop")
	}
}

func TestSplitDeltas(t *testing.T) {
	cases := []struct {
		s    string
		n    int
		want []string
	}{
		{"abcdefgh", 4, []string{"ab", "cd", "ef", "gh"}},
		{"abcdefghi", 4, []string{"ab", "cd", "ef", "ghi"}},
		{"abc", 5, []string{"a", "b", "c"}},
		{"", 4, []string{""}},
		{"héllo wörld", 2, []string{"héllo", " wörld"}},
	}
	for _, tc := range cases {
		if got := splitDeltas(tc.s, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("splitDeltas(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestParseHelpers(t *testing.T) {
	if got := firstRunes("äöü", 2); got != "äö" {
		t.Errorf("firstRunes = %q", got)
	}
	calls := []struct {
		in         string
		name, args string
	}{
		{"x [[call:read_file {\"path\":\"a]b\"}]] y", "read_file", `{"path":"a]b"}`},
		{"[[call:noargs]]", "noargs", "{}"},
		{"[[call:multi {\n \"a\": 1\n}]]", "multi", "{\n \"a\": 1\n}"},
		{"no directive", "", ""},
		// A summary quoting a message cut short: the cut directive is not one, the next whole one is.
		{"asked to read [[call:read_fi… then [[call:bash {\"cmd\":\"ls\"}]]", "bash", `{"cmd":"ls"}`},
		{"quoted [[call:read_fi… and nothing after]]", "", ""},
	}
	for _, tc := range calls {
		got := parseCallDirective(tc.in)
		if tc.name == "" {
			if got != nil {
				t.Errorf("%q: unexpected %+v", tc.in, got)
			}
			continue
		}
		if got == nil || got.name != tc.name || got.args != tc.args {
			t.Errorf("%q: %+v", tc.in, got)
		}
	}
	toks := []struct {
		body string
		want int64
	}{
		{`{}`, 1},
		{`{"input":"` + strings.Repeat("a", 400) + `"}`, 100},
		// Plumbing (types, roles, ids) is not text.
		{`{"input":[{"type":"message","role":"user","id":"msg_123456789","content":[{"type":"input_text","text":"` + strings.Repeat("b", 80) + `"}]}]}`, 20},
		{`{"system":"` + strings.Repeat("c", 40) + `","messages":[{"role":"user","content":"` + strings.Repeat("d", 40) + `"}]}`, 20},
	}
	for _, tc := range toks {
		if got := estimateTokens(topFields(gjson.Parse(tc.body))); got != tc.want {
			t.Errorf("estimateTokens(%.40s…) = %d, want %d", tc.body, got, tc.want)
		}
	}
}
