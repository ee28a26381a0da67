package fakeupstream

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/compactd/compactd/internal/dialect"
)

func anthropicClient(base string, opts ...option.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]option.RequestOption{
		option.WithBaseURL(base),
		option.WithAPIKey("sk-ant-test"),
		option.WithHTTPClient(httpClient()),
		option.WithMaxRetries(0),
	}, opts...)...)
}

func userParams(texts ...string) anthropic.MessageNewParams {
	p := anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 1024}
	for i, t := range texts {
		if i%2 == 0 {
			p.Messages = append(p.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock(t)))
		} else {
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(anthropic.NewTextBlock(t)))
		}
	}
	return p
}

func TestMessagesNew(t *testing.T) {
	_, base := start(t, Options{})
	client := anthropicClient(base)
	cases := []struct {
		texts []string
		want  string
	}{
		{[]string{"hello claude"}, "MOCK-REPLY 1: hello claude"},
		{[]string{"first", "ok", "second"}, "MOCK-REPLY 2: second"},
	}
	for _, tc := range cases {
		msg, err := client.Messages.New(context.Background(), userParams(tc.texts...))
		if err != nil {
			t.Fatal(err)
		}
		if len(msg.Content) != 1 || msg.Content[0].Text != tc.want {
			t.Errorf("content %+v, want %q", msg.Content, tc.want)
		}
		if !strings.HasPrefix(msg.ID, "msg_") || msg.StopReason != "end_turn" || string(msg.Model) != "claude-test" ||
			msg.Usage.InputTokens < 1 || msg.Usage.OutputTokens < 1 || !msg.Usage.JSON.CacheReadInputTokens.Valid() {
			t.Errorf("message %+v", msg)
		}
	}
}

func TestMessagesStreaming(t *testing.T) {
	for _, deltas := range []int{1, 4, 9} {
		s, base := start(t, Options{Deltas: deltas})
		client := anthropicClient(base)
		stream := client.Messages.NewStreaming(context.Background(), userParams("stream this answer"))
		msg := anthropic.Message{}
		var types []string
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			if err := msg.Accumulate(ev); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(msg.Content) != 1 || msg.Content[0].Text != "MOCK-REPLY 1: stream this answer" {
			t.Errorf("accumulated %+v", msg.Content)
		}
		if msg.StopReason != "end_turn" || msg.Usage.OutputTokens < 2 || msg.Usage.InputTokens < 1 {
			t.Errorf("stop %q usage %+v", msg.StopReason, msg.Usage)
		}
		// The SDK hides ping; every other event must carry its own name on the event: line.
		want := "message_start,content_block_start" + strings.Repeat(",content_block_delta", deltas) +
			",content_block_stop,message_delta,message_stop"
		if got := strings.Join(types, ","); got != want {
			t.Errorf("deltas=%d events\n got %s\nwant %s", deltas, got, want)
		}
		if r := s.Requests(); len(r) != 1 || r[0].Kind != dialect.Messages {
			t.Errorf("log %+v", r)
		}
	}
}

func TestMessagesToolUse(t *testing.T) {
	_, base := start(t, Options{})
	client := anthropicClient(base)
	p := userParams(`run it [[call:bash {"command":"make test"}]]`)
	msg, err := client.Messages.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	tu := msg.Content[0]
	if tu.Type != "tool_use" || tu.Name != "bash" || string(tu.Input) != `{"command":"make test"}` ||
		msg.StopReason != "tool_use" || !strings.HasPrefix(tu.ID, "toolu_") {
		t.Fatalf("tool use %+v stop %q", tu, msg.StopReason)
	}

	stream := client.Messages.NewStreaming(context.Background(), p)
	acc := anthropic.Message{}
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	var in map[string]string
	if err := json.Unmarshal(acc.Content[0].Input, &in); err != nil || in["command"] != "make test" {
		t.Errorf("streamed input %s (%v)", acc.Content[0].Input, err)
	}

	// With the tool result appended, the model answers in text.
	p.Messages = append(p.Messages,
		anthropic.NewAssistantMessage(anthropic.NewToolUseBlock(tu.ID, map[string]string{"command": "make test"}, "bash")),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock(tu.ID, "ok", false)))
	msg, err = client.Messages.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Content[0].Type != "text" || !strings.HasPrefix(msg.Content[0].Text, "MOCK-REPLY 3: run it") {
		t.Errorf("after tool result: %+v", msg.Content)
	}
}

