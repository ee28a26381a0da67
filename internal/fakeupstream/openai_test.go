package fakeupstream

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/compactd/compactd/internal/handoff"
)

func openaiClient(base string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(base + "/v1/"),
		option.WithAPIKey("sk-test"),
		option.WithHTTPClient(httpClient()),
		option.WithMaxRetries(0),
	}, opts...)...)
}

// items is a Responses input list sent as raw JSON, the way agents send it.
func items(raw string) option.RequestOption { return option.WithJSONSet("input", rawJSON(raw)) }

type rawJSON string

func (r rawJSON) MarshalJSON() ([]byte, error) { return []byte(r), nil }

func TestResponsesNew(t *testing.T) {
	long := strings.Repeat("abcdefghij", 10) // 100 chars: the reply quotes only 60
	cases := []struct {
		name string
		opt  option.RequestOption
		body responses.ResponseNewParams
		want string
	}{
		{"string input", nil, responses.ResponseNewParams{Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello there")}},
			"MOCK-REPLY 1: hello there"},
		{"item list, last user wins", items(`[
			{"type":"message","role":"developer","content":[{"type":"input_text","text":"be terse"}]},
			{"type":"message","role":"user","content":[{"type":"input_text","text":"first"}]},
			{"type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"ok","annotations":[]}]},
			{"role":"user","content":"second question"}]`), responses.ResponseNewParams{},
			"MOCK-REPLY 2: second question"},
		{"quotes first 60 chars", items(`[{"role":"user","content":"` + long + `"}]`), responses.ResponseNewParams{},
			"MOCK-REPLY 3: " + long[:60]},
	}
	_, base := start(t, Options{})
	client := openaiClient(base)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.body.Model = "gpt-test"
			var opts []option.RequestOption
			if tc.opt != nil {
				opts = append(opts, tc.opt)
			}
			resp, err := client.Responses.New(context.Background(), tc.body, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.OutputText(); got != tc.want {
				t.Errorf("text = %q, want %q", got, tc.want)
			}
			if !strings.HasPrefix(resp.ID, "resp_") || resp.Status != "completed" || resp.Model != "gpt-test" {
				t.Errorf("id %q status %q model %q", resp.ID, resp.Status, resp.Model)
			}
			msg := resp.Output[0].AsMessage()
			if !strings.HasPrefix(msg.ID, "msg_") || msg.Role != "assistant" || msg.Status != "completed" {
				t.Errorf("message item %+v", msg)
			}
			u := resp.Usage
			if u.InputTokens < 1 || u.OutputTokens < 1 || u.TotalTokens != u.InputTokens+u.OutputTokens ||
				!u.InputTokensDetails.JSON.CachedTokens.Valid() || !u.OutputTokensDetails.JSON.ReasoningTokens.Valid() {
				t.Errorf("usage %+v", u)
			}
		})
	}
}

