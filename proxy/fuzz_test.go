package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/compactd/compactd/internal/turn"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/sse"
)

// Fuzz targets for what compactd does to bytes it does not control: the upstream's SSE streams
// (both rewriters) and the handoff renderers (which put client-supplied text and sealed
// summaries in front of the model). Seed corpora live in testdata/fuzz/<Name>/; .ci/fuzz.sh runs
// every target for a bounded time.

const fuzzItemID = "cmp_0123456789abcdef0123456789abcdef"

// chunkedReader hands out src in pieces of at most n bytes, so event boundaries fall anywhere in
// the rewriter's reads.
type chunkedReader struct {
	src []byte
	n   int
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if len(c.src) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.src))
	copy(p, c.src[:k])
	c.src = c.src[k:]
	return k, nil
}

// sseEvents splits an SSE body into the data payloads of its events, with compactd's reader.
func sseEvents(t *testing.T, body []byte) []gjson.Result {
	t.Helper()
	var out []gjson.Result
	rd := sse.NewReader(bytes.NewReader(body))
	for {
		ev, err := rd.Next()
		if err != nil {
			return out
		}
		if !ev.HasData() {
			continue
		}
		if !gjson.ValidBytes(ev.Data) {
			t.Fatalf("event data is not JSON: %q", ev.Data)
		}
		out = append(out, gjson.ParseBytes(append([]byte(nil), ev.Data...)))
	}
}

func fuzzMsgTurn() *msgTurn {
	return &msgTurn{t: &turnState{Stream: turn.Stream{Streamed: true}}, block: []byte(`{}`), summary: "the summary", ecStr: fuzzItemID + ".c2VhbGVk"}
}

func rewriteMessagesSSE(t *testing.T, in []byte, chunk int) []byte {
	t.Helper()
	body := io.NopCloser(&chunkedReader{src: in, n: max(chunk, 1)})
	r := newMsgSSERewriter(body, fuzzMsgTurn())
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
	emit("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}}}`)
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

// FuzzMessagesSSERewriter feeds arbitrary upstream bytes to the Messages SSE rewriter: it must
// not panic or fail, and a body with no data lines passes through byte for byte.
func FuzzMessagesSSERewriter(f *testing.F) {
	f.Add(messagesStream("hi", 2, 2, false), uint8(5))
	f.Add(messagesStream("", 1, 0, true), uint8(1))
	f.Add([]byte("event: ping\ndata: {\"type\":\"ping\"}\n\n"), uint8(3))
	f.Add([]byte("data: {\"type\":\"content_block_delta\",\"index\":\"a\"}\n\ndata: {\"type\":\"message_delta\",\"usage\":7}\n\n"), uint8(2))
	f.Add([]byte("data: {\"type\":\"message_start\",\"message\":null}"), uint8(8))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		out := rewriteMessagesSSE(t, data, int(chunk))
		if !bytes.Contains(data, dataPrefix) && !bytes.Equal(out, data) {
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
		src := sseEvents(t, in)
		out := sseEvents(t, rewriteMessagesSSE(t, in, int(chunk)))
		if len(out) != len(src)+3 {
			t.Fatalf("%d events out, want %d", len(out), len(src)+3)
		}
		mt := fuzzMsgTurn()
		start, delta, stop := out[1], out[2], out[3]
		if start.Get("type").Str != "content_block_start" || start.Get("index").Int() != 0 || start.Get("content_block.type").Str != "compaction" ||
			delta.Get("delta.type").Str != "compaction_delta" || delta.Get("delta.content").Str != mt.summary || delta.Get("delta.encrypted_content").Str != mt.ecStr ||
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

func fuzzCounter(f *testing.F) *compact.Counter {
	c := compact.NewCounter(compact.CounterOptions{})
	f.Cleanup(c.Close)
	return c
}

// FuzzMessagesHandoff renders the Messages handoff for the last compaction block of a fuzzed
// body: the first message is the user handoff carrying exactly handoff.MessagesText, no compaction block
// is left, every message is valid JSON, and the messages after the block's message follow
// unchanged (minus compaction blocks).
func FuzzMessagesHandoff(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":"old"},{"role":"assistant","content":[{"type":"compaction","content":"s","encrypted_content":"e"},{"type":"text","text":"after"}]},{"role":"user","content":"new"}]}`), "the summary")
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"compaction","content":"s"},{"type":"compaction","content":null},{"type":"text","text":"q"}]}]}`), "")
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"compaction"}]},{"role":"assistant","content":[{"type":"compaction"}]}]}`), "</summary>")
	f.Fuzz(func(t *testing.T, body []byte, summary string) {
		req, err := api.ParseMessagesRequest(body)
		if err != nil || len(req.Blocks) == 0 {
			return
		}
		ref := req.Blocks[len(req.Blocks)-1]
		out := handoffMessages(req.Messages, ref, &engine.Opened{Summary: summary, Payload: &compact.Payload{Summary: summary}})
		if len(out) == 0 || out[0].Role != "user" || !out[0].Handoff {
			t.Fatalf("first message is not the user handoff: %+v", out)
		}
		if utf8.ValidString(summary) && gjson.GetBytes(out[0].Raw, "content.0.text").Str != handoff.MessagesText(summary, "") {
			t.Fatalf("handoff text differs from handoff.MessagesText")
		}
		for i, m := range out {
			if !json.Valid(m.Raw) {
				t.Fatalf("message %d is not JSON: %q", i, m.Raw)
			}
			for _, b := range m.Blocks {
				if b.Type == api.BlockCompaction {
					t.Fatalf("message %d still holds a compaction block", i)
				}
			}
			for _, b := range gjson.GetBytes(m.Raw, "content").Array() {
				if b.Get("type").Str == api.BlockCompaction {
					t.Fatalf("message %d raw still holds a compaction block: %q", i, m.Raw)
				}
			}
		}
		later := stripCompaction(req.Messages, ref.Message+1)
		if len(out) < len(later) {
			t.Fatalf("lost messages after the block")
		}
		for i, m := range later {
			if !bytes.Equal(out[len(out)-len(later)+i].Raw, m.Raw) {
				t.Fatalf("message after the block changed")
			}
		}
	})
}
