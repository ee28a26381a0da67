package proxy_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/proxy"
)

// clientEvent is one event of the stream compactd answered with.
type clientEvent struct {
	name string
	data gjson.Result
}

// readClientStream reads a stream with compactd's SSE reader and checks every event's data is
// JSON (or [DONE]) and that the stream ends on a blank line.
func readClientStream(t *testing.T, body []byte) []clientEvent {
	t.Helper()
	var out []clientEvent
	rd := sse.NewReader(bytes.NewReader(body))
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			return out
		}
		if err != nil || !ev.Terminated {
			t.Fatalf("client stream broken (%v) after %d events: %q", err, len(out), ev.Raw)
		}
		if !ev.HasData() || string(ev.Data) == "[DONE]" {
			continue
		}
		if err := jsonx.Valid(ev.Data); err != nil {
			t.Fatalf("event %d (%s) is not JSON: %q", len(out), ev.Name, ev.Data)
		}
		out = append(out, clientEvent{ev.Name, gjson.ParseBytes(append([]byte(nil), ev.Data...))})
	}
}

// checkResponsesStream asserts one ordinary Responses stream: sequence numbers 0, 1, 2, … with
// no gap, no error event, the reply's text, and response.completed last; with compacted, the
// compaction item at output 0 of the stream and of the final response, the reply shifted to 1.
func checkResponsesStream(t *testing.T, evs []clientEvent, compacted bool) {
	t.Helper()
	if len(evs) < 4 {
		t.Fatalf("%d events", len(evs))
	}
	text := ""
	for i, ev := range evs {
		if got := ev.data.Get("sequence_number").Int(); got != int64(i) {
			t.Fatalf("event %d (%s) has sequence_number %d", i, ev.name, got)
		}
		typ := ev.data.Get("type").Str
		switch typ {
		case "error", "response.failed":
			t.Fatalf("the stream failed: %s", ev.data.Raw)
		case "response.output_text.delta":
			text += ev.data.Get("delta").Str
			if want := int64(0); compacted && ev.data.Get("output_index").Int() != want+1 {
				t.Errorf("delta at output_index %d, want 1 after the compaction item", ev.data.Get("output_index").Int())
			}
		}
		if ev.name != typ {
			t.Errorf("event %d is named %q but is a %q", i, ev.name, typ)
		}
		if typ == "response.output_item.added" && ev.data.Get("item.type").Str == "function_call" {
			t.Errorf("the client saw a function call: %s", ev.data.Raw)
		}
	}
	last := evs[len(evs)-1].data
	if last.Get("type").Str != "response.completed" {
		t.Fatalf("the stream ends with %s", last.Raw)
	}
	if !strings.Contains(text, "MOCK-REPLY") {
		t.Errorf("reply text %q", text)
	}
	if got := last.Get("response.output.0.type").Str; compacted != (got == "compaction") {
		t.Errorf("final output[0] is %q (compacted: %v)", got, compacted)
	}
}

// checkMessagesStream asserts one ordinary Messages stream ending in message_stop, with the
// compaction block as block 0 and the reply at block 1 when compacted.
func checkMessagesStream(t *testing.T, evs []clientEvent, compacted bool) {
	t.Helper()
	if len(evs) < 4 {
		t.Fatalf("%d events", len(evs))
	}
	var blocks []string
	text := ""
	for _, ev := range evs {
		switch ev.data.Get("type").Str {
		case "error":
			t.Fatalf("the stream failed: %s", ev.data.Raw)
		case "content_block_start":
			if int(ev.data.Get("index").Int()) != len(blocks) {
				t.Errorf("block %d starts at index %d", len(blocks), ev.data.Get("index").Int())
			}
			blocks = append(blocks, ev.data.Get("content_block.type").Str)
		case "content_block_delta":
			text += ev.data.Get("delta.text").Str
		case "message_delta":
			if compacted && !ev.data.Get("usage.iterations").IsArray() {
				t.Errorf("message_delta lacks usage.iterations: %s", ev.data.Raw)
			}
		}
	}
	if last := evs[len(evs)-1].data; last.Get("type").Str != "message_stop" {
		t.Fatalf("the stream ends with %s", last.Raw)
	}
	if compacted && (len(blocks) < 2 || blocks[0] != "compaction") || !compacted && len(blocks) > 0 && blocks[0] == "compaction" {
		t.Errorf("blocks %q (compacted: %v)", blocks, compacted)
	}
	if !strings.Contains(text, "MOCK-REPLY") {
		t.Errorf("reply text %q", text)
	}
}

