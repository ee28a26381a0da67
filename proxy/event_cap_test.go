package proxy_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/proxy"
)

// oversizedStream is a stream in the dialect of path whose third event is over size bytes, as
// an upstream would send it: whole, and ending normally after it.
func oversizedStream(path string, size int) string {
	big := strings.Repeat("x", size)
	switch path {
	case "/v1/messages":
		return "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-fake\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n" +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + big + "\"}}\n\n" +
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	case "/v1/chat/completions":
		return "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
			"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n" +
			"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + big + "\"}}]}\n\n" +
			"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
			"data: [DONE]\n\n"
	}
	return "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[]}}\n\n" +
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"type\":\"message\",\"id\":\"msg_1\",\"role\":\"assistant\",\"status\":\"in_progress\",\"content\":[]}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"output_index\":0,\"content_index\":0,\"item_id\":\"msg_1\",\"delta\":\"" + big + "\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":3,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"output\":[]}}\n\n"
}

// oversizedUpstream puts an upstream in front of the configured one (the fake) that answers the
// streamed requests for which match holds with oversizedStream, counting them in *answered, and
// passes every other request on.
func oversizedUpstream(t *testing.T, size int, match func(body []byte) bool, answered *atomic.Int64) func(*proxy.Config) {
	return func(c *proxy.Config) {
		next := httputil.NewSingleHostReverseProxy(c.Upstream)
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if gjson.GetBytes(body, "stream").Bool() && match(body) {
				answered.Add(1)
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, oversizedStream(r.URL.Path, size))
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			next.ServeHTTP(w, r)
		}))
		t.Cleanup(ts.Close)
		u, _ := url.Parse(ts.URL)
		c.Upstream, c.AnthropicUpstream = u, u
	}
}

// An upstream event over the cap (here lowered to 1 MiB: the 64 MiB of relay.MaxEvent, in small)
// ends the client's stream with the route's error event — after the events before it, and
// without the oversized one or anything after — on every route: the pass-through of Responses,
// Messages and Chat Completions, and a recall round of each. Messages and Chat pass-through used
// to relay such an event whole (they had no guard at all).
func TestEventCapOnEveryRoute(t *testing.T) {
	defer proxy.SetEventCapForTest(1 << 20)()
	const size = 1<<20 + 100<<10
	always := func([]byte) bool { return true }
	recallRound := func(body []byte) bool { return bytes.Contains(body, []byte(`"compactd_recall"`)) }
	chatRecall := chatParams(chatRecallHistory("Which port?"))
	msgRecall := params(append(msgRecallHistory(), userText("Which port?")), compactEdit(50_000, false))
	for _, tc := range []struct {
		name, path string
		body       any
		mutate     func(*proxy.Config) // besides oversizedUpstream
		match      func([]byte) bool
		header     map[string]string
		first      string // the start of the stream the client must get before the error
	}{
		{"responses pass-through", "/v1/responses", map[string]any{"model": testModel, "input": "hi"}, nil, always, nil, "event: response.created\n"},
		{"messages pass-through", "/v1/messages", map[string]any{"model": antModel, "max_tokens": 10, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}, nil, always, nil, "event: message_start\n"},
		{"chat pass-through", "/v1/chat/completions", map[string]any{"model": testModel, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}, nil, always, nil, "data: {\"id\":\"c1\""},
		{"responses recall round", "/v1/responses", map[string]any{"model": testModel, "input": recallHistory(),
			"context_management": []any{map[string]any{"type": "compaction", "compact_threshold": 2000}}}, nil, recallRound,
			map[string]string{"X-Compactd-Session": "conv-recall"}, ""},
		{"messages recall round", "/v1/messages", msgRecall, nil, recallRound, map[string]string{"X-Compactd-Session": "conv-msg-recall"}, ""},
		{"chat recall round", "/v1/chat/completions", chatRecall, chatPolicy(2000), recallRound, map[string]string{"X-Compactd-Session": "conv-chat-recall"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var answered atomic.Int64
			h := newHarness(t, fakeupstream.Options{}, withArchive(t, func(c *proxy.Config) {
				if tc.mutate != nil {
					tc.mutate(c)
				}
				oversizedUpstream(t, size, tc.match, &answered)(c)
			}))
			body, err := json.Marshal(tc.body)
			if err != nil {
				t.Fatal(err)
			}
			body, _ = sjson.SetBytes(body, "stream", true)
			req, _ := http.NewRequest(http.MethodPost, h.proxyURL+tc.path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer sk-test")
			req.Header.Set("X-Api-Key", "sk-ant-test")
			req.Header.Set("Anthropic-Version", "2023-06-01")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			out, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, err %v: %.500q", resp.StatusCode, err, out)
			}
			if bytes.Contains(out, []byte("xxxxxxxx")) || !bytes.HasPrefix(out, []byte(tc.first)) {
				t.Fatalf("the oversized event reached the client, or the events before it did not: %.300q … %q", out, out[max(0, len(out)-300):])
			}
			if answered.Load() != 1 {
				t.Fatalf("the oversized stream answered %d requests, want 1 (the turn, or its recall round)", answered.Load())
			}
			checkEndsWithCapError(t, tc.path, out)
		})
	}
}

// checkEndsWithCapError asserts a client stream ends with its dialect's error event for an
// upstream event over the cap: Responses' error and response.failed, Anthropic's error event,
// Chat Completions' error chunk (and no [DONE] after it).
func checkEndsWithCapError(t *testing.T, path string, out []byte) {
	t.Helper()
	var datas []gjson.Result
	var names []string
	rd := sse.NewReader(bytes.NewReader(out))
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil || !ev.Terminated {
			t.Fatalf("the client's stream is broken (%v): %q", err, ev.Raw)
		}
		if ev.HasData() {
			names = append(names, ev.Name)
			datas = append(datas, gjson.Parse(string(ev.Data)))
		}
	}
	if len(datas) < 2 {
		t.Fatalf("%d events: %q", len(datas), out)
	}
	last := datas[len(datas)-1]
	switch path {
	case "/v1/messages":
		if names[len(names)-1] != "error" || last.Get("type").Str != "error" || last.Get("error.type").Str != "api_error" ||
			!strings.Contains(last.Get("error.message").Str, "larger than") {
			t.Fatalf("the stream ends with %s %s, want Anthropic's error event for the oversized event", names[len(names)-1], last.Raw)
		}
	case "/v1/chat/completions":
		if last.Raw == "[DONE]" || last.Get("error.code").Str != "upstream_response_invalid" || !strings.Contains(last.Get("error.message").Str, "larger than") {
			t.Fatalf("the stream ends with %s, want an error chunk for the oversized event and no [DONE]", last.Raw)
		}
	default:
		e := datas[len(datas)-2]
		if e.Get("type").Str != "error" || e.Get("code").Str != "upstream_response_invalid" || !strings.Contains(e.Get("message").Str, "larger than") ||
			last.Get("type").Str != "response.failed" || last.Get("sequence_number").Int() != e.Get("sequence_number").Int()+1 {
			t.Fatalf("the stream ends with %s %s, want error and response.failed for the oversized event", e.Raw, last.Raw)
		}
	}
}
