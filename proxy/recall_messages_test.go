package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// recallAsk makes the fake model call the recall tool. The directive leads: on a turn that
// compacts, the question itself is summarised, and the fake summary quotes only the start of
// each user message.
const recallAsk = `[[call:compactd_recall {"query":"ZETA-PLANT port"}]] Which port?`

// sawRecall reports whether raw (a message or event the client got) shows the recall tool.
func sawRecall(raw string) bool {
	return strings.Contains(raw, `"name":"compactd_recall"`) || strings.Contains(raw, `"tool_use"`) || strings.Contains(raw, `"tool_result"`)
}

// msgRecallHistory is a Messages conversation long enough to compact whose tool_result (a file
// the agent read) holds the planted fact.
func msgRecallHistory() []anthropic.BetaMessageParam {
	h := longHistory(16)
	read := []anthropic.BetaMessageParam{
		userText("read the config"),
		{OfAssistant: &anthropic.BetaAssistantMessageParam{Content: []anthropic.BetaContentBlockParamUnion{
			anthropic.NewBetaToolUseBlock("toolu_cfg", map[string]string{"file_path": "config.yaml"}, "Read")}}},
		anthropic.NewBetaUserMessage(anthropic.NewBetaToolResultBlock("toolu_cfg", "server:\n  port: 8443\n  # "+plantedFact+"\n", false)),
		{OfAssistant: &anthropic.BetaAssistantMessageParam{Content: []anthropic.BetaContentBlockParamUnion{anthropic.NewBetaTextBlock("Read it.")}}},
	}
	return append(read, h...)
}

var recallSession = option.WithHeader("X-Compactd-Session", "conv-msg-recall")

// sendMessages sends p as JSON or SSE and returns the message the client assembles, and in SSE
// every event's raw JSON.
func sendMessages(t *testing.T, h *msgHarness, ctx context.Context, p anthropic.BetaMessageNewParams, stream bool, opts ...option.RequestOption) (*anthropic.BetaMessage, []string, error) {
	t.Helper()
	if !stream {
		msg, err := h.ant.Beta.Messages.New(ctx, p, opts...)
		return msg, nil, err
	}
	s := h.ant.Beta.Messages.NewStreaming(ctx, p, opts...)
	var msg anthropic.BetaMessage
	var events []string
	for s.Next() {
		ev := s.Current()
		events = append(events, ev.RawJSON())
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("accumulate %s: %v", ev.RawJSON(), err)
		}
	}
	return &msg, events, s.Err()
}

// roundUsage replays the recorded upstream requests against a fresh fake and returns what each
// round reported: what the client's usage must be the sum of.
func roundUsage(t *testing.T, opts fakeupstream.Options, recs []fakeupstream.Recorded) (in, out []int64) {
	t.Helper()
	fresh := fakeupstream.New(opts)
	for _, r := range recs {
		body, _ := sjson.SetBytes(r.Body, "stream", false)
		rec := httptest.NewRecorder()
		fresh.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/messages", bytes.NewReader(body)))
		in = append(in, gjson.GetBytes(rec.Body.Bytes(), "usage.input_tokens").Int())
		out = append(out, gjson.GetBytes(rec.Body.Bytes(), "usage.output_tokens").Int())
	}
	return in, out
}

func sum(v []int64) int64 {
	var n int64
	for _, x := range v {
		n += x
	}
	return n
}

