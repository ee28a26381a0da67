package messages

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn"
	"github.com/compactd/compactd/internal/turn/turntest"
)

const fuzzItemID = "cmp_0123456789abcdef0123456789abcdef"

// rewriteTurn is a turn that compacted (block set, as Compacted sets it) and, with applied, one
// whose edits compactd applied.
func rewriteTurn(applied []api.AppliedEdit) *Turn {
	summary, ec := "the summary", fuzzItemID+".c2VhbGVk"
	return &Turn{a: Adapter{}, stream: turn.Stream{Streamed: true}, needed: true, compacted: true,
		block: api.CompactionBlock(summary, ec, ""), summary: summary, ecStr: ec, applied: applied,
		compUsage: summarizer.Usage{InputTokens: 500, OutputTokens: 40, CachedTokens: 7}}
}

func rewriteSSE(t testing.TB, tt *Turn, in []byte, chunk int) []byte {
	t.Helper()
	r := tt.Events(turntest.Chunked(in, chunk))
	if r == nil {
		t.Fatal("no event rewriter")
	}
	out, err := io.ReadAll(iotest.HalfReader(r))
	if err != nil {
		t.Fatalf("rewriter returned %v", err)
	}
	return out
}

// messagesStream renders a well-formed Messages stream: message_start, per block start, text
// deltas and stop (each carrying its index again as "orig"), message_delta, message_stop.
func messagesStream(text string, nBlocks, nDeltas int, crlf bool) []byte {
	nl := "\n"
	if crlf {
		nl = "\r\n"
	}
	var b bytes.Buffer
	emit := func(typ, data string) { b.WriteString("event: " + typ + nl + "data: " + data + nl + nl) }
	emit("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[],"stop_reason":null,"usage":{"input_tokens":10,"cache_read_input_tokens":3,"output_tokens":1}}}`)
	emit("ping", `{"type":"ping"}`)
	for i := range nBlocks {
		emit("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"orig":%d,"content_block":{"type":"text","text":""}}`, i, i))
		for d := range nDeltas {
			t := string(api.AppendString(nil, fmt.Sprintf("%s/%d/%d", text, i, d)))
			emit("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"orig":%d,"delta":{"type":"text_delta","text":%s}}`, i, i, t))
		}
		emit("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d,"orig":%d}`, i, i))
	}
	emit("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`)
	emit("message_stop", `{"type":"message_stop"}`)
	return b.Bytes()
}

// The stream of a turn that compacted: the block is block 0 right after message_start (start
// with null content, one compaction_delta, stop), every upstream block index moves up by one
// and nothing else of those events changes, pings pass byte for byte, and message_delta gains
// usage.iterations (the compaction's, then the sampling's) and the applied edits.
func TestSSERewriter(t *testing.T) {
	applied := []api.AppliedEdit{{Type: api.EditClearThinking, ClearedInputTokens: 12, ClearedThinkingTurns: 2}}
	tt := rewriteTurn(applied)
	in := messagesStream("hi", 2, 2, false)
	out := rewriteSSE(t, tt, in, 7)
	if !bytes.HasPrefix(out, in[:bytes.Index(in, []byte("event: ping"))]) {
		t.Error("message_start did not pass byte for byte")
	}
	evs := events(t, string(out))
	src := events(t, string(in))
	if len(evs) != len(src)+3 {
		t.Fatalf("%d events, want %d:\n%s", len(evs), len(src)+3, out)
	}
	if !bytes.Contains(out, []byte("event: ping\ndata: {\"type\":\"ping\"}\n\n")) {
		t.Error("the ping did not pass byte for byte")
	}
	start, delta, stop := evs[1], evs[2], evs[3]
	if start.Raw != `{"type":"content_block_start","index":0,"content_block":`+api.CompactionBlockStart+`}` ||
		delta.Raw != `{"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":"the summary","encrypted_content":"`+fuzzItemID+`.c2VhbGVk"}}` ||
		stop.Raw != `{"type":"content_block_stop","index":0}` {
		t.Fatalf("compaction block events:\n%s\n%s\n%s", start.Raw, delta.Raw, stop.Raw)
	}
	for i, ev := range evs[4:] {
		s := src[i+1]
		if o := ev.Get("orig"); o.Exists() {
			if ev.Get("index").Int() != o.Int()+1 {
				t.Errorf("event %d: index %d, upstream had %d", i+4, ev.Get("index").Int(), o.Int())
			}
			if strings.Replace(ev.Raw, fmt.Sprintf(`"index":%d`, o.Int()+1), fmt.Sprintf(`"index":%d`, o.Int()), 1) != s.Raw {
				t.Errorf("event %d changed beyond its index:\n%s\n%s", i+4, ev.Raw, s.Raw)
			}
		}
	}
	md := evs[len(evs)-2]
	wantIters := `[{"type":"compaction","input_tokens":500,"output_tokens":40,"cache_creation_input_tokens":0,"cache_read_input_tokens":7,"cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0}},` +
		`{"type":"message","input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":3,"model":"claude"}]`
	if md.Get("type").Str != "message_delta" || md.Get("usage.iterations").Raw != wantIters ||
		md.Get("context_management").Raw != string(api.AppliedEditsJSON(applied)) {
		t.Fatalf("message_delta %s", md.Raw)
	}
	if last := evs[len(evs)-1]; last.Raw != `{"type":"message_stop"}` {
		t.Errorf("last event %s", last.Raw)
	}
}

// A turn that only applied edits gets them in message_delta, and nothing else changes; a turn
// that neither compacted nor applied edits has no stream rewriter at all.
func TestSSERewriterEditsOnly(t *testing.T) {
	applied := []api.AppliedEdit{{Type: api.EditClearToolUses, ClearedInputTokens: 99, ClearedToolUses: 1}}
	tt := &Turn{a: Adapter{}, needed: true, applied: applied}
	in := messagesStream("x", 1, 1, true)
	out := rewriteSSE(t, tt, in, 3)
	evs, src := events(t, string(out)), events(t, string(in))
	if len(evs) != len(src) {
		t.Fatalf("%d events, want %d", len(evs), len(src))
	}
	md := evs[len(evs)-2]
	if md.Get("context_management").Raw != string(api.AppliedEditsJSON(applied)) || md.Get("usage.iterations").Exists() {
		t.Fatalf("message_delta %s", md.Raw)
	}
	if !bytes.HasPrefix(out, in[:bytes.Index(in, []byte("event: message_delta"))]) {
		t.Error("events before message_delta changed")
	}
	if (&Turn{a: Adapter{}, needed: true}).Events(io.NopCloser(bytes.NewReader(in))) != nil {
		t.Error("a turn with nothing to add rewrites its stream")
	}
}

// An event that is not JSON ends the stream with Anthropic's terminal error event, which says
// that the compaction the client never got leaves what it holds valid.
func TestSSERewriterEndsOnInvalidJSON(t *testing.T) {
	tt := rewriteTurn(nil)
	in := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"text\":\"x\"\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	out := string(rewriteSSE(t, tt, []byte(in), 64))
	evs := events(t, out)
	last := evs[len(evs)-1]
	if last.Get("type").Str != "error" || last.Get("error.type").Str != "api_error" ||
		!strings.Contains(last.Get("error.message").Str, "not valid JSON") || !strings.Contains(last.Get("error.message").Str, "messages and compaction blocks you hold are still valid") {
		t.Fatalf("stream ends with %s\n%s", last.Raw, out)
	}
	if !(Adapter{}).Terminal([]byte(last.Raw)) || strings.Contains(out, "message_stop") {
		t.Errorf("the error event is not the stream's end:\n%s", out)
	}
}

// FuzzMessagesSSERewriter feeds arbitrary upstream bytes to the rewriter: it must not panic or
// fail, and a body with no data lines passes through byte for byte.
func FuzzMessagesSSERewriter(f *testing.F) {
	f.Add(messagesStream("hi", 2, 2, false), uint8(5))
	f.Add(messagesStream("", 1, 0, true), uint8(1))
	f.Add([]byte("event: ping\ndata: {\"type\":\"ping\"}\n\n"), uint8(3))
	f.Add([]byte("data: {\"type\":\"content_block_delta\",\"index\":\"a\"}\n\ndata: {\"type\":\"message_delta\",\"usage\":7}\n\n"), uint8(2))
	f.Add([]byte("data: {\"type\":\"message_start\",\"message\":null}"), uint8(8))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		out := rewriteSSE(t, rewriteTurn(nil), data, int(chunk))
		if !bytes.Contains(data, []byte("data:")) && !bytes.Equal(out, data) {
			t.Fatalf("no data lines, yet output changed:\n in %q\nout %q", data, out)
		}
	})
}

// FuzzMessagesSSERewriterStream rewrites well-formed streams: the compaction block is block 0
// right after message_start, every upstream block index moves up by one, text is untouched, and
// message_delta gains usage.iterations (compaction, then message).
func FuzzMessagesSSERewriterStream(f *testing.F) {
	f.Add("hello", uint8(1), uint8(3), false, uint8(16))
	f.Add("", uint8(0), uint8(0), true, uint8(1))
	f.Fuzz(func(t *testing.T, text string, nBlocks, nDeltas uint8, crlf bool, chunk uint8) {
		in := messagesStream(text, int(nBlocks%4), int(nDeltas%6), crlf)
		src := events(t, string(in))
		tt := rewriteTurn(nil)
		out := events(t, string(rewriteSSE(t, tt, in, int(chunk))))
		if len(out) != len(src)+3 {
			t.Fatalf("%d events out, want %d", len(out), len(src)+3)
		}
		start, delta, stop := out[1], out[2], out[3]
		if start.Get("type").Str != "content_block_start" || start.Get("index").Int() != 0 || start.Get("content_block.type").Str != "compaction" ||
			delta.Get("delta.type").Str != "compaction_delta" || delta.Get("delta.content").Str != tt.summary || delta.Get("delta.encrypted_content").Str != tt.ecStr ||
			stop.Get("type").Str != "content_block_stop" || stop.Get("index").Int() != 0 {
			t.Fatalf("compaction block events wrong: %s %s %s", start.Raw, delta.Raw, stop.Raw)
		}
		for i, ev := range out[4:] {
			if o := ev.Get("orig"); o.Exists() && ev.Get("index").Int() != o.Int()+1 {
				t.Fatalf("event %d: index %d, upstream had %d", i+4, ev.Get("index").Int(), o.Int())
			}
			if ev.Get("delta.text").Str != src[i+1].Get("delta.text").Str {
				t.Fatalf("event %d: text changed", i+4)
			}
		}
		md := out[len(out)-2]
		it := md.Get("usage.iterations").Array()
		if md.Get("type").Str != "message_delta" || len(it) != 2 || it[0].Get("type").Str != "compaction" || it[1].Get("type").Str != "message" ||
			it[1].Get("output_tokens").Int() != 5 || it[1].Get("input_tokens").Int() != 10 {
			t.Fatalf("message_delta usage.iterations wrong: %s", md.Raw)
		}
	})
}

// The JSON answer: the block first in content, usage.iterations, the applied edits; an answer
// without a content array cannot take the block; count_tokens gains original_input_tokens.
func TestJSONRewriter(t *testing.T) {
	applied := []api.AppliedEdit{{Type: api.EditClearThinking, ClearedInputTokens: 12, ClearedThinkingTurns: 2}}
	answer := `{"id":"msg_1","type":"message","model":"claude","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":40,"output_tokens":9,"cache_creation_input_tokens":2}}`
	tt := rewriteTurn(applied)
	out, why := tt.JSON([]byte(answer))
	want := `{"id":"msg_1","type":"message","model":"claude","content":[` + string(tt.block) + `,{"type":"text","text":"hi"}],"usage":{"input_tokens":40,"output_tokens":9,"cache_creation_input_tokens":2,` +
		`"iterations":[{"type":"compaction","input_tokens":500,"output_tokens":40,"cache_creation_input_tokens":0,"cache_read_input_tokens":7,"cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0}},` +
		`{"type":"message","input_tokens":40,"output_tokens":9,"cache_creation_input_tokens":2,"cache_read_input_tokens":0,"model":"claude"}]},` +
		`"context_management":` + string(api.AppliedEditsJSON(applied)) + `}`
	if why != "" || string(out) != want {
		t.Fatalf("JSON = %s (%q)\nwant %s", out, why, want)
	}
	if _, why := tt.JSON([]byte(`{"type":"message","content":null}`)); why != "has no content array" {
		t.Errorf("no content array: why %q", why)
	}
	if !tt.Rewrites() || !tt.Carries() {
		t.Error("a compacting turn neither rewrites nor carries")
	}
	ct := &Turn{a: Adapter{CountTokens: true}, needed: true, removed: 30}
	for in, want := range map[string]string{
		`{"input_tokens":100}`: `{"input_tokens":100,"context_management":{"original_input_tokens":130}}`,
		`{"input_tokens":100,"context_management":{"original_input_tokens":150}}`: `{"input_tokens":100,"context_management":{"original_input_tokens":180}}`,
		`{"count":1}`: `{"count":1}`,
	} {
		if out, why := ct.JSON([]byte(in)); why != "" || string(out) != want {
			t.Errorf("count_tokens %s = %s, want %s", in, out, want)
		}
	}
	if !ct.Rewrites() || ct.Carries() || ct.Rewriter() == nil {
		t.Error("count_tokens answers are not rewritten")
	}
	plain := &Turn{a: Adapter{}, needed: true}
	if plain.Rewrites() {
		t.Error("a turn with nothing to add rewrites")
	}
	plain.stream.Committed = true
	if !plain.Rewrites() {
		t.Error("a committed stream is not rewritten")
	}
}

// An upstream error into a committed stream: the upstream's own Anthropic envelope (compacted to
// one line), else an api_error naming the status; either ends the stream.
func TestUpstreamError(t *testing.T) {
	tt := &Turn{a: Adapter{}}
	for _, tc := range []struct {
		status     int
		body, want string
	}{
		{529, "{\"type\":\"error\",\n \"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"},
		{502, "<html>bad gateway</html>", "event: error\ndata: {\"error\":{\"message\":\"upstream answered HTTP 502\",\"type\":\"api_error\"},\"type\":\"error\"}\n\n"},
		{500, `{"error":{"message":"x"}}`, "event: error\ndata: {\"error\":{\"message\":\"upstream answered HTTP 500\",\"type\":\"api_error\"},\"type\":\"error\"}\n\n"},
		{500, strings.Repeat("[", 10000) + strings.Repeat("]", 10000), "event: error\ndata: {\"error\":{\"message\":\"upstream answered HTTP 500\",\"type\":\"api_error\"},\"type\":\"error\"}\n\n"},
	} {
		got := string(tt.UpstreamError(tc.status, []byte(tc.body)))
		if got != tc.want {
			t.Errorf("UpstreamError(%d, %.40q) =\n%q\nwant\n%q", tc.status, tc.body, got, tc.want)
		}
		if ev := events(t, got); len(ev) != 1 || !(Adapter{}).Terminal([]byte(ev[0].Raw)) {
			t.Errorf("not one terminal event: %q", got)
		}
	}
}

// The wire: faults in Anthropic's envelope (a request id of compactd's own), the stream's error
// event terminal, the keep-alive a ping, and only message_stop and error end a stream.
func TestDialect(t *testing.T) {
	a := Adapter{}
	f := &fault.Fault{Kind: fault.Unavailable, Code: fault.CodeCompactionUnavailable, Message: "down"}
	env := a.Fault(f)
	b := gjson.ParseBytes(env.Body())
	if b.Get("type").Str != "error" || b.Get("error.type").Str != "overloaded_error" || !strings.HasPrefix(b.Get("request_id").Str, "req_compactd_") {
		t.Errorf("Fault body %s", env.Body())
	}
	ev := events(t, string(a.FaultEvent(f, nil)))
	if len(ev) != 1 || !a.Terminal([]byte(ev[0].Raw)) || ev[0].Get("error.type").Str != "overloaded_error" {
		t.Errorf("FaultEvent %v", ev)
	}
	if string(a.KeepAlive(true)) != "event: ping\ndata: {\"type\": \"ping\"}\n\n" || string(a.KeepAlive(false)) != string(a.KeepAlive(true)) {
		t.Errorf("KeepAlive %q", a.KeepAlive(true))
	}
	for data, want := range map[string]bool{
		`{"type":"message_stop"}`: true, `{"type":"error","error":{}}`: true, `{"type":"message_delta"}`: false,
		`{"type":"ping"}`: false, `[DONE]`: false, ``: false,
	} {
		if a.Terminal([]byte(data)) != want {
			t.Errorf("Terminal(%s) = %v", data, !want)
		}
	}
	if e := a.Engine(); e.Name != "messages" || e.SealKind != "anthropic.compaction" || !e.Memo ||
		string(e.UserMessage("hi")) != `{"role":"user","content":[{"type":"text","text":"hi"}]}` {
		t.Errorf("Engine %+v", e)
	}
	if w := a.Words(); w.Compaction != "block" || w.UpstreamFlag != "--anthropic-upstream" {
		t.Errorf("Words %+v", w)
	}
}

// BenchmarkMessagesSSERewrite measures the per-stream cost of injecting a compaction block into a
// 200-delta upstream Messages stream (re-indexing every block event, completing message_delta).
func BenchmarkMessagesSSERewrite(b *testing.B) {
	var src bytes.Buffer
	src.Write(sse.AppendEvent(nil, "message_start", []byte(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":1200,"output_tokens":1}}}`)))
	src.Write(sse.AppendEvent(nil, "content_block_start", []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)))
	src.Write(sse.AppendEvent(nil, "ping", []byte(`{"type": "ping"}`)))
	for range 200 {
		src.Write(sse.AppendEvent(nil, "content_block_delta", []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"some words of output "}}`)))
	}
	src.Write(sse.AppendEvent(nil, "content_block_stop", []byte(`{"type":"content_block_stop","index":0}`)))
	src.Write(sse.AppendEvent(nil, "message_delta", []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":800}}`)))
	src.Write(sse.AppendEvent(nil, "message_stop", []byte(`{"type":"message_stop"}`)))
	summary := strings.Repeat("summary text ", 500)
	tt := &Turn{a: Adapter{}, block: api.CompactionBlock(summary, "cmp_x.sealed", ""), summary: summary, ecStr: "cmp_x.sealed"}
	b.SetBytes(int64(src.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := io.Copy(io.Discard, tt.Events(io.NopCloser(bytes.NewReader(src.Bytes())))); err != nil {
			b.Fatal(err)
		}
	}
}
