package proxy

import (
	"bytes"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/dialect/chat"
	"github.com/compactd/compactd/internal/dialect/messages"
	"github.com/compactd/compactd/internal/dialect/responses"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/turn"
	"github.com/compactd/compactd/internal/turn/turntest"
)

// chunkedBody hands out its bytes at most 64 KiB a read, as an upstream connection does.
type chunkedBody struct{ b []byte }

func (c *chunkedBody) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 64<<10)], c.b)
	c.b = c.b[n:]
	return n, nil
}

func (c *chunkedBody) Close() error { return nil }

// Relaying one large upstream event costs about the event, on every path a stream takes through
// compactd: the pass-through guard (Responses), the cap-only guard of Messages and Chat
// pass-through, the guard of a compacted Chat turn, and the Responses and Messages rewriters of a
// compacted turn. Measured while the event is on its way to the client (a collection, then the
// bytes live) and in all (the bytes allocated relaying it): at most 1.25× and 2.25× the event.
// The guard's reader must hold the event once (its buffer, Raw and Data were three copies,
// rounded up to a power of two), and a rewriter must splice an event it changes rather than
// rebuild it (sjson and a re-rendering were three more): 4–7× before.
func TestRelayHoldsAnEventOnce(t *testing.T) {
	const size = 20 << 20
	text := strings.Repeat("x", size)
	created := "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"output\":[]}}\n\n"
	delta := "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"output_index\":0,\"delta\":\"" + text + "\"}\n\n"
	completed := "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"output\":[]}}\n\n"
	start := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":1}}}\n\n"
	msgDelta := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + text + "\"}}\n\n"
	stop := "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	chunk := "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + text + "\"}}]}\n\n"
	done := "data: [DONE]\n\n"
	for _, tc := range []struct {
		name, path, stream string
		wrap               func(resp *http.Response)
		head               string // what the client's stream starts with, as far as the large event's text
	}{
		{"responses pass-through", "/v1/responses", created + delta + completed, func(resp *http.Response) {
			f := responsesFlight(t, false)
			guardTurn(resp, dialectOpenAI, f, dialectOpenAI.Terminal, false)
		}, created + delta[:200]},
		{"responses rewriter", "/v1/responses", created + delta + completed, func(resp *http.Response) {
			f := responsesFlight(t, true)
			guardTurn(resp, dialectOpenAI, f, dialectOpenAI.Terminal, true)
			resp.Body = f.rw.Events(resp.Body)
		}, "\"sequence_number\":3,\"output_index\":1,\"delta\":\"xxxx"},
		{"messages pass-through", "/v1/messages", start + msgDelta + stop, func(resp *http.Response) { guardPassThrough(resp, dialectAnthropic) },
			start + msgDelta[:200]},
		{"messages rewriter", "/v1/messages", start + msgDelta + stop, func(resp *http.Response) {
			f := messagesFlight(t, true)
			guardTurn(resp, dialectAnthropic, f, dialectAnthropic.Terminal, true)
			resp.Body = f.rw.Events(resp.Body)
		}, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"xxxx"},
		{"chat pass-through", "/v1/chat/completions", chunk + done, func(resp *http.Response) { guardPassThrough(resp, dialectChat) }, chunk[:200]},
		{"chat compacted", "/v1/chat/completions", chunk + done, func(resp *http.Response) {
			guardTurn(resp, dialectChat, chatFlight(t), dialectChat.Terminal, false)
		}, chunk[:200]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream := []byte(tc.stream)
			req, _ := http.NewRequest(http.MethodPost, "http://upstream"+tc.path, nil)
			var before, held, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Request: req,
				Body: &chunkedBody{stream}}
			tc.wrap(resp)
			buf := make([]byte, 32<<10) // the ReverseProxy's copy buffer
			var out, measured int
			var head, tail []byte
			for {
				n, err := resp.Body.Read(buf)
				out += n
				if len(head) < 4096 {
					head = append(head, buf[:min(n, 4096-len(head))]...)
				}
				if measured == 0 && out > size/2 {
					// Half of the large event has gone to the client: all of it is held.
					runtime.GC()
					runtime.ReadMemStats(&held)
					measured = out
				}
				if n > 0 {
					tail = append(tail[:0], buf[max(0, n-64):n]...)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(stream)
			if out < size || measured == 0 || bytes.Contains(tail, []byte(`"error"`)) || !strings.Contains(string(head), tc.head) {
				t.Fatalf("relayed %d bytes, starting %.600q, ending %q; want %q in the head", out, head, tail, tc.head)
			}
			live := float64(int64(held.HeapAlloc)-int64(before.HeapAlloc)) / size
			total := float64(after.TotalAlloc-before.TotalAlloc) / size
			t.Logf("%s: %.2f× the event live while it was relayed, %.2f× allocated", tc.name, live, total)
			if live > 1.25 {
				t.Errorf("relaying an event of %d bytes held %.2f× its size live, want at most 1.25×", size, live)
			}
			if total > 2.25 {
				t.Errorf("relaying an event of %d bytes allocated %.2f× its size, want at most 2.25×", size, total)
			}
		})
	}
}

// responsesFlight is a streamed Responses turn as the pipeline forwards it: with compacted, one
// that issued the compaction cmp_1.
func responsesFlight(t *testing.T, compacted bool) *flight {
	t.Helper()
	tr, f := responses.Adapter{}.Parse(&turn.Env{Front: parseOnly{}, Header: http.Header{}}, []byte(`{"model":"m","input":"hi","stream":true}`))
	if f != nil {
		t.Fatal(f)
	}
	if compacted {
		tr.Compacted(&engine.Compaction{ID: "cmp_1", EncryptedContent: "x"}, false)
	}
	return &flight{t: tr, rw: tr.Rewriter()}
}

// messagesFlight is a streamed Messages turn as the pipeline forwards it: with compacted, one
// that issued a compaction block.
func messagesFlight(t *testing.T, compacted bool) *flight {
	t.Helper()
	tr, f := messages.Adapter{}.Parse(&turn.Env{Front: parseOnly{}, Header: http.Header{}},
		[]byte(`{"model":"m","max_tokens":16,"stream":true,"context_management":{"edits":[{"type":"compact_20260112"}]},"messages":[{"role":"user","content":"hi"}]}`))
	if f != nil {
		t.Fatal(f)
	}
	if compacted {
		tr.Compacted(&engine.Compaction{ID: "cmp_x", Summary: "s", EncryptedContent: "cmp_x.c2VhbGVk"}, false)
	}
	rw := tr.Rewriter()
	if rw == nil {
		t.Fatal("a Messages turn with a compact edit has no rewriter")
	}
	return &flight{t: tr, rw: rw}
}

// chatFlight is a streamed Chat turn that went past the threshold, as the pipeline forwards it.
func chatFlight(t *testing.T) *flight {
	t.Helper()
	tr, f := chat.Adapter{}.Parse(&turn.Env{Front: parseOnly{}, Header: http.Header{}}, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if f != nil {
		t.Fatal(f)
	}
	tr.Compaction(turntest.NewHarness(t, chat.Adapter{}).Env, 1, true)
	return &flight{t: tr, rw: tr.Rewriter()}
}

// parseOnly is the front of a turn a test only parses: no skim cache (and nothing else: a call
// to another of the front's services fails the test with a nil dereference).
type parseOnly struct{ turn.Front }

func (parseOnly) ResumeFrom([]byte) *api.Prefix                     { return nil }
func (parseOnly) Skimmed([]byte, interface{ Prefix() *api.Prefix }) {}