// checkRecallTurn checks a turn that recalled once: two upstream rounds (the tool offered, then
// its result fed back under the same tool_use_id), a client message without any trace of the
// tool whose answer carries the fact from the archive, usage summed over the rounds and
// iterations one per round (after the compaction's, when the turn compacted).
func checkRecallTurn(t *testing.T, h *msgHarness, opts fakeupstream.Options, before int, msg *anthropic.BetaMessage, events []string, compacted bool) {
	t.Helper()
	up := h.upstream(dialect.Messages)[before:]
	if len(up) != 2 {
		t.Fatalf("the turn made %d upstream calls, want 2 (recall round + answer)", len(up))
	}
	tool := gjson.GetBytes(up[0].Body, `tools.#(name=="compactd_recall")`)
	if !tool.Get("input_schema.properties.query").Exists() || tool.Get("type").Exists() && tool.Get("type").Str != "custom" {
		t.Errorf("recall tool offered as %s, want an Anthropic custom tool", tool.Raw)
	}
	msgs := gjson.GetBytes(up[1].Body, "messages").Array()
	use, res := msgs[len(msgs)-2], msgs[len(msgs)-1]
	if use.Get("role").Str != "assistant" || use.Get("content.0.type").Str != "tool_use" || res.Get("content.0.type").Str != "tool_result" ||
		use.Get("content.0.id").Str != res.Get("content.0.tool_use_id").Str {
		t.Fatalf("round 2 does not end with the tool_use and its tool_result:\n%s\n%s", use.Raw, res.Raw)
	}
	if !strings.Contains(res.Get("content.0.content").Str, plantedFact) {
		t.Errorf("the recall result lacks the planted fact: %.300s", res.Raw)
	}

	want := 1
	if compacted {
		want = 2
		if cb, ok := msg.Content[0].AsAny().(anthropic.BetaCompactionBlock); !ok || !strings.HasPrefix(cb.EncryptedContent, "cmp_") {
			t.Fatalf("content[0] = %s, want the compaction block", msg.Content[0].RawJSON())
		}
	}
	if len(msg.Content) != want {
		t.Fatalf("content has %d blocks, want %d: %s", len(msg.Content), want, msg.RawJSON())
	}
	text := msg.Content[want-1]
	if text.Type != "text" || !strings.Contains(text.Text, plantedFact) || msg.StopReason != "end_turn" {
		t.Errorf("answer = %s (stop %q), want a text with the recalled fact", text.RawJSON(), msg.StopReason)
	}
	for _, raw := range append(events, msg.RawJSON()) {
		if sawRecall(raw) {
			t.Errorf("the client saw the recall tool: %.300s", raw)
		}
	}
	if events != nil {
		starts, stops := 0, 0
		for _, e := range events {
			switch gjson.Get(e, "type").Str {
			case "message_start":
				starts++
			case "message_stop":
				stops++
			}
		}
		if starts != 1 || stops != 1 {
			t.Errorf("%d message_start and %d message_stop events, want one each", starts, stops)
		}
	}

	in, out := roundUsage(t, opts, up)
	if msg.Usage.InputTokens != sum(in) || msg.Usage.OutputTokens != sum(out) {
		t.Errorf("usage = %d in / %d out, want the rounds' sums %d / %d", msg.Usage.InputTokens, msg.Usage.OutputTokens, sum(in), sum(out))
	}
	it := msg.Usage.Iterations
	if compacted {
		if len(it) == 0 || it[0].Type != "compaction" {
			t.Fatalf("iterations = %s, want the compaction first", msg.Usage.JSON.Iterations.Raw())
		}
		it = it[1:]
	}
	if len(it) != 2 || it[0].Type != "message" || it[1].Type != "message" || it[0].InputTokens != in[0] || it[1].InputTokens != in[1] ||
		it[0].OutputTokens != out[0] || it[1].OutputTokens != out[1] {
		t.Errorf("iterations = %s, want one message entry per round (%v in, %v out)", msg.Usage.JSON.Iterations.Raw(), in, out)
	}
}

// answerPort is a fake model that answers "which port" from its context, and otherwise searches
// for it with the recall tool (fakeupstream.Answerer).
func answerPort(question, context string) (string, string, bool) {
	if !strings.Contains(question, "Which port?") {
		return "", "", false
	}
	if strings.Contains(context, plantedFact) {
		return "the port: " + plantedFact, "", true
	}
	return "", "ZETA-PLANT port", true
}

