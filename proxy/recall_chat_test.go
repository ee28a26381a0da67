package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// chatRecallAsk makes the fake model call the recall tool.
const chatRecallAsk = `[[call:compactd_recall {"query":"ZETA-PLANT port"}]] Which port?`

var chatRecallSession = option.WithHeader("X-Compactd-Session", "conv-chat-recall")

// chatRecallHistory is a Chat conversation long enough to compact at 2000 tokens whose first
// tool output (a file the agent read) holds the planted fact, then ask.
func chatRecallHistory(ask string) []openai.ChatCompletionMessageParamUnion {
	h := chatHistory(4, 600)
	read := []openai.ChatCompletionMessageParamUnion{
		openai.UserMessage("read the config"),
		{OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{
			OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: "call_cfg",
				Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "shell", Arguments: `{"cmd":"cat config.yaml"}`}}}}}},
		openai.ToolMessage("server:\n  port: 8443\n  # "+plantedFact+"\n", "call_cfg"),
	}
	out := append([]openai.ChatCompletionMessageParamUnion{h[0]}, read...)
	out = append(out, h[1:len(h)-1]...)
	return append(out, openai.UserMessage(ask))
}

// chatTurn is what the client got from one Chat turn.
type chatTurn struct {
	choice openai.ChatCompletionChoice
	usage  openai.CompletionUsage
	raws   []string // the JSON answer, or every chunk
	header http.Header
}

// sendChat sends p as JSON or as a stream (with include_usage when usage is set) and returns what
// the openai-go client assembled.
func sendChat(t *testing.T, h *harness, ctx context.Context, p openai.ChatCompletionNewParams, stream, usage bool, opts ...option.RequestOption) (chatTurn, error) {
	t.Helper()
	var raw *http.Response
	opts = append(opts, option.WithResponseInto(&raw))
	var ct chatTurn
	if !stream {
		cc, err := h.client.Chat.Completions.New(ctx, p, opts...)
		if err != nil {
			return ct, err
		}
		ct.choice, ct.usage, ct.raws, ct.header = cc.Choices[0], cc.Usage, []string{cc.RawJSON()}, raw.Header
		return ct, nil
	}
	if usage {
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	s := h.client.Chat.Completions.NewStreaming(ctx, p, opts...)
	acc := openai.ChatCompletionAccumulator{}
	for s.Next() {
		ch := s.Current()
		ct.raws = append(ct.raws, ch.RawJSON())
		if !acc.AddChunk(ch) {
			t.Errorf("the openai-go accumulator refused chunk %s", ch.RawJSON())
		}
	}
	if err := s.Err(); err != nil {
		return ct, err
	}
	if len(acc.Choices) > 0 {
		ct.choice = acc.Choices[0]
	}
	ct.usage, ct.header = acc.Usage, raw.Header
	return ct, nil
}

// chatRoundUsage replays recorded upstream Chat requests against a fresh fake, as JSON, and
// returns the sums of what the rounds reported.
func chatRoundUsage(t *testing.T, opts fakeupstream.Options, recs []fakeupstream.Recorded) (prompt, completion int64) {
	t.Helper()
	fresh := fakeupstream.New(opts)
	for _, r := range recs {
		body, _ := sjson.SetBytes(r.Body, "stream", false)
		body, _ = sjson.DeleteBytes(body, "stream_options")
		rec := httptest.NewRecorder()
		fresh.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(body)))
		prompt += gjson.GetBytes(rec.Body.Bytes(), "usage.prompt_tokens").Int()
		completion += gjson.GetBytes(rec.Body.Bytes(), "usage.completion_tokens").Int()
	}
	return prompt, completion
}