func TestResponsesStreaming(t *testing.T) {
	for _, deltas := range []int{0, 1, 4, 7} {
		t.Run("deltas="+strconv.Itoa(deltas), func(t *testing.T) {
			_, base := start(t, Options{Deltas: deltas})
			client := openaiClient(base)
			stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
				Model: "gpt-test",
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("stream me please")},
			})
			defer stream.Close()
			var types []string
			var text strings.Builder
			var final responses.Response
			itemID := ""
			for stream.Next() {
				ev := stream.Current()
				if ev.SequenceNumber != int64(len(types)) {
					t.Errorf("event %d %s has sequence_number %d", len(types), ev.Type, ev.SequenceNumber)
				}
				types = append(types, ev.Type)
				switch ev.Type {
				case "response.output_item.added":
					itemID = ev.Item.ID
				case "response.output_text.delta":
					text.WriteString(ev.Delta)
					if ev.ItemID != itemID || ev.OutputIndex != 0 || ev.ContentIndex != 0 {
						t.Errorf("delta ids: item %q (want %q) output %d content %d", ev.ItemID, itemID, ev.OutputIndex, ev.ContentIndex)
					}
				case "response.completed":
					final = ev.Response
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			const want = "MOCK-REPLY 1: stream me please"
			if text.String() != want || final.OutputText() != want {
				t.Errorf("deltas %q, completed %q, want %q", text.String(), final.OutputText(), want)
			}
			n := deltas
			if n == 0 {
				n = 4
			}
			wantTypes := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
			for range n {
				wantTypes = append(wantTypes, "response.output_text.delta")
			}
			wantTypes = append(wantTypes, "response.output_text.done", "response.content_part.done",
				"response.output_item.done", "response.completed")
			if strings.Join(types, ",") != strings.Join(wantTypes, ",") {
				t.Errorf("events\n got %v\nwant %v", types, wantTypes)
			}
			if final.Status != "completed" || final.Usage.TotalTokens < 2 || !strings.HasPrefix(final.ID, "resp_") {
				t.Errorf("completed response: status %q usage %+v id %q", final.Status, final.Usage, final.ID)
			}
		})
	}
}

func TestResponsesFunctionCall(t *testing.T) {
	const ask = `[{"role":"user","content":"list files [[call:shell {\"cmd\":[\"ls\",\"-la\"]}]] please"}]`
	_, base := start(t, Options{})
	client := openaiClient(base)
	ctx := context.Background()
	params := responses.ResponseNewParams{Model: "gpt-test"}

	resp, err := client.Responses.New(ctx, params, items(ask))
	if err != nil {
		t.Fatal(err)
	}
	fc := resp.Output[0].AsFunctionCall()
	if resp.Output[0].Type != "function_call" || fc.Name != "shell" || fc.Arguments != `{"cmd":["ls","-la"]}` ||
		!strings.HasPrefix(fc.CallID, "call_") {
		t.Fatalf("function call item %+v", fc)
	}

	stream := client.Responses.NewStreaming(ctx, params, items(ask))
	var args strings.Builder
	var done responses.ResponseFunctionToolCall
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.function_call_arguments.delta":
			args.WriteString(ev.Delta)
		case "response.output_item.done":
			done = ev.Item.AsFunctionCall()
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if args.String() != fc.Arguments || done.Name != "shell" || done.Arguments != fc.Arguments {
		t.Errorf("streamed args %q, done item %+v", args.String(), done)
	}

	// Tool loop: once the output comes back, the model answers instead of calling again.
	loop := `[{"role":"user","content":"list files [[call:shell {}]]"},
		{"type":"function_call","call_id":"call_1","name":"shell","arguments":"{}"},
		{"type":"function_call_output","call_id":"call_1","output":"a.txt"}]`
	resp, err = client.Responses.New(ctx, params, items(loop))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.OutputText(); !strings.HasPrefix(got, "MOCK-REPLY 3: list files") {
		t.Errorf("after tool output: %q", got)
	}
}