// newMsgRecallHarness is newMsgHarness with an archive and fake options.
func newMsgRecallHarness(t *testing.T, opts fakeupstream.Options, mutate func(*proxy.Config)) *msgHarness {
	h := newHarness(t, opts, func(c *proxy.Config) {
		c.AnthropicUpstream = c.Upstream
		withArchive(t, mutate)(c)
	})
	return &msgHarness{harness: h, ant: anthropic.NewClient(
		option.WithBaseURL(h.proxyURL), option.WithAPIKey("sk-ant-test"), option.WithMaxRetries(0))}
}

// Recall on Messages, as the compacting turn itself and as the turn after, JSON and SSE. On the
// compacting turn the question itself is summarised (Anthropic's compaction keeps nothing
// verbatim): a model that reads its context (answerPort) searches for what the summary lacks.
func TestMessagesRecall(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "json", true: "sse"}[stream]
		t.Run(name+"/compacting turn", func(t *testing.T) {
			opts := fakeupstream.Options{Answer: answerPort}
			h := newMsgRecallHarness(t, opts, nil)
			p := params(append(msgRecallHistory(), userText("Which port?")), compactEdit(50_000, false))
			msg, events, err := sendMessages(t, h, context.Background(), p, stream, recallSession)
			if err != nil {
				t.Fatal(err)
			}
			checkRecallTurn(t, h, opts, 0, msg, events, true)
		})
		t.Run(name+"/after the compaction", func(t *testing.T) {
			h := newMsgRecallHarness(t, fakeupstream.Options{}, nil)
			ctx := context.Background()
			hist := append(msgRecallHistory(), userText("what next?"))
			first, _, err := sendMessages(t, h, ctx, params(hist, compactEdit(50_000, false)), false, recallSession)
			if err != nil {
				t.Fatal(err)
			}
			checkCompaction(t, first, 2)
			before := len(h.upstream(dialect.Messages))
			next := append(append(hist, first.ToParam()), userText(recallAsk))
			var raw *http.Response
			msg, events, err := sendMessages(t, h, ctx, params(next, compactEdit(50_000, false)), stream, option.WithResponseInto(&raw))
			if err != nil {
				t.Fatal(err)
			}
			if id := raw.Header.Get("Request-Id"); !strings.HasPrefix(id, "req_") {
				t.Errorf("request-id = %q, want the upstream's", id)
			}
			checkRecallTurn(t, h, fakeupstream.Options{}, before, msg, events, false)
		})
	}
}

// A client with a tool of its own named like compactd's keeps it: compactd offers nothing, and
// the call is the client's.
func TestMessagesRecallClientToolOfTheSameName(t *testing.T) {
	h := newMsgHarness(t, withArchive(t, nil))
	p := params(append(msgRecallHistory(), userText(recallAsk)), compactEdit(50_000, false))
	p.Tools = []anthropic.BetaToolUnionParam{{OfTool: &anthropic.BetaToolParam{Name: "compactd_recall", Description: anthropic.String("the client's own"),
		InputSchema: anthropic.BetaToolInputSchemaParam{Properties: map[string]any{"query": map[string]any{"type": "string"}}}}}}
	msg, err := h.ant.Beta.Messages.New(context.Background(), p, recallSession)
	if err != nil {
		t.Fatal(err)
	}
	up := h.upstream(dialect.Messages)
	if len(up) != 1 {
		t.Fatalf("%d upstream calls, want 1: compactd must not run recall rounds", len(up))
	}
	if tools := gjson.GetBytes(up[0].Body, "tools").Array(); len(tools) != 1 || tools[0].Get("description").Str != "the client's own" {
		t.Errorf("upstream tools = %s, want only the client's", gjson.GetBytes(up[0].Body, "tools").Raw)
	}
	if last := msg.Content[len(msg.Content)-1]; last.Type != "tool_use" || last.Name != "compactd_recall" || msg.StopReason != "tool_use" {
		t.Errorf("the client's own tool call did not reach it: %s", msg.RawJSON())
	}
}