// checkChatRecallTurn checks a turn that recalled once: two upstream rounds (the function tool
// offered, then the assistant's tool call and the tool message under the same id), an answer
// that carries the fact, no trace of the tool for the client, and usage summed over the rounds
// (in a stream: on the usage chunk when the client asked, else on no chunk at all).
func checkChatRecallTurn(t *testing.T, h *harness, opts fakeupstream.Options, before int, ct chatTurn, stream, usage bool) {
	t.Helper()
	up := h.upstream(dialect.Chat)[before:]
	if len(up) != 2 {
		t.Fatalf("the turn made %d upstream calls, want 2 (recall round + answer)", len(up))
	}
	tool := gjson.GetBytes(up[0].Body, `tools.#(function.name=="compactd_recall")`)
	if tool.Get("type").Str != "function" || !tool.Get("function.parameters.properties.query").Exists() {
		t.Errorf("recall tool offered as %s, want a Chat function tool", tool.Raw)
	}
	if stream && !gjson.GetBytes(up[0].Body, "stream_options.include_usage").Bool() {
		t.Error("compactd did not ask the upstream for the stream's usage")
	}
	msgs := gjson.GetBytes(up[1].Body, "messages").Array()
	call, res := msgs[len(msgs)-2], msgs[len(msgs)-1]
	if call.Get("role").Str != "assistant" || call.Get("tool_calls.0.function.name").Str != "compactd_recall" ||
		res.Get("role").Str != "tool" || res.Get("tool_call_id").Str != call.Get("tool_calls.0.id").Str || res.Get("tool_call_id").Str == "" {
		t.Fatalf("round 2 does not end with the tool call and its tool message:\n%s\n%s", call.Raw, res.Raw)
	}
	if !strings.Contains(res.Get("content").Str, plantedFact) {
		t.Errorf("the recall result lacks the planted fact: %.300s", res.Raw)
	}
	if !strings.Contains(ct.choice.Message.Content, plantedFact) || ct.choice.FinishReason != "stop" || len(ct.choice.Message.ToolCalls) != 0 {
		t.Errorf("answer %q (finish %q, %d tool calls), want the recalled fact", ct.choice.Message.Content, ct.choice.FinishReason, len(ct.choice.Message.ToolCalls))
	}
	checkNoRecallSeen(t, ct)
	prompt, completion := chatRoundUsage(t, opts, up)
	if stream && !usage {
		for _, raw := range ct.raws {
			if gjson.Get(raw, "usage").Exists() {
				t.Errorf("a chunk carries usage the client did not ask for: %.200s", raw)
			}
		}
		return
	}
	if ct.usage.PromptTokens != prompt || ct.usage.CompletionTokens != completion || ct.usage.TotalTokens != prompt+completion {
		t.Errorf("usage %d+%d=%d, want the rounds' sum %d+%d", ct.usage.PromptTokens, ct.usage.CompletionTokens, ct.usage.TotalTokens, prompt, completion)
	}
	if stream {
		if last := ct.raws[len(ct.raws)-1]; len(gjson.Get(last, "choices").Array()) != 0 || !gjson.Get(last, "usage").IsObject() {
			t.Errorf("the last chunk is not the usage chunk: %s", last)
		}
	}
}

// checkNoRecallSeen fails when the client got a tool call (the fake's answers quote the tool's
// name and result in text, which is the model's to say).
func checkNoRecallSeen(t *testing.T, ct chatTurn) {
	t.Helper()
	for _, raw := range ct.raws {
		if strings.Contains(raw, `"tool_calls"`) || strings.Contains(raw, `"name":"compactd_recall"`) || strings.Contains(raw, `"finish_reason":"tool_calls"`) {
			t.Errorf("the client saw the recall tool: %.300s", raw)
		}
	}
}

// chatAnswerPort is a fake model that reads its context: on the compacting turn the question
// sits before the handoff (the handoff is the upstream's last user message), so it looks for
// the question anywhere, answers from the planted fact when its context has it, and otherwise
// searches for it.
func chatAnswerPort(_, context string) (string, string, bool) {
	if !strings.Contains(context, "Which port?") {
		return "", "", false
	}
	if strings.Contains(context, plantedFact) {
		return "the port: " + plantedFact, "", true
	}
	return "", "ZETA-PLANT port", true
}

// compactedChat runs a first turn that compacts and returns the next turn's messages, asking ask.
func compactedChat(t *testing.T, h *harness, ask string) []openai.ChatCompletionMessageParamUnion {
	t.Helper()
	hist := chatRecallHistory("what next?")
	first, err := sendChat(t, h, context.Background(), chatParams(hist), false, false, chatRecallSession)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first.header.Get("X-Compactd-Compaction"), "compacted") {
		t.Fatal("the first turn did not compact")
	}
	return append(append(hist, openai.ChatCompletionMessageParamOfAssistant(first.choice.Message.Content)), openai.UserMessage(ask))
}

type chatMode struct {
	name          string
	stream, usage bool
}

