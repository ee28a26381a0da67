package chat

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn"
	"github.com/compactd/compactd/internal/turn/turntest"
)

var recallTool = turn.RecallTool{Name: "compactd_recall", Description: "search the archive",
	Parameters: map[string]any{"type": "object", "required": []string{"query"}}}

func recallOf(t *testing.T, b string) *recall {
	t.Helper()
	h := turntest.NewHarness(t, Adapter{})
	d := parse(t, h.Env, []byte(b)).Recall(h.Env, recallTool)
	if d == nil {
		t.Fatalf("no recall for %s", b)
	}
	return d.(*recall)
}

// Recall applies to a single-choice request whose tools and tool choice leave room for the
// tool, and whose last message is not the assistant's.
func TestRecallApplies(t *testing.T) {
	user := `{"role":"user","content":"which port?"}`
	for _, tc := range []struct {
		name, extra, last string
		want              bool
	}{
		{"plain", ``, user, true},
		{"n 1", `,"n":1`, user, true},
		{"n null", `,"n":null`, user, true},
		{"n 2", `,"n":2`, user, false},
		// 2^64+1: not 1 to the upstream, so not 1 here either (no integer overflow to 1).
		{"n past 64 bits", `,"n":18446744073709551617`, user, false},
		{"deprecated functions", `,"functions":[{"name":"f"}]`, user, false},
		{"assistant prefill", ``, `{"role":"assistant","content":"The port is"}`, false},
		{"tool choice none", `,"tool_choice":"none"`, user, false},
		{"tool choice auto", `,"tool_choice":"auto"`, user, true},
		{"tool choice required", `,"tool_choice":"required"`, user, true},
		{"one other function", `,"tools":[{"type":"function","function":{"name":"shell"}}],"tool_choice":{"type":"function","function":{"name":"shell"}}`, user, false},
		{"a client tool of the same name", `,"tools":[{"type":"function","function":{"name":"compactd_recall"}}]`, user, false},
		{"other client tools", `,"tools":[{"type":"function","function":{"name":"shell"}}]`, user, true},
		{"a tool message last", ``, `{"role":"tool","tool_call_id":"c1","content":"ok"}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := turntest.NewHarness(t, Adapter{})
			tr := parse(t, h.Env, []byte(`{"model":"m","messages":[{"role":"system","content":"s"},`+tc.last+`]`+tc.extra+`}`))
			if got := tr.Recall(h.Env, recallTool) != nil; got != tc.want {
				t.Errorf("recall = %v, want %v", got, tc.want)
			}
		})
	}
	h := turntest.NewHarness(t, Adapter{})
	if parse(t, h.Env, []byte(`{"model":"m","messages":[]}`)).Recall(h.Env, recallTool) != nil {
		t.Error("recall for a request without messages")
	}
}

// A round's request: the conversation as Body would send it, the client's tools and the recall
// tool, tool_choice "none" on the last round, and usage asked for on a stream.
func TestRecallRequest(t *testing.T) {
	d := recallOf(t, `{"model":"m","stream":true,"tools":[{"type":"function","function":{"name":"shell"}}],"messages":[{"role":"user","content":"hi"}],"x":1}`)
	want := `{"model":"m","stream":true,"tools":[{"type":"function","function":{"name":"shell"}},` +
		`{"function":{"description":"search the archive","name":"compactd_recall","parameters":{"required":["query"],"type":"object"},"strict":true},"type":"function"}],` +
		`"messages":[{"role":"user","content":"hi"}],"x":1,"stream_options":{"include_usage":true}}`
	if got := string(d.Request(false)); got != want {
		t.Errorf("Request(false)\n got %s\nwant %s", got, want)
	}
	if tc := gjson.GetBytes(d.Request(true), "tool_choice"); tc.Str != "none" {
		t.Errorf("Request(true) tool_choice = %s", tc.Raw)
	}
	// No tools of the client's (absent, or null): the recall tool alone; no stream, no usage.
	for _, b := range []string{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, `{"model":"m","tools":null,"messages":[{"role":"user","content":"hi"}]}`} {
		out := recallOf(t, b).Request(false)
		if tl := gjson.GetBytes(out, "tools"); len(tl.Array()) != 1 || tl.Get("0.function.name").Str != "compactd_recall" || gjson.GetBytes(out, "stream_options").Exists() {
			t.Errorf("Request(false) = %s", out)
		}
	}
}

// The first round starts from the turn's conversation as it goes upstream: the compacted one.
func TestRecallStartsFromTheCompactedConversation(t *testing.T) {
	h := turntest.NewHarness(t, Adapter{})
	tr := parse(t, h.Env, body(next(history())))
	h.Compact(t, Adapter{}, tr, true)
	d := tr.Recall(h.Env, recallTool)
	if d == nil {
		t.Fatal("no recall")
	}
	got := gjson.GetBytes(d.Request(false), "messages").Raw
	if n := len(gjson.Parse(got).Array()); n >= len(next(history())) {
		t.Fatalf("the first round has %d messages: not the compacted conversation", n)
	}
	if want := gjson.GetBytes(tr.Body(h.Env), "messages").Raw; got != want {
		t.Errorf("first round's messages\n got %s\nwant %s", got, want)
	}
}

// JSON rounds: a message splits into its text and its tool calls, a round that called the tool
// is answered with the assistant's message and one tool message per call, and the final answer
// holds the text of every visible round, the client's tool calls of the last one, and the
// usage of all of them.
func TestRecallJSON(t *testing.T) {
	d := recallOf(t, `{"model":"m","messages":[{"role":"user","content":"which port?"}]}`)
	round1 := `{"id":"c1","object":"chat.completion","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"Looking. ",` +
		`"tool_calls":[{"id":"call_r","type":"function","function":{"name":"compactd_recall","arguments":"{\"query\":\"port\"}"}},` +
		`{"id":"call_s","type":"function","function":{"name":"shell","arguments":"{}"}}]}}],` +
		`"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":4}}}`
	items, why := d.JSONRound([]byte(round1))
	if why != "" || len(items) != 3 {
		t.Fatalf("JSONRound = %d items, %q", len(items), why)
	}
	if items[0].Tool || gjson.GetBytes(items[0].Raw, "tool_calls").Exists() || gjson.GetBytes(items[0].Raw, "content").Str != "Looking. " {
		t.Errorf("text unit = %s", items[0].Raw)
	}
	if c := items[1].Call; !items[1].Tool || c == nil || c.ID != "call_r" || c.Query != "port" {
		t.Errorf("recall call = %+v", items[1])
	}
	if !items[2].Tool || items[2].Call != nil {
		t.Errorf("client call = %+v", items[2])
	}
	// The loop answers the round without the client's call (the model re-issues it).
	d.Answer(items[:2], []string{"port 8080"})
	msgs := gjson.GetBytes(d.Request(false), "messages").Array()
	if len(msgs) != 3 || msgs[1].Get("content").Str != "Looking. " || msgs[1].Get("tool_calls.#").Int() != 1 ||
		msgs[1].Get("tool_calls.0.id").Str != "call_r" || msgs[2].Get("role").Str != "tool" ||
		msgs[2].Get("tool_call_id").Str != "call_r" || msgs[2].Get("content").Str != "port 8080" {
		t.Fatalf("history after Answer: %s", gjson.GetBytes(d.Request(false), "messages").Raw)
	}
	round2 := `{"id":"c2","object":"chat.completion","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"Port 8080.",` +
		`"tool_calls":[{"id":"call_t","type":"function","function":{"name":"shell","arguments":"{\"cmd\":\"ls\"}"}},` +
		`{"id":"call_r2","type":"function","function":{"name":"compactd_recall","arguments":"{\"query\":\"x\"}"}}]}}],` +
		`"usage":{"prompt_tokens":20,"completion_tokens":3,"total_tokens":23,"prompt_tokens_details":{"cached_tokens":1}}}`
	items2, why := d.JSONRound([]byte(round2))
	if why != "" {
		t.Fatal(why)
	}
	// The last round may still call the tool: its recall calls are not visible, and never reach
	// the client.
	visible := [][]byte{items[0].Raw, items2[0].Raw, items2[1].Raw}
	if len(items2) != 3 || items2[2].Call == nil {
		t.Fatalf("round 2 = %d items", len(items2))
	}
	out := d.FinalJSON([]byte(round2), visible)
	m := gjson.GetBytes(out, "choices.0.message")
	if m.Get("content").Str != "Looking. Port 8080." || m.Get("tool_calls.#").Int() != 1 || m.Get("tool_calls.0.id").Str != "call_t" ||
		gjson.GetBytes(out, "choices.0.finish_reason").Str != "tool_calls" {
		t.Errorf("final answer = %s", out)
	}
	if u := gjson.GetBytes(out, "usage"); u.Get("prompt_tokens").Int() != 30 || u.Get("completion_tokens").Int() != 5 ||
		u.Get("total_tokens").Int() != 35 || u.Get("prompt_tokens_details.cached_tokens").Int() != 5 || u.Get("completion_tokens_details").Exists() {
		t.Errorf("usage = %s", u.Raw)
	}
	// A final round without tool calls: none in the answer, and it stopped.
	last := `{"id":"c3","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"done","tool_calls":[]}}]}`
	out = d.FinalJSON([]byte(last), [][]byte{[]byte(`{"role":"assistant","content":"done"}`)})
	if gjson.GetBytes(out, "choices.0.message.tool_calls").Exists() || gjson.GetBytes(out, "choices.0.finish_reason").Str != "stop" || gjson.GetBytes(out, "usage").Exists() {
		t.Errorf("final answer without calls = %s", out)
	}
	if _, why := d.JSONRound([]byte(`{"choices":[]}`)); why == "" {
		t.Error("a round without choices[0].message is usable")
	}
}

// chunk is a streamed chunk of id with delta, and finish when set.
func chunk(id, delta, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `{"id":"` + id + `","object":"chat.completion.chunk","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}`
}

// Streamed rounds: the opening chunk, text as unit 0, each tool call a unit of its own (the
// recall tool's marked), the finish chunk ends the round and the usage chunk stops it; the
// client's chunks all carry the first round's id, and usage only when it asked; the stream's
// close sums the rounds' usage and ends with [DONE].
func TestRecallStream(t *testing.T) {
	for _, includeUsage := range []bool{false, true} {
		opts := ``
		if includeUsage {
			opts = `,"stream_options":{"include_usage":true}`
		}
		d := recallOf(t, `{"model":"m","stream":true`+opts+`,"messages":[{"role":"user","content":"which port?"}]}`)
		type ev struct {
			data  string
			kind  turn.RecallEventKind
			index int64
			start bool
			tool  bool
			call  bool
		}
		round1 := []ev{
			{chunk("c1", `{"role":"assistant","content":""}`, ""), turn.EvStart, 0, false, false, false},
			{chunk("c1", `{"content":"Looking. "}`, ""), turn.EvItem, 0, true, false, false},
			{chunk("c1", `{"tool_calls":[{"index":0,"id":"call_r","type":"function","function":{"name":"compactd_recall","arguments":""}}]}`, ""), turn.EvItem, 1, true, true, true},
			{chunk("c1", `{"tool_calls":[{"index":0,"function":{"arguments":"{\"query\":\"port\"}"}}]}`, ""), turn.EvItem, 1, false, false, false},
			{chunk("c1", `{"tool_calls":[{"index":1,"id":"call_s","type":"function","function":{"name":"shell","arguments":"{}"}}]}`, ""), turn.EvItem, 2, true, true, false},
			{chunk("c1", `{"tool_calls":[{"index":5,"function":{"arguments":"x"}}]}`, ""), turn.EvItem, 0, true, false, false}, // not contiguous: text
			{chunk("c1", `{}`, "tool_calls"), turn.EvEnd, 0, false, false, false},
			{`{"id":"c1","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`, turn.EvStop, 0, false, false, false},
		}
		for i, e := range round1 {
			got := d.Event("", []byte(e.data))
			if got.Kind != e.kind || got.Index != e.index || got.Start != e.start || got.Tool != e.tool || got.Call != e.call {
				t.Fatalf("round 1 event %d: %+v, want %+v", i, got, e)
			}
		}
		if !d.DoneStops() {
			t.Error("a round whose finish chunk came does not stop at [DONE]")
		}
		items, why := d.StreamRound()
		if why != "" || len(items) != 3 {
			t.Fatalf("StreamRound = %d items, %q", len(items), why)
		}
		if gjson.GetBytes(items[0].Raw, "content").Str != "Looking. " || items[1].Call == nil || items[1].Call.Query != "port" ||
			gjson.GetBytes(items[2].Raw, "function.name").Str != "shell" || items[2].Call != nil || !items[2].Tool {
			t.Fatalf("round 1 items: %s | %s | %s", items[0].Raw, items[1].Raw, items[2].Raw)
		}
		d.Answer(items[:2], []string{"port 8080"})
		if d.DoneStops() {
			t.Error("a new round stops at [DONE] before its finish chunk")
		}
		// Round 2, with another id; its role chunk is not the response's opening any more for
		// the loop (it relays EvStart in the first round only).
		if e := d.Event("", []byte(chunk("c2", `{"role":"assistant","content":""}`, ""))); e.Kind != turn.EvStart {
			t.Errorf("round 2 opening: %+v", e)
		}
		text := chunk("c2", `{"content":"Port 8080."}`, "")
		if e := d.Event("", []byte(text)); e.Kind != turn.EvItem || e.Index != 0 {
			t.Errorf("round 2 text: %+v", e)
		}
		got := string(bytes.Join(d.Render(nil, "", []byte(text), nil), nil))
		if want := "data: " + chunk("c1", `{"content":"Port 8080."}`, "") + "\n\n"; got != want {
			t.Errorf("Render\n got %q\nwant %q", got, want)
		}
		d.Event("", []byte(`{"id":"c2","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":3,"total_tokens":23}}`))
		if _, why := d.StreamRound(); why != "" {
			t.Fatal(why)
		}
		final := d.FinalStream([][]byte{items[0].Raw})
		evs := sseData(t, final)
		if len(evs) != 2 || evs[1] != "[DONE]" {
			t.Fatalf("FinalStream = %q", final)
		}
		fin := gjson.Parse(evs[0])
		if fin.Get("id").Str != "c1" || fin.Get("choices.0.finish_reason").Str != "stop" {
			t.Errorf("final chunk = %s", evs[0])
		}
		if u := fin.Get("usage"); u.Exists() != includeUsage || includeUsage && (u.Get("prompt_tokens").Int() != 30 || u.Get("total_tokens").Int() != 35) {
			t.Errorf("include_usage=%v: final chunk usage %s", includeUsage, u.Raw)
		}
	}
}

// A round that ends without a usage chunk (an upstream that ignores include_usage) ends at
// [DONE]; with the client asking for usage and an earlier round reporting it, the close carries
// a usage chunk of the sum after the final chunk, then [DONE].
func TestRecallStreamUsageChunk(t *testing.T) {
	d := recallOf(t, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"q"}]}`)
	d.Event("", []byte(chunk("c1", `{"tool_calls":[{"index":0,"id":"call_r","type":"function","function":{"name":"compactd_recall","arguments":"{\"query\":\"q\"}"}}]}`, "")))
	d.Event("", []byte(chunk("c1", `{}`, "tool_calls")))
	d.Event("", []byte(`{"id":"c1","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}`))
	items, _ := d.StreamRound()
	d.Answer(items, []string{"r"})
	d.Event("", []byte(chunk("c2", `{"content":"A"}`, "")))
	d.Event("", []byte(chunk("c2", `{}`, "stop")))
	if !d.DoneStops() {
		t.Fatal("the round does not stop at [DONE]")
	}
	if _, why := d.StreamRound(); why != "" {
		t.Fatal(why)
	}
	evs := sseData(t, d.FinalStream(nil))
	if len(evs) != 3 || evs[2] != "[DONE]" {
		t.Fatalf("close = %q", evs)
	}
	u := gjson.Parse(evs[1])
	if u.Get("id").Str != "c1" || len(u.Get("choices").Array()) != 0 || u.Get("usage.total_tokens").Int() != 8 {
		t.Errorf("usage chunk = %s", evs[1])
	}
	if _, why := (&recall{}).StreamRound(); why == "" {
		t.Error("a round without a finish chunk is usable")
	}
}

func sseData(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	rd := sse.NewReader(bytes.NewReader(b))
	for {
		ev, err := rd.Next()
		if err != nil {
			return out
		}
		out = append(out, strings.TrimSpace(string(ev.Data)))
	}
}

// An error in the upstream's stream is the turn's end; a failure compactd reports into a
// stream under way is one error chunk, the upstream's own error when it sent one.
func TestRecallErrors(t *testing.T) {
	d := recallOf(t, `{"model":"m","stream":true,"messages":[{"role":"user","content":"q"}]}`)
	if e := d.Event("", []byte(`{"error":{"message":"overloaded"}}`)); e.Kind != turn.EvError {
		t.Errorf("an error chunk is %+v", e)
	}
	if e := d.Event("", []byte(`{"id":"c1","object":"chat.completion.chunk"}`)); e.Kind != turn.EvPass {
		t.Errorf("a chunk without choices is %+v", e)
	}
	got := string(d.ErrorEvents(nil, 429, []byte(`{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`)))
	if got != `data: {"error":{"message":"slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}`+"\n\n" {
		t.Errorf("upstream error = %q", got)
	}
	got = string(d.ErrorEvents(turn.UpstreamInterrupted(), 0, nil))
	if !strings.HasPrefix(got, "data: {\"error\":") || !strings.Contains(got, fault.CodeUpstreamInterrupted) || strings.Contains(got, "[DONE]") {
		t.Errorf("fault = %q", got)
	}
	if d.Compacted() || d.Prelude() != nil {
		t.Error("a Chat compaction has a unit on the wire")
	}
	if _, ok := d.Reindex([]byte(`{}`), 3); ok {
		t.Error("Reindex edits a Chat chunk")
	}
}

func TestHasOtherDelta(t *testing.T) {
	for _, tc := range []struct {
		delta string
		want  bool
	}{
		{`{"role":"assistant","content":""}`, false},
		{`{"role":"assistant","content":null,"tool_calls":[]}`, false},
		{`{"refusal":null,"reasoning_content":""}`, false},
		{`{"reasoning_content":"thinking"}`, true},
		{`{"refusal":"no"}`, true},
		{`{"audio":{"id":"a"}}`, true},
	} {
		if got := hasOtherDelta(gjson.Parse(tc.delta)); got != tc.want {
			t.Errorf("hasOtherDelta(%s) = %v, want %v", tc.delta, got, tc.want)
		}
	}
}

func TestFinalText(t *testing.T) {
	for _, tc := range []struct {
		visible []string
		text    string
		any     bool
	}{
		{nil, "", false},
		{[]string{`{"role":"assistant","content":null}`}, "", false},
		{[]string{`{"role":"assistant","content":"a"}`, `{"id":"call","function":{}}`, `{"role":"assistant","content":"b"}`}, "ab", true},
		{[]string{`{"content":"a tool call's"}`}, "", false},
		{[]string{`{"role":"assistant","content":""}`}, "", true},
	} {
		var v [][]byte
		for _, s := range tc.visible {
			v = append(v, []byte(s))
		}
		if text, any := finalText(v); text != tc.text || any != tc.any {
			t.Errorf("finalText(%v) = %q, %v; want %q, %v", tc.visible, text, any, tc.text, tc.any)
		}
	}
}