// A model that keeps calling the tool gets MaxRounds answers; the round after is offered the tool
// (the history holds calls of it) with tool_choice none, and answers.
func TestMessagesRecallMaxRounds(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "sse"}[stream], func(t *testing.T) {
			h := newMsgHarness(t, withArchive(t, func(c *proxy.Config) { c.Recall.MaxRounds = 2 }))
			ask := `[[call-always:compactd_recall {"query":"ZETA-PLANT port"}]] Which port?`
			p := params(append(msgRecallHistory(), userText(ask)), compactEdit(50_000, false))
			msg, events, err := sendMessages(t, h, context.Background(), p, stream, recallSession)
			if err != nil {
				t.Fatal(err)
			}
			up := h.upstream(dialect.Messages)
			if len(up) != 3 {
				t.Fatalf("%d upstream calls, want 3 (two recall rounds, then the answer)", len(up))
			}
			for i, r := range up {
				choice := gjson.GetBytes(r.Body, "tool_choice.type").Str
				if offered := gjson.GetBytes(r.Body, `tools.#(name=="compactd_recall")`).Exists(); !offered || (choice == "none") != (i == 2) {
					t.Errorf("round %d: tool offered %v, tool_choice %q; want it offered, with none on the last round only", i, offered, choice)
				}
			}
			last := msg.Content[len(msg.Content)-1]
			if last.Type != "text" || msg.StopReason != "end_turn" || len(msg.Usage.Iterations) != 4 {
				t.Errorf("final message %s, iterations %s", msg.RawJSON(), msg.Usage.JSON.Iterations.Raw())
			}
			for _, raw := range append(events, msg.RawJSON()) {
				if sawRecall(raw) {
					t.Errorf("the client saw the recall tool: %.300s", raw)
				}
			}
		})
	}
}