func postRaw(t *testing.T, url string, body []byte, hdr http.Header) []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header = hdr
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d %s (%v): %.300s", resp.StatusCode, resp.Header.Get("Content-Type"), err, b)
	}
	return b
}

func openAIHeaders(style string) http.Header {
	h := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer sk-test"}}
	if style != "" {
		h.Set(fakeupstream.HeaderSSE, style)
	}
	return h
}

func anthropicHeaders(style string) http.Header {
	h := http.Header{"Content-Type": {"application/json"}, "X-Api-Key": {"sk-ant-test"},
		"Anthropic-Version": {"2023-06-01"}, "Anthropic-Beta": {"compact-2026-01-12"}}
	if style != "" {
		h.Set(fakeupstream.HeaderSSE, style)
	}
	return h
}

// Every path a stream takes through compactd — the compaction turn's rewriter, the recall loop,
// the stream guard alone — reads an upstream stream in CRLF and in multi-line data as it reads
// a plain one, in both dialects: the client gets the same ordinary stream. Before internal/sse,
// a multi-line event looked like broken JSON to all of them (the guard then ended a
// pass-through stream with an error; the rewriters, with a 502-in-stream).
func TestUpstreamSSESpellings(t *testing.T) {
	paths := []struct {
		name      string
		dialect   string
		compacted bool
		mutate    func(*testing.T) func(*proxy.Config)
		run       func(t *testing.T, h *harness, style string) []byte
	}{
		{"responses compaction turn", "openai", true, func(*testing.T) func(*proxy.Config) { return retain(1000) },
			func(t *testing.T, h *harness, style string) []byte {
				body := mustJSON(t, map[string]any{"model": testModel, "input": history(6, 400), "stream": true,
					"context_management": []map[string]any{{"type": "compaction", "compact_threshold": 2000}}})
				return postRaw(t, h.proxyURL+"/v1/responses", body, openAIHeaders(style))
			}},
		{"responses recall turn", "openai", false, func(t *testing.T) func(*proxy.Config) { return withArchive(t, nil) },
			func(t *testing.T, h *harness, style string) []byte {
				next := compactThenAsk(t, h)
				before := len(h.upstream(dialect.Responses))
				body := mustJSON(t, map[string]any{"model": testModel, "input": next, "stream": true})
				out := postRaw(t, h.proxyURL+"/v1/responses", body, openAIHeaders(style))
				assertRecallRound(t, h, before)
				return out
			}},
		{"responses pass-through", "openai", false, func(*testing.T) func(*proxy.Config) { return nil },
			func(t *testing.T, h *harness, style string) []byte {
				body := mustJSON(t, map[string]any{"model": testModel, "input": "hi", "stream": true})
				return postRaw(t, h.proxyURL+"/v1/responses", body, openAIHeaders(style))
			}},
		{"messages compaction turn", "anthropic", true, func(*testing.T) func(*proxy.Config) { return nil },
			func(t *testing.T, h *harness, style string) []byte {
				body := mustJSON(t, params(append(longHistory(16), userText("next?")), compactEdit(50_000, false)))
				body, _ = sjson.SetBytes(body, "stream", true)
				return postRaw(t, h.proxyURL+"/v1/messages", body, anthropicHeaders(style))
			}},
		{"messages pass-through", "anthropic", false, func(*testing.T) func(*proxy.Config) { return nil },
			func(t *testing.T, h *harness, style string) []byte {
				body := mustJSON(t, params([]anthropic.BetaMessageParam{userText("hi")}, anthropic.BetaContextManagementConfigParam{}))
				body, _ = sjson.SetBytes(body, "stream", true)
				return postRaw(t, h.proxyURL+"/v1/messages", body, anthropicHeaders(style))
			}},
	}
	for _, p := range paths {
		for _, style := range []string{"", "crlf", "multiline", "crlf,multiline"} {
			t.Run(p.name+"/"+style, func(t *testing.T) {
				more := p.mutate(t)
				h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) {
					c.AnthropicUpstream = c.Upstream
					if more != nil {
						more(c)
					}
				})
				raw := p.run(t, h, style)
				if p.compacted && len(h.upstream(fakeupstream.KindSummary)) == 0 {
					t.Fatal("the turn did not compact")
				}
				evs := readClientStream(t, raw)
				if p.dialect == "anthropic" {
					checkMessagesStream(t, evs, p.compacted)
				} else {
					checkResponsesStream(t, evs, p.compacted)
				}
				if strings.HasSuffix(p.name, "pass-through") && strings.Contains(style, "crlf") && !bytes.Contains(raw, []byte("\r\n")) {
					t.Error("a pass-through stream was not passed on as the upstream spelled it")
				}
			})
		}
	}
}