func TestChatCompletions(t *testing.T) {
	_, base := start(t, Options{Deltas: 3})
	client := openaiClient(base)
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model: "gpt-test",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("be brief"),
			openai.UserMessage("what is compaction?"),
		},
	}
	cc, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if got := cc.Choices[0].Message.Content; got != "MOCK-REPLY 1: what is compaction?" {
		t.Errorf("content %q", got)
	}
	if cc.Choices[0].FinishReason != "stop" || cc.Usage.TotalTokens != cc.Usage.PromptTokens+cc.Usage.CompletionTokens {
		t.Errorf("finish %q usage %+v", cc.Choices[0].FinishReason, cc.Usage)
	}

	for _, includeUsage := range []bool{false, true} {
		p := params
		if includeUsage {
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		stream := client.Chat.Completions.NewStreaming(ctx, p)
		acc := openai.ChatCompletionAccumulator{}
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(acc.Choices[0].Message.Content, "MOCK-REPLY ") ||
			!strings.HasSuffix(acc.Choices[0].Message.Content, ": what is compaction?") {
			t.Errorf("accumulated %q", acc.Choices[0].Message.Content)
		}
		wantChunks := 1 + 3 + 1 // role, deltas, finish
		if includeUsage {
			wantChunks++
		}
		if chunks != wantChunks || (acc.Usage.TotalTokens > 0) != includeUsage {
			t.Errorf("include_usage=%v: %d chunks (want %d), usage %+v", includeUsage, chunks, wantChunks, acc.Usage)
		}
	}

	// Tool call, streamed and accumulated.
	p := params
	p.Messages = []openai.ChatCompletionMessageParamUnion{openai.UserMessage(`go [[call:get_weather {"city":"Oslo"}]]`)}
	stream := client.Chat.Completions.NewStreaming(ctx, p)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if tc := acc.Choices[0].Message.ToolCalls; len(tc) != 1 || tc[0].Function.Name != "get_weather" ||
		tc[0].Function.Arguments != `{"city":"Oslo"}` || acc.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("tool calls %+v finish %q", tc, acc.Choices[0].FinishReason)
	}
}

func TestOpenAIErrorsThroughSDK(t *testing.T) {
	_, base := start(t, Options{})
	client := openaiClient(base, option.WithHeader(HeaderStatus, "401"))
	_, err := client.Responses.New(context.Background(), responses.ResponseNewParams{
		Model: "gpt-test", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "invalid_api_key" {
		t.Fatalf("err = %v", err)
	}

	// A stream cut mid-event surfaces as a stream error after the whole events before it.
	client = openaiClient(base, option.WithHeader(HeaderCut, "3"))
	stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: "gpt-test", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	got := 0
	for stream.Next() {
		got++
	}
	if got != 3 || stream.Err() == nil {
		t.Errorf("cut after 3: got %d events, err %v", got, stream.Err())
	}
}

// TestDelayedSummaryStream: a summariser call streamed through the SDK with every delay set.
func TestDelayedSummaryStream(t *testing.T) {
	s, base := start(t, Options{FirstByteDelay: time.Millisecond, TokenDelay: time.Millisecond, SummaryDelay: time.Millisecond})
	client := openaiClient(base)
	stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model:        "summariser",
		Instructions: openai.String("summarise"),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("<conversation>\n[user] fix it\n\n[assistant] done\n</conversation>")},
	})
	var final responses.Response
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.completed" {
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "FAKE-SUMMARY: 1 user entry\nuser: \"fix it\"\nEntries: 2."; final.OutputText() != want {
		t.Errorf("summary %q, want %q", final.OutputText(), want)
	}
	if r := s.Requests(); len(r) != 1 || r[0].Kind != KindSummary {
		t.Errorf("log %+v", r)
	}
}

