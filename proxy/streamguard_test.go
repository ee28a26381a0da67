package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"

	"github.com/compactd/compactd/internal/dialect/responses"
	"github.com/compactd/compactd/internal/turn"
	"github.com/compactd/compactd/internal/turn/turntest"
	"github.com/tidwall/gjson"
)

// brokenBody yields data, then err.
type brokenBody struct {
	r   io.Reader
	err error
}

func (b *brokenBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, b.err
	}
	return n, err
}

func (b *brokenBody) Close() error { return nil }

func guardedResponse(ctx context.Context, body string, err error) *http.Response {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://upstream/v1/responses", nil)
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Request: req,
		Body: &brokenBody{r: iotest.HalfReader(strings.NewReader(body)), err: err}}
	guardResponses(resp, false)
	return resp
}

func TestStreamGuard(t *testing.T) {
	created := "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\"}}\n\n"
	delta := "event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"hi\"}\r\n\r\n"
	completed := "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"output\":[]}}\n\n"
	partial := "event: response.output_text.delta\ndata: {\"type\":\"response.outp"
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		body    string
		err     error
		want    string // the events that must come through, byte for byte, first
		failSeq int    // sequence number of the closing error event; -1 for none
		readErr error
	}{
		{name: "complete", body: created + delta + completed, err: io.EOF, want: created + delta + completed, failSeq: -1},
		{name: "trailing bytes after terminal", body: created + completed + ": bye", err: io.EOF, want: created + completed + ": bye", failSeq: -1},
		{name: "cut mid-event", body: created + delta + partial, err: io.ErrUnexpectedEOF, want: created + delta, failSeq: 2},
		{name: "reset between events", body: created, err: syscall.ECONNRESET, want: created, failSeq: 1},
		{name: "clean EOF before terminal", body: created + delta, err: io.EOF, want: created + delta, failSeq: 2},
		{name: "nothing at all", body: "", err: io.EOF, want: "", failSeq: 0},
		{name: "client gone", ctx: cancelled, body: created + partial, err: context.Canceled, want: created, failSeq: -1, readErr: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			resp := guardedResponse(ctx, tt.body, tt.err)
			out, err := io.ReadAll(resp.Body)
			if !errors.Is(err, tt.readErr) {
				t.Fatalf("read error %v, want %v", err, tt.readErr)
			}
			if !bytes.HasPrefix(out, []byte(tt.want)) {
				t.Fatalf("output does not start with the whole events:\n got %q\nwant %q", out, tt.want)
			}
			rest := out[len(tt.want):]
			if tt.failSeq < 0 {
				if len(rest) > 0 {
					t.Fatalf("unexpected bytes after the stream: %q", rest)
				}
				return
			}
			evs := sseEvents(t, rest)
			if len(evs) != 2 || evs[0].Get("type").Str != "error" || evs[0].Get("code").Str != "upstream_stream_interrupted" ||
				evs[0].Get("sequence_number").Int() != int64(tt.failSeq) || evs[1].Get("type").Str != "response.failed" ||
				evs[1].Get("sequence_number").Int() != int64(tt.failSeq+1) {
				t.Fatalf("closing events wrong: %q", rest)
			}
		})
	}
}

func TestStreamGuardMessages(t *testing.T) {
	req, _ := http.NewRequest(http.MethodPost, "http://upstream/v1/messages", nil)
	start := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n"
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Request: req,
		Body: &brokenBody{r: strings.NewReader(start + "event: content_block_delta\ndata: {\"ty"), err: io.ErrUnexpectedEOF}}
	f := messagesFlight(t, false)
	guardTurn(resp, dialectAnthropic, f, dialectAnthropic.Terminal, false)
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	evs := sseEvents(t, out)
	if len(evs) != 2 || evs[1].Get("type").Str != "error" || evs[1].Get("error.type").Str != "api_error" {
		t.Fatalf("stream = %q", out)
	}
}

