package messages

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn/turntest"
)

func conversation() []string {
	out := []string{`{"role":"user","content":"Fix the failing test in internal/api."}`}
	for i := 0; i < 6; i++ {
		id := "toolu_" + string(rune('a'+i))
		out = append(out,
			`{"role":"assistant","content":[{"type":"text","text":"Running the tests."},{"type":"tool_use","id":"`+id+`","name":"bash","input":{"cmd":"go test ./..."}}]}`,
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"`+id+`","content":"`+strings.Repeat(`ok  \tgithub.com/x/y\t0.1s `, 60)+`"}]}`,
		)
	}
	return append(out, `{"role":"user","content":"Now summarise what failed."}`)
}

func messagesBody(msgs []string) []byte {
	return []byte(`{"model":"claude-test","max_tokens":1024,"messages":[` + strings.Join(msgs, ",") + `]}`)
}

func TestConformance(t *testing.T) {
	long := conversation()
	answer := `{"role":"assistant","content":[{"type":"text","text":"The parser test failed."}]}`
	next := `{"role":"user","content":"Fix it."}`
	turntest.Run(t, Adapter{}, turntest.Fixture{
		Plain: messagesBody(long[:1]),
		Long:  messagesBody(long),
		Next:  messagesBody(append(long[:len(long):len(long)], answer, next)),
		Carry: func(c *engine.Compaction) []byte {
			withBlock := `{"role":"assistant","content":[` + string(api.CompactionBlock(c.Summary, c.EncryptedContent, c.Signature)) + `,{"type":"text","text":"The parser test failed."}]}`
			return messagesBody(append(long[:len(long):len(long)], withBlock, next))
		},
		JSONAnswer: []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":2}}`),
		CheckJSON: func(t *testing.T, out []byte, c *engine.Compaction) {
			b := gjson.GetBytes(out, "content.0")
			if b.Get("type").Str != "compaction" || b.Get("content").Str != c.Summary || b.Get("encrypted_content").Str != c.EncryptedContent {
				t.Errorf("content[0] = %s, want the compaction block", b.Raw)
			}
			if gjson.GetBytes(out, "content.1.text").Str != "ok" {
				t.Errorf("the upstream's content did not follow the block: %s", out)
			}
		},
		SSEAnswer: []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude-test\",\"content\":[],\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n" +
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
		CheckSSE: func(t *testing.T, evs []sse.Event, c *engine.Compaction) {
			if len(evs) < 2 || evs[0].Name != "message_start" || evs[1].Name != "content_block_start" ||
				gjson.GetBytes(evs[1].Data, "content_block.type").Str != "compaction" || gjson.GetBytes(evs[1].Data, "index").Int() != 0 {
				t.Fatalf("the stream does not open with the compaction block at index 0: %v", evs)
			}
			var delta string
			for _, ev := range evs {
				d := gjson.ParseBytes(ev.Data)
				if d.Get("delta.type").Str == "compaction_delta" {
					delta = d.Get("delta.encrypted_content").Str
				}
				if d.Get("delta.type").Str == "text_delta" && d.Get("index").Int() != 1 {
					t.Errorf("the upstream's text block has index %d, want 1 (shifted behind the block)", d.Get("index").Int())
				}
			}
			if delta != c.EncryptedContent {
				t.Errorf("compaction_delta carries %q, want the sealed content", delta)
			}
		},
		Ignorable: []string{"ping"},
	})
}