// A recall round is an upstream request like any other: hop-by-hop headers — the standard ones
// and those the client's Connection header lists — are removed as the ReverseProxy removes them
// on every other path (the recall loop's own client forwarded Proxy-Authorization and
// Connection-listed headers), end-to-end headers go through, and the upstream request metrics
// count every round.
func TestRecallRoundsTakeTheUpstreamPath(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "sse"}[stream], func(t *testing.T) {
			reg := prometheus.NewRegistry()
			h := newHarness(t, fakeupstream.Options{}, withArchive(t, withRegistry(reg)))
			next := compactThenAsk(t, h)
			before := len(h.upstream(dialect.Responses))
			requests := value(t, reg, "compactd_upstream_requests_total", "upstream", "openai", "status_class", "2xx")
			hdr := openAIHeaders("")
			hdr.Set("Connection", "X-Hop")
			hdr.Set("X-Hop", "not for the upstream")
			hdr.Set("Keep-Alive", "timeout=5")
			hdr.Set("Proxy-Authorization", "Basic cHJveHk6c2VjcmV0")
			hdr.Set("X-End-To-End", "for the upstream")
			body := mustJSON(t, map[string]any{"model": testModel, "input": next, "stream": stream})
			req, _ := http.NewRequest(http.MethodPost, h.proxyURL+"/v1/responses", bytes.NewReader(body))
			req.Header = hdr
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !bytes.Contains(out, []byte("MOCK-REPLY")) {
				t.Fatalf("status %d: %.300s", resp.StatusCode, out)
			}
			if resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("Connection") == "X-Hop" {
				t.Errorf("hop-by-hop headers in the answer: %v", resp.Header)
			}
			assertRecallRound(t, h, before)
			for i, r := range h.upstream(dialect.Responses)[before:] {
				for _, k := range []string{"X-Hop", "Keep-Alive", "Proxy-Authorization"} {
					if v := r.Header.Get(k); v != "" {
						t.Errorf("round %d: %s: %q reached the upstream", i, k, v)
					}
				}
				if strings.Contains(r.Header.Get("Connection"), "X-Hop") {
					t.Errorf("round %d: Connection: %q reached the upstream", i, r.Header.Get("Connection"))
				}
				if r.Header.Get("X-End-To-End") != "for the upstream" || r.Header.Get("Authorization") != "Bearer sk-test" {
					t.Errorf("round %d: end-to-end headers lost: %v", i, r.Header)
				}
			}
			if got := value(t, reg, "compactd_upstream_requests_total", "upstream", "openai", "status_class", "2xx") - requests; got != 2 {
				t.Errorf("upstream requests counted for the turn = %v, want 2 (recall round + answer)", got)
			}
		})
	}
}

// The recall turn with the SDK as the client reads a CRLF, multi-line upstream stream too.
func TestRecallStreamSDKOnSpelledUpstream(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, withArchive(t, nil))
	next := compactThenAsk(t, h)
	stream := h.client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", next), option.WithHeader(fakeupstream.HeaderSSE, "crlf,multiline"))
	var final responses.Response
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.completed" {
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(final.OutputText(), "MOCK-REPLY") {
		t.Errorf("answer = %q", final.OutputText())
	}
}