// When the client goes away during a recall round, the upstream request of that round is
// cancelled and no further round starts.
func TestMessagesRecallClientCancelCancelsUpstream(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "sse"}[stream], func(t *testing.T) {
			var target atomic.Pointer[url.URL]
			var calls atomic.Int32
			blocked, cancelled := make(chan struct{}), make(chan struct{})
			gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body := new(bytes.Buffer)
				_, _ = body.ReadFrom(r.Body)
				if strings.Contains(body.String(), `"tool_result"`) && strings.Contains(body.String(), "Verbatim excerpts") {
					calls.Add(1)
					close(blocked) // the second round: hold it until the client is gone
					<-r.Context().Done()
					close(cancelled)
					return
				}
				r.ContentLength = int64(body.Len())
				r.Body = readCloser{bytes.NewReader(body.Bytes())}
				httputil.NewSingleHostReverseProxy(target.Load()).ServeHTTP(w, r)
			}))
			defer gate.Close()
			gu, _ := url.Parse(gate.URL)
			h := newMsgRecallHarness(t, fakeupstream.Options{Answer: answerPort}, func(c *proxy.Config) { c.AnthropicUpstream = gu })
			up, _ := url.Parse(h.upURL)
			target.Store(up)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p := params(append(msgRecallHistory(), userText("Which port?")), compactEdit(50_000, false))
			done := make(chan error, 1)
			go func() {
				_, _, err := sendMessages(t, h, ctx, p, stream, recallSession)
				done <- err
			}()
			select {
			case <-blocked:
			case err := <-done:
				t.Fatalf("the turn ended before its second round: %v", err)
			}
			cancel()
			select {
			case <-cancelled:
			case <-time.After(10 * time.Second):
				t.Fatal("the upstream round was not cancelled after the client went away")
			}
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("client error = %v, want context.Canceled", err)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("%d second rounds started, want 1", n)
			}
		})
	}
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// After compactd answered Claude Code's own compaction (archiving the session), the turns of that
// session carry no compaction block, only Claude Code's continuation message with compactd's
// summary; recall is offered over the session's archive, proven by the summary's signed reference.
func TestMessagesRecallAfterAgentCompaction(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "sse"}[stream], func(t *testing.T) {
			h := newMsgHarness(t, withArchive(t, nil))
			ctx := context.Background()
			hdr := option.WithHeader("X-Claude-Code-Session-Id", sessionID)
			sum, err := h.ant.Messages.New(ctx, agentParams(ccPrompt), hdr)
			if err != nil {
				t.Fatal(err)
			}
			summary := sum.Content[0].Text
			if !strings.Contains(summary, "compactd_recall") {
				t.Fatalf("the agent summary does not point at the recall tool:\n%s", summary)
			}
			cont := "This session is being continued from a previous conversation that ran out of context.\n\nSummary:\n" + summary
			p := anthropic.BetaMessageNewParams{Model: antModel, MaxTokens: 2000, Messages: []anthropic.BetaMessageParam{
				userText(cont), userText(`What was the port? [[call:compactd_recall {"query":"SECRET_FACT_PORT"}]]`)}}
			msg, events, err := sendMessages(t, h, ctx, p, stream, hdr)
			if err != nil {
				t.Fatal(err)
			}
			up := h.upstream(dialect.Messages)
			if len(up) != 2 {
				t.Fatalf("%d upstream calls, want 2 (recall round + answer)", len(up))
			}
			if !strings.Contains(msg.Content[0].Text, agentFact) || len(msg.Content) != 1 {
				t.Errorf("answer = %s, want the fact recalled from the session's archive", msg.RawJSON())
			}
			for _, raw := range append(events, msg.RawJSON()) {
				if sawRecall(raw) {
					t.Errorf("the client saw the recall tool: %.300s", raw)
				}
			}
			// count_tokens of the session's turn is not a recall turn: forwarded byte for byte.
			ct := mustJSON(t, map[string]any{"model": antModel, "messages": []map[string]any{{"role": "user", "content": cont}},
				"context_management": map[string]any{"edits": []map[string]any{{"type": "clear_thinking_20251015", "keep": "all"}}}})
			req, _ := http.NewRequest(http.MethodPost, h.proxyURL+"/v1/messages/count_tokens", bytes.NewReader(ct))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Claude-Code-Session-Id", sessionID)
			if resp, err := http.DefaultClient.Do(req); err != nil {
				t.Fatal(err)
			} else {
				resp.Body.Close()
			}
			if cts := h.upstream(fakeupstream.KindCountTokens); len(cts) != 1 || !bytes.Equal(cts[0].Body, ct) {
				t.Errorf("count_tokens of the session was not forwarded byte for byte: %d requests", len(cts))
			}
			// The proof is the signed reference in compactd's note, not the session header: the
			// same continuation with the reference cut out is offered nothing, header or not.
			ref := summary[strings.Index(summary, "cref1."):]
			ref = ref[:strings.IndexAny(ref, ") \n")]
			cut := p
			cut.Messages = []anthropic.BetaMessageParam{userText(strings.ReplaceAll(cont, ref, "")), p.Messages[1]}
			if _, _, err := sendMessages(t, h, ctx, cut, stream, hdr); err != nil {
				t.Fatal(err)
			}
			up = h.upstream(dialect.Messages)
			if len(up) != 3 || gjson.GetBytes(up[2].Body, "tools").Exists() {
				t.Errorf("%d upstream calls, tools %s: a turn without the signed reference got the recall tool", len(up), gjson.GetBytes(up[len(up)-1].Body, "tools").Raw)
			}
		})
	}
}

// scriptedAnthropic is a Messages upstream that answers round i with rounds[i] (raw content
// blocks), in JSON or in Anthropic's SSE, and records the request bodies.
type scriptedAnthropic struct {
	rounds [][]string
	mu     sync.Mutex
	bodies [][]byte
}

func (s *scriptedAnthropic) requests() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies
}

