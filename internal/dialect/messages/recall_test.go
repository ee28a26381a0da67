package messages

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn"
)

var recallTool = turn.RecallTool{Name: "compactd_recall", Description: "search", Parameters: map[string]any{"type": "object"}}

// The recall tool is offered unless the client's tool choice or a tool of its own of the same
// name leaves no room for it, or the turn continues the assistant's prefill.
func TestRecallOffered(t *testing.T) {
	env, _ := newEnv(t)
	for _, tc := range []struct {
		name  string
		extra []string
		msgs  []string
		want  bool
	}{
		{name: "ordinary turn", want: true},
		{name: "tool choice auto", extra: []string{`"tool_choice":{"type":"auto"}`}, want: true},
		{name: "tool choice none", extra: []string{`"tool_choice":{"type":"none"}`}},
		{name: "another named tool", extra: []string{`"tools":[{"name":"Read","input_schema":{}}]`, `"tool_choice":{"type":"tool","name":"Read"}`}},
		{name: "the client's own tool of the name", extra: []string{`"tools":[{"name":"compactd_recall","input_schema":{}}]`}},
		{name: "a prefill", msgs: append(history(1), msg("user", "q"), msg("assistant", "The answer is")), extra: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs := tc.msgs
			if msgs == nil {
				msgs = append(history(1), msg("user", "q"))
			}
			if got := parse(t, Adapter{}, env, body(msgs, tc.extra...)).Recall(env, recallTool) != nil; got != tc.want {
				t.Errorf("offered %v, want %v", got, tc.want)
			}
		})
	}
}

// A round's request is the body compactd would have forwarded, the tool appended to the
// client's tools; the last round keeps the tool (the history may call it) and forbids calling
// it; a round that called it is answered with the assistant's blocks and the results.
func TestRecallRounds(t *testing.T) {
	env, _ := newEnv(t)
	tt := parse(t, Adapter{}, env, body(append(history(1), msg("user", "which port?")), compactEdit, `"tools":[{"name":"Read","input_schema":{"type":"object"}}]`))
	d := tt.Recall(env, recallTool)
	first := d.Request(false)
	wantTools := `[{"name":"Read","input_schema":{"type":"object"}},{"description":"search","input_schema":{"type":"object"},"name":"compactd_recall"}]`
	if gjson.GetBytes(first, "tools").Raw != wantTools || gjson.GetBytes(first, "context_management").Exists() || gjson.GetBytes(first, "tool_choice").Exists() ||
		gjson.GetBytes(first, "messages").Raw != msgsOf(t, tt.Body(env)) {
		t.Fatalf("first round %s", first)
	}
	round := `{"model":"claude","content":[{"type":"text","text":""},{"type":"text","text":"let me look"},{"type":"tool_use","id":"tu1","name":"compactd_recall","input":{"query":"port"}},{"type":"tool_use","id":"tu2","name":"Read","input":{}}],` +
		`"stop_reason":"tool_use","usage":{"input_tokens":100,"output_tokens":10,"cache_read_input_tokens":5,"cache_creation":{"ephemeral_5m_input_tokens":3,"ephemeral_1h_input_tokens":0}}}`
	items, why := d.JSONRound([]byte(round))
	if why != "" || len(items) != 4 || items[2].Call == nil || items[2].Call.ID != "tu1" || items[2].Call.Query != "port" || !items[3].Tool || items[3].Call != nil || items[1].Tool {
		t.Fatalf("JSONRound = %+v, %q", items, why)
	}
	d.Answer(items[:3], []string{"port: 8443"})
	last := d.Request(true)
	msgs := gjson.GetBytes(last, "messages").Array()
	use, res := msgs[len(msgs)-2], msgs[len(msgs)-1]
	if use.Raw != `{"role":"assistant","content":[{"type":"text","text":"let me look"},{"type":"tool_use","id":"tu1","name":"compactd_recall","input":{"query":"port"}}]}` ||
		res.Raw != `{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu1","content":"port: 8443"}]}` {
		t.Fatalf("answered round:\n%s\n%s", use.Raw, res.Raw)
	}
	if gjson.GetBytes(last, "tool_choice").Raw != `{"type":"none"}` || gjson.GetBytes(last, "tools").Raw != wantTools {
		t.Fatalf("last round %s", last)
	}
	final := `{"model":"claude","content":[{"type":"text","text":"8443"}],"stop_reason":"tool_use","usage":{"input_tokens":130,"output_tokens":4,"cache_creation":{"ephemeral_5m_input_tokens":1}}}`
	items, _ = d.JSONRound([]byte(final))
	out := d.FinalJSON([]byte(final), [][]byte{[]byte(`{"type":"text","text":"let me look"}`), items[0].Raw})
	u := gjson.GetBytes(out, "usage")
	if gjson.GetBytes(out, "content").Raw != `[{"type":"text","text":"let me look"},{"type":"text","text":"8443"}]` || gjson.GetBytes(out, "stop_reason").Str != "end_turn" ||
		u.Get("input_tokens").Int() != 230 || u.Get("output_tokens").Int() != 14 || u.Get("cache_read_input_tokens").Int() != 5 ||
		u.Get("cache_creation.ephemeral_5m_input_tokens").Int() != 4 || u.Get("iterations.#").Int() != 2 {
		t.Fatalf("final answer %s", out)
	}
}