// The Chat fake's tool behaviour for compactd's recall tests, in the real Chat wire format: it
// calls the recall tool on a directive (tool_calls, finish_reason tool_calls), answers from the
// "tool" message of that call (quoting it), honours tool_choice "none", and with call-always
// keeps calling after results; JSON and SSE alike.
func TestChatRecallBehaviour(t *testing.T) {
	_, base := start(t, Options{Deltas: 3})
	client := openaiClient(base)
	recallTool := openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "compactd_recall",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}}})
	params := func(ask string) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{Model: "gpt-test", Tools: []openai.ChatCompletionToolUnionParam{recallTool},
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(ask)}}
	}
	withResult := func(ask, name, result string) openai.ChatCompletionNewParams {
		p := params(ask)
		call := openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
			ID: "call_1", Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: name, Arguments: `{"query":"port"}`}}}
		p.Messages = append(p.Messages,
			openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{call}}},
			openai.ToolMessage(result, "call_1"))
		return p
	}
	none := func(p openai.ChatCompletionNewParams) openai.ChatCompletionNewParams {
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
		return p
	}
	cases := []struct {
		name              string
		p                 openai.ChatCompletionNewParams
		wantTool          string // a tool call of this name, else text
		wantText, notText string // contained (not contained) in the text
	}{
		{"directive calls the tool", params(`port? [[call:compactd_recall {"query":"port"}]]`), "compactd_recall", "", ""},
		{"answers from the recall result", withResult(`port? [[call:compactd_recall {"query":"port"}]]`, "compactd_recall", "[1] port: 8443"),
			"", "Recalled with compactd_recall: [1] port: 8443", ""},
		{"other tools' results are not quoted", withResult("port?", "bash", "secret output"), "", "MOCK-REPLY", "secret output"},
		{"tool_choice none answers", none(params(`port? [[call:compactd_recall {"query":"port"}]]`)), "", "MOCK-REPLY", ""},
		{"call-always calls after a result", withResult(`port? [[call-always:compactd_recall {"query":"port"}]]`, "compactd_recall", "r"),
			"compactd_recall", "", ""},
		{"call-always yields to tool_choice none", none(withResult(`port? [[call-always:compactd_recall {"query":"port"}]]`, "compactd_recall", "r")),
			"", "Recalled with compactd_recall: r", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				var choice openai.ChatCompletionChoice
				if stream {
					s := client.Chat.Completions.NewStreaming(context.Background(), tc.p)
					acc := openai.ChatCompletionAccumulator{}
					for s.Next() {
						if !acc.AddChunk(s.Current()) {
							t.Fatalf("accumulator refused %s", s.Current().RawJSON())
						}
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
					choice = acc.Choices[0]
				} else {
					cc, err := client.Chat.Completions.New(context.Background(), tc.p)
					if err != nil {
						t.Fatal(err)
					}
					choice = cc.Choices[0]
				}
				if tc.wantTool != "" {
					if tcs := choice.Message.ToolCalls; len(tcs) != 1 || tcs[0].Function.Name != tc.wantTool ||
						tcs[0].Function.Arguments != `{"query":"port"}` || tcs[0].ID == "" || choice.FinishReason != "tool_calls" {
						t.Errorf("stream=%v: %+v (finish %q), want a call of %s", stream, choice.Message.ToolCalls, choice.FinishReason, tc.wantTool)
					}
					continue
				}
				text := choice.Message.Content
				if len(choice.Message.ToolCalls) > 0 || !strings.Contains(text, tc.wantText) || (tc.notText != "" && strings.Contains(text, tc.notText)) ||
					choice.FinishReason != "stop" {
					t.Errorf("stream=%v: %q (finish %q), want text with %q", stream, text, choice.FinishReason, tc.wantText)
				}
			}
		})
	}
}

// compactd's handoff on the Chat route is a user message after the newest user messages it kept:
// the fake reads it as context and acts on the request before it (a directive there still calls
// its tool), not on the handoff.
func TestChatHandoffIsNotTheRequest(t *testing.T) {
	_, base := start(t, Options{})
	client := openaiClient(base)
	for _, stream := range []bool{false, true} {
		p := openai.ChatCompletionNewParams{Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage(`read it [[call:read_file {"path":"a.go"}]]`),
			openai.UserMessage(handoff.Text("the summary", "")),
		}}
		var choice openai.ChatCompletionChoice
		if stream {
			s := client.Chat.Completions.NewStreaming(context.Background(), p)
			acc := openai.ChatCompletionAccumulator{}
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			choice = acc.Choices[0]
		} else {
			cc, err := client.Chat.Completions.New(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			choice = cc.Choices[0]
		}
		if tc := choice.Message.ToolCalls; len(tc) != 1 || tc[0].Function.Name != "read_file" {
			t.Errorf("stream=%v: %+v %q, want the read_file call of the request before the handoff", stream, choice.Message.ToolCalls, choice.Message.Content)
		}
	}
}