func (s *scriptedAnthropic) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body := new(bytes.Buffer)
	_, _ = body.ReadFrom(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, body.Bytes())
	blocks := s.rounds[min(len(s.bodies), len(s.rounds))-1]
	s.mu.Unlock()
	stop := "end_turn"
	for _, b := range blocks {
		if gjson.Get(b, "type").Str == "tool_use" {
			stop = "tool_use"
		}
	}
	usage := `{"input_tokens":100,"output_tokens":10,"cache_creation_input_tokens":5,"cache_read_input_tokens":50}`
	msg := `{"id":"msg_s","type":"message","role":"assistant","model":"claude-fake","content":[` + strings.Join(blocks, ",") +
		`],"stop_reason":"` + stop + `","stop_sequence":null,"usage":` + usage + `}`
	if !gjson.GetBytes(body.Bytes(), "stream").Bool() {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(msg))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	ev := func(name, data string) { _, _ = w.Write([]byte("event: " + name + "\ndata: " + data + "\n\n")) }
	start, _ := sjson.Set(msg, "content", []any{})
	start, _ = sjson.Set(start, "stop_reason", nil)
	ev("message_start", `{"type":"message_start","message":`+start+`}`)
	for i, b := range blocks {
		idx := strconv.Itoa(i)
		blk := gjson.Parse(b)
		empty := b
		delta := ""
		switch blk.Get("type").Str {
		case "text":
			empty, _ = sjson.Set(b, "text", "")
			delta = `{"type":"text_delta","text":` + blk.Get("text").Raw + `}`
		case "thinking":
			empty, _ = sjson.Set(b, "thinking", "")
			empty, _ = sjson.Set(empty, "signature", "")
			delta = `{"type":"thinking_delta","thinking":` + blk.Get("thinking").Raw + `}`
		case "tool_use":
			empty, _ = sjson.SetRaw(b, "input", "{}")
			in, _ := json.Marshal(blk.Get("input").Raw)
			delta = `{"type":"input_json_delta","partial_json":` + string(in) + `}`
		}
		ev("content_block_start", `{"type":"content_block_start","index":`+idx+`,"content_block":`+empty+`}`)
		ev("content_block_delta", `{"type":"content_block_delta","index":`+idx+`,"delta":`+delta+`}`)
		if sig := blk.Get("signature"); sig.Exists() {
			ev("content_block_delta", `{"type":"content_block_delta","index":`+idx+`,"delta":{"type":"signature_delta","signature":`+sig.Raw+`}}`)
		}
		ev("content_block_stop", `{"type":"content_block_stop","index":`+idx+`}`)
	}
	ev("ping", `{"type":"ping"}`)
	ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"`+stop+`","stop_sequence":null},"usage":`+usage+`}`)
	ev("message_stop", `{"type":"message_stop"}`)
}

// A round that calls the recall tool beside one of the client's tools, after thinking and text:
// the thinking and the text reach the client (streamed live), the client's call does not — the
// model is asked again with the recall result, and the history it gets holds the round's
// thinking (rebuilt whole from the stream, signature included), text and recall call, but not
// the client's call, which has no result.
func TestMessagesRecallBesideAClientToolCall(t *testing.T) {
	const (
		thinking = `{"type":"thinking","thinking":"The summary lacks the port.","signature":"sig-abc"}`
		text     = `{"type":"text","text":"Let me check."}`
		read     = `{"type":"tool_use","id":"toolu_read","name":"Read","input":{"file_path":"config.yaml"}}`
		recall   = `{"type":"tool_use","id":"toolu_rec","name":"compactd_recall","input":{"query":"ZETA-PLANT port"}}`
		answer   = `{"type":"text","text":"The port is 8443."}`
	)
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "sse"}[stream], func(t *testing.T) {
			up := &scriptedAnthropic{rounds: [][]string{{thinking, text, read, recall}, {answer}}}
			ts := httptest.NewServer(up)
			defer ts.Close()
			u, _ := url.Parse(ts.URL)
			h := newMsgRecallHarness(t, fakeupstream.Options{}, func(c *proxy.Config) { c.AnthropicUpstream = u })
			p := params(append(msgRecallHistory(), userText("Which port?")), compactEdit(50_000, false))
			msg, events, err := sendMessages(t, h, context.Background(), p, stream, recallSession)
			if err != nil {
				t.Fatal(err)
			}
			bodies := up.requests()
			if len(bodies) != 2 {
				t.Fatalf("%d upstream rounds, want 2", len(bodies))
			}
			msgs := gjson.GetBytes(bodies[1], "messages").Array()
			asst, res := msgs[len(msgs)-2], msgs[len(msgs)-1]
			var got []string
			for _, b := range asst.Get("content").Array() {
				got = append(got, b.Raw)
			}
			if want := []string{thinking, text, recall}; !reflect.DeepEqual(canonical(t, got), canonical(t, want)) {
				t.Errorf("history of the recall round = %v, want %v", got, want)
			}
			if rs := res.Get("content").Array(); len(rs) != 1 || rs[0].Get("tool_use_id").Str != "toolu_rec" || !strings.Contains(rs[0].Get("content").Str, plantedFact) {
				t.Errorf("tool results = %s, want the recall's only", res.Raw)
			}
			var types []string
			for _, b := range msg.Content {
				types = append(types, b.Type)
			}
			if want := []string{"compaction", "thinking", "text", "text"}; !reflect.DeepEqual(types, want) ||
				msg.Content[1].Signature != "sig-abc" || msg.Content[2].Text != "Let me check." || msg.Content[3].Text != "The port is 8443." ||
				msg.StopReason != "end_turn" {
				t.Errorf("client message = %s, want %v", msg.RawJSON(), want)
			}
			for _, raw := range append(events, msg.RawJSON()) {
				if sawRecall(raw) || strings.Contains(raw, "toolu_read") {
					t.Errorf("the client saw a tool call of the hidden round: %.300s", raw)
				}
			}
			if msg.Usage.InputTokens != 200 || msg.Usage.OutputTokens != 20 || msg.Usage.CacheReadInputTokens != 100 || msg.Usage.CacheCreationInputTokens != 10 {
				t.Errorf("usage = %s, want two rounds summed", msg.Usage.RawJSON())
			}
		})
	}
}

// canonical re-marshals JSON values so that member order does not matter.
func canonical(t *testing.T, raws []string) []string {
	t.Helper()
	out := make([]string, len(raws))
	for i, r := range raws {
		var v any
		if err := json.Unmarshal([]byte(r), &v); err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		b, _ := json.Marshal(v)
		out[i] = string(b)
	}
	return out
}

// A Messages recall turn (the compacting turn of a conversation with an archive) meets every
// broken upstream of TestUpstreamBrokenResponses the same way: valid JSON, a 502 in Anthropic's
// dialect, or the stream's closing error event — never a broken 200.
func TestUpstreamBrokenMessagesRecall(t *testing.T) {
	for i := range brokenCases {
		c := &brokenCases[i]
		t.Run(c.name, func(t *testing.T) {
			if c.capped {
				t.Cleanup(proxy.SetRewriteCapForTest(4 << 10))
			}
			if c.eventCapped {
				t.Cleanup(proxy.SetEventCapForTest(4 << 10))
			}
			up := brokenUpstream(t, c, &messagesFixture)
			h := newHarness(t, fakeupstream.Options{}, withArchive(t, func(cfg *proxy.Config) { cfg.AnthropicUpstream = up }))
			resp := brokenTurn(t, h, "messages", c.stream)
			body := new(bytes.Buffer)
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if n := len(h.upstream(fakeupstream.KindSummary)); n == 0 {
				t.Fatal("the turn did not compact")
			}
			checkBrokenAnswer(t, "messages", c, resp, body.Bytes())
		})
	}
}
