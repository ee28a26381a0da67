package responses

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn/turntest"
)

func history() []string {
	out := []string{`{"type":"message","role":"user","content":"Fix the failing test in internal/api."}`}
	for i := 0; i < 6; i++ {
		out = append(out,
			`{"type":"function_call","call_id":"call_`+string(rune('a'+i))+`","name":"shell","arguments":"{\"cmd\":\"go test ./...\"}"}`,
			`{"type":"function_call_output","call_id":"call_`+string(rune('a'+i))+`","output":"`+strings.Repeat(`ok  \tgithub.com/x/y\t0.1s `, 60)+`"}`,
			`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Step done."}]}`,
		)
	}
	return out
}

func body(items []string) []byte {
	return []byte(`{"model":"gpt-test","input":[` + strings.Join(items, ",") + `],"store":false}`)
}

const newMessage = `{"type":"message","role":"user","content":"Now run the linter."}`

func TestConformance(t *testing.T) {
	long := history()
	turntest.Run(t, Adapter{}, turntest.Fixture{
		Plain: body(long[:1]),
		Long:  body(long),
		Next:  body(append(long[:len(long):len(long)], newMessage)),
		Carry: func(c *engine.Compaction) []byte {
			return body(append(long[:len(long):len(long)], string(api.CompactionItem(c.ID, c.EncryptedContent)), newMessage))
		},
		JSONAnswer: []byte(`{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}]}`),
		CheckJSON: func(t *testing.T, out []byte, c *engine.Compaction) {
			out0 := gjson.GetBytes(out, "output.0")
			if out0.Get("type").Str != "compaction" || out0.Get("id").Str != c.ID || out0.Get("encrypted_content").Str != c.EncryptedContent {
				t.Errorf("output[0] = %s, want the compaction item", out0.Raw)
			}
			if gjson.GetBytes(out, "output.1.type").Str != "message" || gjson.GetBytes(out, "output.#").Int() != 2 {
				t.Errorf("the upstream's output did not follow the item: %s", out)
			}
		},
		SSEAnswer: []byte("event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"output\":[]}}\n\n" +
			"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"type\":\"message\"}}\n\n" +
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"output_index\":0,\"delta\":\"ok\"}\n\n" +
			"event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"sequence_number\":3,\"output_index\":0,\"item\":{\"type\":\"message\"}}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":4,\"response\":{\"id\":\"resp_1\",\"output\":[{\"type\":\"message\"}]}}\n\n"),
		CheckSSE: func(t *testing.T, evs []sse.Event, c *engine.Compaction) {
			var names []string
			for i, ev := range evs {
				names = append(names, ev.Name)
				if seq := gjson.GetBytes(ev.Data, "sequence_number").Int(); seq != int64(i) {
					t.Errorf("event %d (%s) has sequence_number %d: the sequence must run on without a gap", i, ev.Name, seq)
				}
			}
			want := "response.created response.output_item.added response.output_item.done response.output_item.added response.output_text.delta response.output_item.done response.completed"
			if got := strings.Join(names, " "); got != want {
				t.Fatalf("events = %s\nwant     %s", got, want)
			}
			if item := gjson.GetBytes(evs[2].Data, "item"); item.Get("id").Str != c.ID || item.Get("encrypted_content").Str != c.EncryptedContent {
				t.Errorf("output_item.done carries %s, want the compaction item", item.Raw)
			}
			for _, i := range []int{3, 4, 5} {
				if oi := gjson.GetBytes(evs[i].Data, "output_index").Int(); oi != 1 {
					t.Errorf("%s has output_index %d, want 1 (shifted behind the compaction item)", evs[i].Name, oi)
				}
			}
			if out0 := gjson.GetBytes(evs[6].Data, "response.output.0"); out0.Get("id").Str != c.ID {
				t.Errorf("response.completed's output[0] = %s, want the compaction item", out0.Raw)
			}
		},
	})
}