// A turn that compacted: the block first in the final content, its iteration first, and the
// stream's prelude is the block's events.
func TestRecallAfterCompaction(t *testing.T) {
	env, _ := newEnv(t)
	tt := parse(t, Adapter{}, env, body(append(history(1), msg("user", "q"))))
	tt.compacted, tt.block, tt.summary, tt.ecStr = true, api.CompactionBlock("s", "cmp_x.y", ""), "s", "cmp_x.y"
	tt.compUsage = summarizer.Usage{InputTokens: 9}
	d := tt.Recall(env, recallTool)
	if !d.Compacted() || string(d.Prelude()) != string(compactionBlockEvents(nil, "s", "cmp_x.y", "")) {
		t.Fatal("prelude")
	}
	resp := `{"model":"m","content":[{"type":"text","text":"a"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`
	items, _ := d.JSONRound([]byte(resp))
	out := d.FinalJSON([]byte(resp), [][]byte{items[0].Raw})
	if gjson.GetBytes(out, "content.0").Raw != string(tt.block) || gjson.GetBytes(out, "usage.iterations.0.type").Str != "compaction" ||
		gjson.GetBytes(out, "usage.iterations.0.input_tokens").Int() != 9 || gjson.GetBytes(out, "usage.iterations.#").Int() != 2 {
		t.Fatalf("final %s", out)
	}
}

