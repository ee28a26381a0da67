package summarizer

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
)

// call is one request the fake summariser received.
type call struct {
	Path   string
	Header http.Header
	Body   []byte
}

// instructions returns the system prompt of the call in any API.
func (c call) instructions() string {
	switch {
	case strings.HasSuffix(c.Path, "/chat/completions"):
		return gjson.GetBytes(c.Body, "messages.0.content").String()
	case strings.HasSuffix(c.Path, "/messages"):
		return gjson.GetBytes(c.Body, "system.0.text").String()
	}
	return gjson.GetBytes(c.Body, "instructions").String()
}

// input returns the single user message of the call in any API.
func (c call) input() string {
	switch {
	case strings.HasSuffix(c.Path, "/chat/completions"):
		return gjson.GetBytes(c.Body, "messages.1.content").String()
	case strings.HasSuffix(c.Path, "/messages"):
		return gjson.GetBytes(c.Body, "messages.0.content.0.text").String()
	}
	return gjson.GetBytes(c.Body, "input.0.content").String()
}

// conversation returns the text inside the <conversation> wrapper.
func (c call) conversation() string {
	in := c.input()
	i := strings.Index(in, "<conversation>\n")
	j := strings.LastIndex(in, "\n</conversation>")
	if i < 0 || j < i {
		return ""
	}
	return in[i+len("<conversation>\n") : j]
}

// fake is an OpenAI- and Anthropic-compatible summariser bound to 127.0.0.1. It records every request and
// answers with reply, which gets the 0-based call number.
type fake struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls []call
}

func newFake(t testing.TB, reply func(n int, c call, w http.ResponseWriter, r *http.Request)) *fake {
	t.Helper()
	f := &fake{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c := call{Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
		f.mu.Lock()
		n := len(f.calls)
		f.calls = append(f.calls, c)
		f.mu.Unlock()
		reply(n, c, w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) recorded() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// config returns a Config pointing at the fake.
func (f *fake) config(api dialect.Name) Config {
	return Config{BaseURL: f.srv.URL + "/v1", API: api, HTTPClient: f.srv.Client()}
}

// reply writes a successful answer in the wire format of the API the request was sent to.
func reply(w http.ResponseWriter, c call, model, text string, u Usage) {
	switch {
	case strings.HasSuffix(c.Path, "/chat/completions"):
		writeChat(w, model, text, "stop", u)
	case strings.HasSuffix(c.Path, "/messages"):
		// The package's usage counts cache reads in InputTokens (Anthropic's input_tokens does
		// not): split them back out so the result adds up to u.
		writeMessage(w, model, text, "end_turn", Usage{
			InputTokens: u.InputTokens - u.CachedTokens, CachedTokens: u.CachedTokens,
			OutputTokens: u.OutputTokens, ReasoningTokens: u.ReasoningTokens})
	default:
		writeResponse(w, model, text, "", u)
	}
}

// writeMessage writes a Messages API response object (a thinking block first, which the
// summariser must skip, when there is text). u.InputTokens is Anthropic's input_tokens,
// u.CachedTokens its cache_read_input_tokens.
func writeMessage(w http.ResponseWriter, model, text, stop string, u Usage) {
	content := []any{}
	if text != "" {
		content = append(content,
			map[string]any{"type": "thinking", "thinking": "not the summary", "signature": "sig"},
			map[string]any{"type": "text", "text": text, "citations": nil})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": "msg_0123", "type": "message", "role": "assistant", "model": model, "content": content,
		"stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{
			"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": u.CachedTokens,
			"output_tokens_details": map[string]any{"thinking_tokens": u.ReasoningTokens},
		},
	})
}

// writeResponse writes a Responses API response object. incomplete, when set, is the
// incomplete_details.reason and makes the status "incomplete".
func writeResponse(w http.ResponseWriter, model, text, incomplete string, u Usage) {
	output := []any{}
	if text != "" {
		output = append(output, map[string]any{
			"type": "message", "id": "msg_0123", "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}},
		})
	}
	status, details := "completed", any(nil)
	if incomplete != "" {
		status, details = "incomplete", map[string]any{"reason": incomplete}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": "resp_0123", "object": "response", "created_at": 1741476542, "status": status,
		"error": nil, "incomplete_details": details, "model": model, "output": output,
		"parallel_tool_calls": true, "previous_response_id": nil, "store": false,
		"temperature": 1.0, "top_p": 1.0, "tool_choice": "auto", "tools": []any{}, "truncation": "disabled",
		"text":      map[string]any{"format": map[string]any{"type": "text"}},
		"reasoning": map[string]any{"effort": nil, "summary": nil},
		"usage": map[string]any{
			"input_tokens": u.InputTokens, "input_tokens_details": map[string]any{"cached_tokens": u.CachedTokens},
			"output_tokens": u.OutputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
			"total_tokens": u.TotalTokens,
		},
		"user": nil, "metadata": map[string]any{},
	})
}

// writeChat writes a Chat Completions response object.
func writeChat(w http.ResponseWriter, model, text, finish string, u Usage) {
	writeJSON(w, http.StatusOK, map[string]any{
		"id": "chatcmpl-0123", "object": "chat.completion", "created": 1741476542, "model": model,
		"choices": []any{map[string]any{
			"index": 0, "logprobs": nil, "finish_reason": finish,
			"message": map[string]any{"role": "assistant", "content": text, "refusal": nil, "annotations": []any{}},
		}},
		"usage": map[string]any{
			"prompt_tokens": u.InputTokens, "completion_tokens": u.OutputTokens, "total_tokens": u.TotalTokens,
			"prompt_tokens_details":     map[string]any{"cached_tokens": u.CachedTokens, "audio_tokens": 0},
			"completion_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens, "audio_tokens": 0},
		},
		"service_tier": "default", "system_fingerprint": "fp_0123",
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