var chatModes = []chatMode{{"json", false, false}, {"sse", true, false}, {"sse+usage", true, true}}

// Recall on Chat Completions, as the compacting turn itself and as the turn after (the memo
// applies the compaction), JSON, SSE and SSE with include_usage.
func TestChatRecall(t *testing.T) {
	for _, m := range chatModes {
		t.Run(m.name+"/compacting turn", func(t *testing.T) {
			opts := fakeupstream.Options{Answer: chatAnswerPort}
			h := newHarness(t, opts, withArchive(t, chatPolicy(2000)))
			ct, err := sendChat(t, h, context.Background(), chatParams(chatRecallHistory("Which port?")), m.stream, m.usage, chatRecallSession)
			if err != nil {
				t.Fatal(err)
			}
			if len(h.upstream(fakeupstream.KindSummary)) != 1 || !strings.HasPrefix(ct.header.Get("X-Compactd-Compaction"), "compacted") {
				t.Fatalf("the turn did not compact: %q", ct.header.Get("X-Compactd-Compaction"))
			}
			checkChatRecallTurn(t, h, opts, 0, ct, m.stream, m.usage)
		})
		t.Run(m.name+"/after the compaction", func(t *testing.T) {
			h := newHarness(t, fakeupstream.Options{}, withArchive(t, chatPolicy(2000)))
			next := compactedChat(t, h, chatRecallAsk)
			before := len(h.upstream(dialect.Chat))
			ct, err := sendChat(t, h, context.Background(), chatParams(next), m.stream, m.usage)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(h.upstream(fakeupstream.KindSummary)); n != 1 {
				t.Errorf("%d summariser calls, want 1 (the memo applies the compaction)", n)
			}
			checkChatRecallTurn(t, h, fakeupstream.Options{}, before, ct, m.stream, m.usage)
		})
	}
}

// A client with a function tool of its own named like compactd's keeps it: compactd offers
// nothing, and the call is the client's.
func TestChatRecallClientToolOfTheSameName(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, withArchive(t, chatPolicy(2000)))
	p := chatParams(chatRecallHistory(chatRecallAsk))
	p.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name: "compactd_recall", Description: openai.String("the client's own"),
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}}})}
	ct, err := sendChat(t, h, context.Background(), p, false, false, chatRecallSession)
	if err != nil {
		t.Fatal(err)
	}
	up := h.upstream(dialect.Chat)
	if len(up) != 1 {
		t.Fatalf("%d upstream calls, want 1: compactd must not run recall rounds", len(up))
	}
	if tools := gjson.GetBytes(up[0].Body, "tools").Array(); len(tools) != 1 || tools[0].Get("function.description").Str != "the client's own" {
		t.Errorf("upstream tools = %s, want only the client's", gjson.GetBytes(up[0].Body, "tools").Raw)
	}
	if tc := ct.choice.Message.ToolCalls; len(tc) != 1 || tc[0].Function.Name != "compactd_recall" || ct.choice.FinishReason != "tool_calls" {
		t.Errorf("the client's own tool call did not reach it: %s", ct.raws[0])
	}
}

// A model that keeps calling the tool gets MaxRounds answers; the round after keeps the tool
// defined with tool_choice "none", and answers.
func TestChatRecallMaxRounds(t *testing.T) {
	for _, m := range chatModes {
		t.Run(m.name, func(t *testing.T) {
			h := newHarness(t, fakeupstream.Options{}, withArchive(t, func(c *proxy.Config) {
				chatPolicy(2000)(c)
				c.Recall.MaxRounds = 2
			}))
			next := compactedChat(t, h, `[[call-always:compactd_recall {"query":"ZETA-PLANT port"}]] Which port?`)
			before := len(h.upstream(dialect.Chat))
			ct, err := sendChat(t, h, context.Background(), chatParams(next), m.stream, m.usage)
			if err != nil {
				t.Fatal(err)
			}
			up := h.upstream(dialect.Chat)[before:]
			if len(up) != 3 {
				t.Fatalf("%d upstream calls, want 3 (two recall rounds, then the answer)", len(up))
			}
			for i, r := range up {
				choice := gjson.GetBytes(r.Body, "tool_choice").Str
				if offered := gjson.GetBytes(r.Body, `tools.#(function.name=="compactd_recall")`).Exists(); !offered || (choice == "none") != (i == 2) {
					t.Errorf("round %d: tool offered %v, tool_choice %q; want it offered, with none on the last round only", i, offered, choice)
				}
			}
			if !strings.Contains(ct.choice.Message.Content, plantedFact) || ct.choice.FinishReason != "stop" {
				t.Errorf("final answer %q finish %q", ct.choice.Message.Content, ct.choice.FinishReason)
			}
			checkNoRecallSeen(t, ct)
			if m.usage {
				p, c := chatRoundUsage(t, fakeupstream.Options{}, up)
				if ct.usage.PromptTokens != p || ct.usage.CompletionTokens != c {
					t.Errorf("usage %+v, want the three rounds' %d+%d", ct.usage, p, c)
				}
			}
		})
	}
}