// A streamed round: every event classified, the blocks rebuilt from their deltas, the round
// closed by message_delta and message_stop, which the loop renders itself.
func TestRecallStream(t *testing.T) {
	env, _ := newEnv(t)
	d := parse(t, Adapter{}, env, body(append(history(1), msg("user", "q")))).Recall(env, recallTool)
	evs := []struct {
		data string
		kind turn.RecallEventKind
	}{
		{`{"type":"message_start","message":{"model":"m","usage":{"input_tokens":50,"cache_read_input_tokens":2}}}`, turn.EvStart},
		{`{"type":"ping"}`, turn.EvPass},
		{`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`, turn.EvItem},
		{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"look"}}`, turn.EvItem},
		{`{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"cited_text":"c"}}}`, turn.EvItem},
		{`{"type":"content_block_stop","index":0}`, turn.EvItem},
		{`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"tu1","name":"compactd_recall","input":{}}}`, turn.EvItem},
		{`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"query\":"}}`, turn.EvItem},
		{`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"port\"}"}}`, turn.EvItem},
		{`{"type":"content_block_stop","index":1}`, turn.EvItem},
		{`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}`, turn.EvEnd},
		{`{"type":"message_stop"}`, turn.EvStop},
	}
	for i, e := range evs {
		got := d.Event("", []byte(e.data))
		if got.Kind != e.kind {
			t.Fatalf("event %d: kind %d, want %d", i, got.Kind, e.kind)
		}
		if i == 6 && (!got.Start || !got.Tool || !got.Call || got.Index != 1) {
			t.Fatalf("tool_use start: %+v", got)
		}
	}
	if e := d.Event("", []byte(`{"type":"error","error":{"type":"overloaded_error"}}`)); e.Kind != turn.EvError {
		t.Fatalf("error event kind %d", e.Kind)
	}
	items, why := d.StreamRound()
	if why != "" || len(items) != 2 || string(items[0].Raw) != `{"type":"text","text":"look","citations":[{"cited_text":"c"}]}` ||
		items[1].Call == nil || items[1].Call.Query != "port" || items[1].Call.ID != "tu1" {
		t.Fatalf("StreamRound = %+v %q", items, why)
	}
	closing := string(d.FinalStream([][]byte{items[0].Raw}))
	ev := events(t, closing)
	if len(ev) != 2 || ev[0].Get("delta.stop_reason").Str != "end_turn" || ev[0].Get("usage.input_tokens").Int() != 50 ||
		ev[0].Get("usage.output_tokens").Int() != 7 || ev[1].Raw != `{"type":"message_stop"}` {
		t.Fatalf("closing events %s", closing)
	}
	// Renumbering splices the index and nothing else.
	data := []byte(`{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"x"}}`)
	e, ok := d.Reindex(data, 1)
	if !ok {
		t.Fatal("no reindex edit")
	}
	got := string(relay.ApplySplices(data, []relay.Splice{e}))
	if got != `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"x"}}` {
		t.Errorf("reindexed %s", got)
	}
	if _, ok := d.Reindex(data, 3); ok {
		t.Error("an edit for the index it has")
	}
	var out []byte
	for _, p := range d.Render(nil, "content_block_delta", data, nil) {
		out = append(out, p...)
	}
	if string(out) != string(sse.AppendEvent(nil, "content_block_delta", data)) {
		t.Errorf("Render %q", out)
	}
}

// A round with no message_delta cannot be summed.
func TestRecallStreamWithoutDelta(t *testing.T) {
	env, _ := newEnv(t)
	d := parse(t, Adapter{}, env, body(append(history(1), msg("user", "q")))).Recall(env, recallTool)
	d.Event("", []byte(`{"type":"message_start","message":{"usage":{}}}`))
	if _, why := d.StreamRound(); why != "ended its stream without a message_delta" {
		t.Errorf("why %q", why)
	}
}

// Errors into a stream under way: the upstream's own envelope, else compactd's fault.
func TestRecallErrorEvents(t *testing.T) {
	env, _ := newEnv(t)
	d := parse(t, Adapter{}, env, body(append(history(1), msg("user", "q")))).Recall(env, recallTool)
	up := string(d.ErrorEvents(nil, 529, []byte(`{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`)))
	if up != "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"busy\"}}\n\n" {
		t.Errorf("upstream error %q", up)
	}
	own := events(t, string(d.ErrorEvents(turn.UpstreamInterrupted(), 0, nil)))
	if len(own) != 1 || own[0].Get("error.type").Str != "api_error" || !strings.Contains(own[0].Get("error.message").Str, "stream ended") {
		t.Errorf("own error %v", own)
	}
}

// The turns after an agent compaction compactd answered name its archive by the signed
// reference in the note; nothing else does.
func TestArchiveRef(t *testing.T) {
	env, front := newEnv(t)
	front.refs["cref-good"] = "conv-1"
	noted := msg("user", "<summary>s\n\n"+turn.AgentRecallText("compactd_recall", "cref-good")+"</summary>")
	block, _ := sealedBlock(t, env, history(3))
	for _, tc := range []struct {
		name string
		a    Adapter
		msgs []string
		conv string
	}{
		{name: "the note first", msgs: []string{noted, msg("user", "q")}, conv: "conv-1"},
		// Claude Code sends its summary back as blocks; a client that sends it as a string
		// content is read the same (api.Message.ContentBlocks).
		{name: "the note first, as a string content", msgs: []string{`{"role":"user","content":` + strconv.Quote("<summary>s\n\n"+turn.AgentRecallText("compactd_recall", "cref-good")+"</summary>") + `}`, msg("user", "q")}, conv: "conv-1"},
		{name: "a reference that does not verify", msgs: []string{msg("user", "<summary>"+turn.AgentRecallText("compactd_recall", "cref-bad")+"</summary>"), msg("user", "q")}},
		{name: "the reference without the note", msgs: []string{msg("user", "cref-good"), msg("user", "q")}},
		{name: "the note later", msgs: []string{msg("user", "q"), noted}},
		{name: "a turn carrying a block", msgs: append([]string{noted}, withBlock(nil, block, "n")...)},
		{name: "count_tokens", a: Adapter{CountTokens: true}, msgs: []string{noted, msg("user", "q")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conv, owner, ok := parse(t, tc.a, env, body(tc.msgs)).ArchiveRef(env)
			if conv != tc.conv || ok != (tc.conv != "") || ok && owner != "owner-of-conv-1" {
				t.Errorf("ArchiveRef = %q, %q, %v", conv, owner, ok)
			}
		})
	}
	// The memo's compaction in force: its own archive, not the note's.
	tt := parse(t, Adapter{}, env, body([]string{noted, msg("user", "q")}))
	tt.Remember(env, &engine.Memory{Opened: &engine.Opened{ID: "cmp_1", Payload: &compact.Payload{V: 1}}, Items: 1})
	if _, _, ok := tt.ArchiveRef(env); ok {
		t.Error("a turn the memo applied a compaction to reads the note's archive")
	}
}