// A Chat Completions stream ends normally at [DONE]; cut before it, it ends with an error chunk
// the openai SDKs report as a stream error; complete, it passes byte for byte.
func TestStreamGuardChat(t *testing.T) {
	req, _ := http.NewRequest(http.MethodPost, "http://upstream/v1/chat/completions", nil)
	chunk := "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
	for _, tc := range []struct {
		name   string
		stream string
		cut    bool
	}{
		{"complete", chunk + "data: [DONE]\n\n", false},
		{"cut before [DONE]", chunk, true},
		{"cut mid-chunk", chunk + "data: {\"id\":", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Request: req,
				Body: &brokenBody{r: strings.NewReader(tc.stream), err: io.EOF}}
			f := chatFlight(t)
			guardTurn(resp, dialectChat, f, dialectChat.Terminal, false)
			out, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.cut {
				if string(out) != tc.stream {
					t.Fatalf("a complete stream was changed: %q", out)
				}
				return
			}
			if !strings.HasPrefix(string(out), chunk) || !strings.Contains(string(out), `"error":{`) || strings.Contains(string(out), "[DONE]") {
				t.Fatalf("stream = %q, want the chunk, then an error chunk and no [DONE]", out)
			}
		})
	}
}

func BenchmarkStreamGuard(b *testing.B) {
	stream, _ := turntest.ResponsesStream(b, 200)
	req, _ := http.NewRequest(http.MethodPost, "http://upstream/v1/responses", nil)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Request: req,
			Body: io.NopCloser(bytes.NewReader(stream))}
		guardResponses(resp, false)
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
	}
}

// An upstream event over the cap ends the stream with the dialect's error event, whether the
// guard validates or not and whether a rewriter sits on it: memory stays bounded by one event
// (the rewriter used to collect an enormous line whole; the guard passed it on in pieces).
func TestStreamGuardOversizedEvent(t *testing.T) {
	defer SetEventCapForTest(4 << 10)()
	huge := "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"" + strings.Repeat("x", 8<<10) + "\"}\n\n"
	created := "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\"}}\n\n"
	completed := "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"output\":[]}}\n\n"
	start := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n"
	hugeMsg := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + strings.Repeat("x", 8<<10) + "\"}}\n\n"
	stop := "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	for _, tc := range []struct {
		name     string
		messages bool
		validate bool
		rewriter bool
	}{
		{"responses pass-through", false, false, false},
		{"responses validated", false, true, false},
		{"responses rewriter", false, true, true},
		{"messages pass-through", true, false, false},
		{"messages rewriter", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, body, first := "/v1/responses", created+huge+completed, created
			if tc.messages {
				path, body, first = "/v1/messages", start+hugeMsg+stop, start
			}
			req, _ := http.NewRequest(http.MethodPost, "http://upstream"+path, nil)
			resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Request: req,
				Body: io.NopCloser(iotest.HalfReader(strings.NewReader(body)))}
			if tc.messages {
				f := messagesFlight(t, tc.rewriter)
				guardTurn(resp, dialectAnthropic, f, dialectAnthropic.Terminal, tc.validate)
				if tc.rewriter {
					resp.Body = f.rw.Events(resp.Body)
				}
			} else {
				f := responsesFlight(t, tc.rewriter)
				guardTurn(resp, dialectOpenAI, f, dialectOpenAI.Terminal, tc.validate)
				if tc.rewriter {
					resp.Body = f.rw.Events(resp.Body)
				}
			}
			out, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.rewriter && !bytes.HasPrefix(out, []byte(first)) || bytes.Contains(out, []byte("xxxx")) {
				t.Fatalf("the events before did not pass, or the oversized one did: %.300q", out)
			}
			evs := sseEvents(t, out)
			last := evs[len(evs)-1]
			switch {
			case tc.messages:
				if last.Get("type").Str != "error" || last.Get("error.type").Str != "api_error" || !strings.Contains(last.Get("error.message").Str, "larger than") {
					t.Fatalf("stream ends with %s", last.Raw)
				}
			default:
				e := evs[len(evs)-2]
				if e.Get("type").Str != "error" || e.Get("code").Str != "upstream_response_invalid" || !strings.Contains(e.Get("message").Str, "larger than") ||
					last.Get("type").Str != "response.failed" || e.Get("sequence_number").Int() != 1 && !tc.rewriter {
					t.Fatalf("stream ends with %s %s", e.Raw, last.Raw)
				}
			}
		})
	}
}

// guardResponses guards resp as the pipeline guards a streamed Responses turn that compacted
// nothing.
func guardResponses(resp *http.Response, validate bool) {
	tr, _ := responses.Adapter{}.Parse(&turn.Env{Front: parseOnly{}, Header: http.Header{}}, []byte(`{"model":"m","input":"hi","stream":true}`))
	guardTurn(resp, dialectOpenAI, &flight{t: tr, rw: tr.Rewriter()}, dialectOpenAI.Terminal, validate)
}

func sseEvents(t *testing.T, body []byte) []gjson.Result { return turntest.SSEData(t, body) }