// When the client goes away during a recall round, the upstream request of that round is
// cancelled and no further round starts.
func TestChatRecallClientCancelCancelsUpstream(t *testing.T) {
	for _, m := range chatModes {
		t.Run(m.name, func(t *testing.T) {
			var target atomic.Pointer[url.URL]
			var calls atomic.Int32
			blocked, cancelled := make(chan struct{}), make(chan struct{})
			gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body := new(bytes.Buffer)
				_, _ = body.ReadFrom(r.Body)
				if strings.Contains(body.String(), `"role":"tool","tool_call_id"`) && strings.Contains(body.String(), "Verbatim excerpts") {
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
			h := newHarness(t, fakeupstream.Options{Answer: chatAnswerPort}, withArchive(t, func(c *proxy.Config) {
				chatPolicy(2000)(c)
				c.Upstream = gu
			}))
			up, _ := url.Parse(h.upURL)
			target.Store(up)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := sendChat(t, h, ctx, chatParams(chatRecallHistory("Which port?")), m.stream, m.usage, chatRecallSession)
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

// scriptedChat is a Chat Completions upstream that answers round i with rounds[i] (the
// assistant's text, then raw tool calls), in JSON or in chunks (a role chunk, the text, each tool
// call's head and arguments, the finish chunk, the usage chunk when asked and usage is on), with
// an id of its own per round, and records the request bodies.
type scriptedChat struct {
	rounds  []chatRound
	noUsage bool // ignore stream_options.include_usage, as some OpenAI-compatible servers do
	mu      sync.Mutex
	bodies  [][]byte
}

type chatRound struct {
	text  string
	calls []string
}

func (s *scriptedChat) requests() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies
}

func (s *scriptedChat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body := new(bytes.Buffer)
	_, _ = body.ReadFrom(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, body.Bytes())
	n := len(s.bodies)
	round := s.rounds[min(n, len(s.rounds))-1]
	s.mu.Unlock()
	id := "chatcmpl-r" + strconv.Itoa(n)
	finish := "stop"
	if len(round.calls) > 0 {
		finish = "tool_calls"
	}
	usage := `{"prompt_tokens":100,"completion_tokens":10,"total_tokens":110,"prompt_tokens_details":{"cached_tokens":40}}`
	if !gjson.GetBytes(body.Bytes(), "stream").Bool() {
		msg := `{"role":"assistant","content":` + strconv.Quote(round.text) + `,"refusal":null}`
		if len(round.calls) > 0 {
			msg, _ = sjson.SetRaw(msg, "tool_calls", "["+strings.Join(round.calls, ",")+"]")
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"` + id + `","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":` + msg +
			`,"logprobs":null,"finish_reason":"` + finish + `"}],"usage":` + usage + `}`))
		return
	}
	withUsage := gjson.GetBytes(body.Bytes(), "stream_options.include_usage").Bool() && !s.noUsage
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(delta, finish string) {
		c := `{"id":"` + id + `","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta +
			`,"logprobs":null,"finish_reason":` + finish + `}]`
		if withUsage {
			c += `,"usage":null`
		}
		_, _ = w.Write([]byte("data: " + c + "}\n\n"))
	}
	chunk(`{"role":"assistant","content":""}`, "null")
	if round.text != "" {
		chunk(`{"content":`+strconv.Quote(round.text)+`}`, "null")
	}
	for i, c := range round.calls {
		tc := gjson.Parse(c)
		head := `{"index":` + strconv.Itoa(i) + `,"id":` + tc.Get("id").Raw + `,"type":"function","function":{"name":` + tc.Get("function.name").Raw + `,"arguments":""}}`
		chunk(`{"tool_calls":[`+head+`]}`, "null")
		chunk(`{"tool_calls":[{"index":`+strconv.Itoa(i)+`,"function":{"arguments":`+tc.Get("function.arguments").Raw+`}}]}`, "null")
	}
	chunk(`{}`, `"`+finish+`"`)
	if withUsage {
		_, _ = w.Write([]byte(`data: {"id":"` + id + `","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":` + usage + "}\n\n"))
	}
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
}

// A round that says something, then calls one of the client's tools and the recall tool: the
// text reaches the client (streamed live), the client's call does not — the model is asked
// again with the recall result, and the history it gets holds the round's text and the recall
// call, not the client's call, which has no result. Every chunk carries the first round's id;
// usage is summed; an upstream that ignores include_usage ends its rounds with [DONE], and the
// client then gets no usage chunk.
func TestChatRecallBesideAClientToolCall(t *testing.T) {
	const (
		read   = `{"id":"call_read","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"config.yaml\"}"}}`
		recall = `{"id":"call_rec","type":"function","function":{"name":"compactd_recall","arguments":"{\"query\":\"ZETA-PLANT port\"}"}}`
	)
	cases := []struct {
		name                   string
		stream, usage, noUsage bool
	}{
		{"json", false, false, false},
		{"sse", true, false, false},
		{"sse+usage", true, true, false},
		{"sse+usage, upstream without usage", true, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := &scriptedChat{noUsage: tc.noUsage, rounds: []chatRound{
				{text: "Let me check.", calls: []string{read, recall}},
				{text: "The port is 8443."},
			}}
			ts := httptest.NewServer(up)
			defer ts.Close()
			u, _ := url.Parse(ts.URL)
			h := newHarness(t, fakeupstream.Options{}, withArchive(t, func(c *proxy.Config) {
				chatPolicy(2000)(c)
				c.Upstream = u
			}))
			ct, err := sendChat(t, h, context.Background(), chatParams(chatRecallHistory("Which port?")), tc.stream, tc.usage, chatRecallSession)
			if err != nil {
				t.Fatal(err)
			}
			if got := ct.choice.Message.Content; got != "Let me check.The port is 8443." || ct.choice.FinishReason != "stop" || len(ct.choice.Message.ToolCalls) != 0 {
				t.Errorf("answer %q (finish %q, %d tool calls), want the text of both rounds and no tool call", got, ct.choice.FinishReason, len(ct.choice.Message.ToolCalls))
			}
			checkNoRecallSeen(t, ct)
			reqs := up.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d upstream rounds, want 2", len(reqs))
			}
			msgs := gjson.GetBytes(reqs[1], "messages").Array()
			call, res := msgs[len(msgs)-2], msgs[len(msgs)-1]
			if call.Get("content").Str != "Let me check." || len(call.Get("tool_calls").Array()) != 1 || call.Get("tool_calls.0.id").Str != "call_rec" ||
				call.Get("tool_calls.0.function.arguments").Str != `{"query":"ZETA-PLANT port"}` ||
				res.Get("role").Str != "tool" || res.Get("tool_call_id").Str != "call_rec" || !strings.Contains(res.Get("content").Str, plantedFact) {
				t.Errorf("round 2 ends with\n%s\n%s\nwant the text and the recall call alone, then its result", call.Raw, res.Raw)
			}
			if tc.stream {
				for _, raw := range ct.raws {
					if id := gjson.Get(raw, "id").Str; id != "chatcmpl-r1" {
						t.Errorf("chunk id %q, want the first round's: %.200s", id, raw)
					}
				}
			}
			switch {
			case !tc.stream || tc.usage && !tc.noUsage:
				if ct.usage.PromptTokens != 200 || ct.usage.CompletionTokens != 20 || ct.usage.TotalTokens != 220 || ct.usage.PromptTokensDetails.CachedTokens != 80 {
					t.Errorf("usage %+v, want the two rounds' sum 200+20=220, 80 cached", ct.usage)
				}
			default:
				for _, raw := range ct.raws {
					if gjson.Get(raw, "usage").IsObject() {
						t.Errorf("a usage chunk the upstream never reported: %s", raw)
					}
				}
			}
		})
	}
}
