package proxy_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/proxy"
)

// dialectFixture is what a well-behaved upstream of one API answers a turn with.
type dialectFixture struct {
	name   string
	json   []byte   // a complete non-streaming answer
	events [][]byte // a complete stream, one SSE event each
}

func sseEvent(name, data string) []byte { return []byte("event: " + name + "\ndata: " + data + "\n\n") }

var responsesFixture = dialectFixture{
	name: "responses",
	json: []byte(`{"id":"resp_up","object":"response","created_at":1,"status":"completed","model":"gpt-test","output":[{"type":"message","id":"msg_up","status":"completed","role":"assistant","content":[{"type":"output_text","text":"MOCK-REPLY from the broken upstream","annotations":[]}]}],"usage":{"input_tokens":10,"output_tokens":5,"total_tokens":15}}`),
	events: [][]byte{
		sseEvent("response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_up","object":"response","status":"in_progress","output":[]}}`),
		sseEvent("response.in_progress", `{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_up","object":"response","status":"in_progress","output":[]}}`),
		sseEvent("response.output_item.added", `{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"type":"message","id":"msg_up","status":"in_progress","role":"assistant","content":[]}}`),
		sseEvent("response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":3,"output_index":0,"item_id":"msg_up","content_index":0,"delta":"MOCK-REPLY"}`),
		sseEvent("response.output_item.done", `{"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{"type":"message","id":"msg_up","status":"completed","role":"assistant","content":[{"type":"output_text","text":"MOCK-REPLY","annotations":[]}]}}`),
		sseEvent("response.completed", `{"type":"response.completed","sequence_number":5,"response":{"id":"resp_up","object":"response","status":"completed","output":[{"type":"message","id":"msg_up","status":"completed","role":"assistant","content":[{"type":"output_text","text":"MOCK-REPLY","annotations":[]}]}],"usage":{"input_tokens":10,"output_tokens":5,"total_tokens":15}}}`),
	},
}

var messagesFixture = dialectFixture{
	name: "messages",
	json: []byte(`{"id":"msg_up","type":"message","role":"assistant","model":"claude-fake","content":[{"type":"text","text":"MOCK-REPLY from the broken upstream"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`),
	events: [][]byte{
		sseEvent("message_start", `{"type":"message_start","message":{"id":"msg_up","type":"message","role":"assistant","model":"claude-fake","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}`),
		sseEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		sseEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"MOCK-REPLY"}}`),
		sseEvent("content_block_stop", `{"type":"content_block_stop","index":0}`),
		sseEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`),
		sseEvent("message_stop", `{"type":"message_stop"}`),
	},
}

// brokenCase is one way an upstream can answer a compaction turn with something compactd cannot
// rewrite; ok cases are the controls that show the turn compacts when the upstream behaves.
type brokenCase struct {
	name   string
	stream bool // what the client asks for
	ok     bool // the turn succeeds
	capped bool // run with a 4 KiB rewrite limit
	// eventCapped runs with a 4 KiB limit on one SSE event
	eventCapped bool
	serve       func(w http.ResponseWriter, f dialectFixture)
}

func writeJSONBody(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func writeSSE(w http.ResponseWriter, events ...[]byte) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	for _, ev := range events {
		_, _ = w.Write(ev)
		http.NewResponseController(w).Flush()
	}
}

// garbled is event 3 of the fixture with its JSON cut short but the event itself complete.
func garbled(f dialectFixture) []byte {
	ev := f.events[3]
	i := bytes.Index(ev, []byte("data: ")) + len("data: ")
	data := bytes.TrimRight(ev[i:], "\n")
	return append(append(append([]byte{}, ev[:i]...), data[:len(data)/2]...), "\n\n"...)
}