func TestCountTokensAndErrorsThroughSDK(t *testing.T) {
	s, base := start(t, Options{})
	client := anthropicClient(base)
	text := strings.Repeat("word ", 400) // 2000 bytes -> ~500 tokens
	n, err := client.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{
		Model:    "claude-test",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n.InputTokens < 450 || n.InputTokens > 550 {
		t.Errorf("count_tokens = %d, want about 500", n.InputTokens)
	}
	if r := s.Requests(); r[0].Kind != KindCountTokens {
		t.Errorf("kind %q", r[0].Kind)
	}

	client = anthropicClient(base, option.WithHeader(HeaderStatus, "529"))
	_, err = client.Messages.New(context.Background(), userParams("hi"))
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 529 || !strings.Contains(apiErr.RawJSON(), `"overloaded_error"`) {
		t.Fatalf("err = %v", err)
	}

	client = anthropicClient(base, option.WithHeader(HeaderCut, "2"))
	stream := client.Messages.NewStreaming(context.Background(), userParams("hi"))
	got := 0
	for stream.Next() {
		got++
	}
	if got != 2 || stream.Err() == nil {
		t.Errorf("cut after 2: %d events, err %v", got, stream.Err())
	}
}

// The Messages fake's tool behaviour for compactd's recall tests: it calls the recall tool on a
// directive, answers from the tool_result (quoting it), honours tool_choice none, and with
// call-always keeps calling after results; JSON and SSE alike.
func TestMessagesRecallBehaviour(t *testing.T) {
	_, base := start(t, Options{})
	client := anthropicClient(base)
	recallTool := anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "compactd_recall",
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"query": map[string]any{"type": "string"}}}}}
	withResult := func(ask, name, result string) anthropic.MessageNewParams {
		p := userParams(ask)
		p.Tools = []anthropic.ToolUnionParam{recallTool}
		p.Messages = append(p.Messages,
			anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("toolu_1", map[string]string{"query": "port"}, name)),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_1", result, false)))
		return p
	}
	none := func(p anthropic.MessageNewParams) anthropic.MessageNewParams {
		p.ToolChoice = anthropic.ToolChoiceUnionParam{OfNone: &anthropic.ToolChoiceNoneParam{}}
		return p
	}
	cases := []struct {
		name     string
		p        anthropic.MessageNewParams
		wantTool string // a tool_use of this name, else text
		wantText string // contained in the text
		notText  string
	}{
		{"directive calls the tool", userParams(`port? [[call:compactd_recall {"query":"port"}]]`), "compactd_recall", "", ""},
		{"answers from the recall result", withResult(`port? [[call:compactd_recall {"query":"port"}]]`, "compactd_recall", "[1] port: 8443"),
			"", "Recalled with compactd_recall: [1] port: 8443", ""},
		{"other tools' results are not quoted", withResult("port?", "bash", "secret output"), "", "MOCK-REPLY", "secret output"},
		{"tool_choice none answers", none(userParams(`port? [[call:compactd_recall {"query":"port"}]]`)), "", "MOCK-REPLY", ""},
		{"call-always calls after a result", withResult(`port? [[call-always:compactd_recall {"query":"port"}]]`, "compactd_recall", "r"),
			"compactd_recall", "", ""},
		{"call-always yields to tool_choice none", none(withResult(`port? [[call-always:compactd_recall {"query":"port"}]]`, "compactd_recall", "r")),
			"", "Recalled with compactd_recall: r", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				var msg *anthropic.Message
				if stream {
					s := client.Messages.NewStreaming(context.Background(), tc.p)
					msg = &anthropic.Message{}
					for s.Next() {
						if err := msg.Accumulate(s.Current()); err != nil {
							t.Fatal(err)
						}
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
				} else {
					var err error
					if msg, err = client.Messages.New(context.Background(), tc.p); err != nil {
						t.Fatal(err)
					}
				}
				b := msg.Content[0]
				if tc.wantTool != "" {
					if b.Type != "tool_use" || b.Name != tc.wantTool || msg.StopReason != "tool_use" {
						t.Errorf("stream=%v: %s, want a tool_use of %s", stream, msg.RawJSON(), tc.wantTool)
					}
					continue
				}
				if b.Type != "text" || !strings.Contains(b.Text, tc.wantText) || (tc.notText != "" && strings.Contains(b.Text, tc.notText)) ||
					msg.StopReason != "end_turn" {
					t.Errorf("stream=%v: %s, want text with %q", stream, msg.RawJSON(), tc.wantText)
				}
			}
		})
	}
}
