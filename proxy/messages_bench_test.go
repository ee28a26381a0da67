package proxy

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/sse"
)

// BenchmarkMessagesSSERewrite measures the per-stream cost of injecting a compaction block into a
// 200-delta upstream Messages stream (re-indexing every block event, completing message_delta).
func BenchmarkMessagesSSERewrite(b *testing.B) {
	var src bytes.Buffer
	src.Write(sse.AppendEvent(nil, "message_start", []byte(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":1200,"output_tokens":1}}}`)))
	src.Write(sse.AppendEvent(nil, "content_block_start", []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)))
	src.Write(sse.AppendEvent(nil, "ping", []byte(`{"type": "ping"}`)))
	for i := 0; i < 200; i++ {
		src.Write(sse.AppendEvent(nil, "content_block_delta", []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"some words of output "}}`)))
	}
	src.Write(sse.AppendEvent(nil, "content_block_stop", []byte(`{"type":"content_block_stop","index":0}`)))
	src.Write(sse.AppendEvent(nil, "message_delta", []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":800}}`)))
	src.Write(sse.AppendEvent(nil, "message_stop", []byte(`{"type":"message_stop"}`)))
	summary := strings.Repeat("summary text ", 500)
	mt := &msgTurn{t: &turnState{}, block: api.CompactionBlock(summary, "cmp_x.sealed", ""), summary: summary, ecStr: "cmp_x.sealed"}
	b.SetBytes(int64(src.Len()))
	b.ReportAllocs()
	for b.Loop() {
		r := newMsgSSERewriter(io.NopCloser(bytes.NewReader(src.Bytes())), mt)
		if _, err := io.Copy(io.Discard, r); err != nil {
			b.Fatal(err)
		}
	}
}