var brokenCases = []brokenCase{
	{name: "ok JSON", ok: true, serve: func(w http.ResponseWriter, f dialectFixture) { writeJSONBody(w, f.json) }},
	{name: "ok stream", stream: true, ok: true, serve: func(w http.ResponseWriter, f dialectFixture) { writeSSE(w, f.events...) }},
	{name: "truncated JSON", serve: func(w http.ResponseWriter, f dialectFixture) { writeJSONBody(w, f.json[:len(f.json)/2]) }},
	{name: "JSON body cut off", serve: func(w http.ResponseWriter, f dialectFixture) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "100000")
		_, _ = w.Write(f.json[:len(f.json)/2])
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}},
	{name: "JSON over the rewrite cap", capped: true, serve: func(w http.ResponseWriter, f dialectFixture) {
		body, _ := sjson.SetBytes(f.json, "padding", strings.Repeat("x", 8<<10))
		writeJSONBody(w, body)
	}},
	{name: "JSON without the array to extend", serve: func(w http.ResponseWriter, f dialectFixture) {
		writeJSONBody(w, []byte(`{"id":"x","object":"response","type":"message","output":null,"content":null}`))
	}},
	{name: "SSE to a non-stream request", serve: func(w http.ResponseWriter, f dialectFixture) { writeSSE(w, f.events...) }},
	{name: "garbled event mid-stream", stream: true, serve: func(w http.ResponseWriter, f dialectFixture) {
		writeSSE(w, append(append(f.events[:3:3], garbled(f)), f.events[4:]...)...)
	}},
	{name: "non-JSON event mid-stream", stream: true, serve: func(w http.ResponseWriter, f dialectFixture) {
		writeSSE(w, append(append(f.events[:3:3], []byte("event: oops\ndata: <html>Bad Gateway</html>\n\n")), f.events[4:]...)...)
	}},
	{name: "event over the cap mid-stream", stream: true, eventCapped: true, serve: func(w http.ResponseWriter, f dialectFixture) {
		writeSSE(w, append(append(f.events[:3:3], padded(f.events[3], 8<<10)), f.events[4:]...)...)
	}},
	{name: "ok stream in CRLF and multi-line data", stream: true, ok: true, serve: func(w http.ResponseWriter, f dialectFixture) {
		writeSSE(w, respelled(f.events)...)
	}},
	{name: "stream cut mid-event", stream: true, serve: func(w http.ResponseWriter, f dialectFixture) {
		writeSSE(w, append(f.events[:3:3], f.events[3][:len(f.events[3])/2])...)
		panic(http.ErrAbortHandler)
	}},
}

// padded is ev with n bytes more in its JSON data.
func padded(ev []byte, n int) []byte {
	i := bytes.Index(ev, []byte("data: ")) + len("data: ")
	data, _ := sjson.SetBytes(bytes.TrimRight(ev[i:], "\n"), "padding", strings.Repeat("x", n))
	return append(append(append([]byte{}, ev[:i]...), data...), "\n\n"...)
}

// respelled is the events with CRLF line ends and each event's JSON over two data lines.
func respelled(events [][]byte) [][]byte {
	out := make([][]byte, len(events))
	for i, ev := range events {
		ev = bytes.Replace(ev, []byte(","), []byte(",\ndata: "), 1)
		out[i] = bytes.ReplaceAll(ev, []byte("\n"), []byte("\r\n"))
	}
	return out
}

// brokenUpstream answers every model turn with c; the summariser stays the fake upstream.
func brokenUpstream(t *testing.T, c *brokenCase, f *dialectFixture) *url.URL {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		c.serve(w, *f)
	}))
	t.Cleanup(ts.Close)
	u, _ := url.Parse(ts.URL)
	return u
}

// brokenTurn is a raw compaction turn of the dialect (raw, so the test sees every byte).
func brokenTurn(t *testing.T, h *harness, dialect string, stream bool) *http.Response {
	t.Helper()
	var path string
	var body []byte
	hdr := http.Header{"Content-Type": {"application/json"}}
	switch dialect {
	case "messages":
		path = "/v1/messages"
		body = mustJSON(t, params(append(longHistory(16), userText("next?")), compactEdit(50_000, false)))
		hdr.Set("Anthropic-Beta", "compact-2026-01-12")
		hdr.Set("X-Api-Key", "sk-ant-test")
		hdr.Set("Anthropic-Version", "2023-06-01")
	default:
		path = "/v1/responses"
		body = mustJSON(t, map[string]any{"model": testModel, "input": history(6, 400),
			"context_management": []map[string]any{{"type": "compaction", "compact_threshold": 2000}}})
		hdr.Set("Authorization", "Bearer sk-test")
	}
	body, _ = sjson.SetBytes(body, "stream", stream)
	req, _ := http.NewRequest(http.MethodPost, h.proxyURL+path, bytes.NewReader(body))
	req.Header = hdr
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// sseEvents splits a stream into (event name, data) pairs, with compactd's SSE reader.
func sseEvents(t *testing.T, body []byte) (names []string, datas [][]byte) {
	t.Helper()
	rd := sse.NewReader(bytes.NewReader(body))
	for {
		ev, err := rd.Next()
		if err != nil {
			return names, datas
		}
		if ev.HasData() {
			names = append(names, ev.Name)
			datas = append(datas, bytes.TrimSpace(append([]byte(nil), ev.Data...)))
		}
	}
}

// Whatever the upstream sends on a compaction turn, the client gets valid JSON: the rewritten
// answer, a 502 in its route's dialect saying the retry is safe, or (once the stream is on its
// way) the dialect's terminal error event — never a broken 200.
func TestUpstreamBrokenResponses(t *testing.T) {
	type variant struct {
		name   string
		f      *dialectFixture
		mutate func(*testing.T) func(*proxy.Config)
	}
	variants := []variant{
		{"responses", &responsesFixture, func(*testing.T) func(*proxy.Config) { return retain(1000) }},
		{"responses+recall", &responsesFixture, func(t *testing.T) func(*proxy.Config) { return withArchive(t, nil) }},
		{"messages", &messagesFixture, func(*testing.T) func(*proxy.Config) { return nil }},
	}
	for _, v := range variants {
		for i := range brokenCases {
			c := &brokenCases[i]
			t.Run(v.name+"/"+c.name, func(t *testing.T) {
				if c.capped {
					t.Cleanup(proxy.SetRewriteCapForTest(4 << 10))
				}
				if c.eventCapped {
					t.Cleanup(proxy.SetEventCapForTest(4 << 10))
				}
				up := brokenUpstream(t, c, v.f)
				more := v.mutate(t)
				h := newHarness(t, fakeupstream.Options{}, func(cfg *proxy.Config) {
					if more != nil {
						more(cfg)
					}
					cfg.Upstream, cfg.AnthropicUpstream = up, up
				})
				resp := brokenTurn(t, h, v.f.name, c.stream)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if n := len(h.upstream(fakeupstream.KindSummary)); n == 0 {
					t.Fatal("the turn did not compact")
				}
				checkBrokenAnswer(t, v.f.name, c, resp, body)
			})
		}
	}
}

func checkBrokenAnswer(t *testing.T, dialect string, c *brokenCase, resp *http.Response, body []byte) {
	t.Helper()
	isSSE := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if !isSSE {
		if err := jsonx.Valid(body); err != nil {
			t.Fatalf("status %d: the client got invalid JSON (%v): %.300s", resp.StatusCode, err, body)
		}
		if c.ok {
			arr := "output"
			if dialect == "messages" {
				arr = "content"
			}
			if resp.StatusCode != 200 || gjson.GetBytes(body, arr+".0.type").Str != "compaction" {
				t.Fatalf("control: status %d, %s[0] = %s", resp.StatusCode, arr, gjson.GetBytes(body, arr+".0.type"))
			}
			return
		}
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d, want 502: %.300s", resp.StatusCode, body)
		}
		msg := checkEnvelope(t, dialect, body)
		if !strings.Contains(msg, "compaction") || !strings.Contains(msg, "still valid") || !strings.Contains(msg, "retry") {
			t.Errorf("the message does not say the retry is safe: %q", msg)
		}
		return
	}
	if !c.stream {
		t.Fatalf("a non-stream request got an event stream (status %d): %.300s", resp.StatusCode, body)
	}
	names, datas := sseEvents(t, body)
	if len(datas) == 0 {
		t.Fatalf("empty stream: %q", body)
	}
	for i, d := range datas {
		if err := jsonx.Valid(d); err != nil {
			t.Fatalf("event %d (%s) is not valid JSON: %s", i, names[i], d)
		}
	}
	last := gjson.ParseBytes(datas[len(datas)-1])
	if c.ok {
		if dialect == "messages" {
			if last.Get("type").Str != "message_stop" || gjson.GetBytes(datas[1], "content_block.type").Str != "compaction" {
				t.Fatalf("control stream: %q", names)
			}
		} else if last.Get("type").Str != "response.completed" || last.Get("response.output.0.type").Str != "compaction" {
			t.Fatalf("control stream ends with %s", last.Raw)
		}
		return
	}
	for _, d := range datas {
		if typ := gjson.GetBytes(d, "type").Str; typ == "response.completed" || typ == "message_stop" || typ == "message_delta" {
			t.Fatalf("an event after the broken one reached the client: %s", d)
		}
	}
	switch dialect {
	case "messages":
		if last.Get("type").Str != "error" || last.Get("error.type").Str != "api_error" {
			t.Fatalf("stream does not end with an api_error event: %s", last.Raw)
		}
	default:
		if last.Get("type").Str != "response.failed" || gjson.GetBytes(datas[len(datas)-2], "type").Str != "error" {
			t.Fatalf("stream does not end with error + response.failed: %q", names)
		}
	}
}

// checkEnvelope asserts the route's error envelope and returns its message.
func checkEnvelope(t *testing.T, dialect string, body []byte) string {
	t.Helper()
	if dialect == "messages" {
		if gjson.GetBytes(body, "type").Str != "error" || gjson.GetBytes(body, "error.type").Str != "api_error" {
			t.Fatalf("not an Anthropic api_error envelope: %s", body)
		}
		return gjson.GetBytes(body, "error.message").Str
	}
	e := gjson.GetBytes(body, "error")
	for _, k := range []string{"message", "type", "param", "code"} {
		if !e.Get(k).Exists() {
			t.Fatalf("OpenAI envelope lacks error.%s: %s", k, body)
		}
	}
	if e.Get("type").Str != "server_error" || e.Get("code").Str != "upstream_response_invalid" {
		t.Fatalf("error = %s, want server_error upstream_response_invalid", e.Raw)
	}
	return e.Get("message").Str
}
