package chat

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/turn"
	"github.com/compactd/compactd/internal/turn/turntest"
)

// overTurn is a turn that went past the threshold (its compaction asked for).
func overTurn(t *testing.T, committed bool) (*Turn, turn.Rewriter) {
	t.Helper()
	h := turntest.NewHarness(t, Adapter{})
	tr := parse(t, h.Env, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	_ = tr.Compaction(h.Env, 1, true)
	tr.Stream().Committed = committed
	return tr, tr.Rewriter()
}

// The answer of a Chat turn past the threshold passes as the upstream wrote it: nothing is
// injected, in JSON or in the stream; only a stream compactd committed is rewritten at all (the
// upstream's failure reported inside it), and a lost answer never costs the client anything it
// holds.
func TestRewriter(t *testing.T) {
	for _, committed := range []bool{false, true} {
		_, rw := overTurn(t, committed)
		if rw.Rewrites() != committed || rw.Carries() {
			t.Errorf("committed=%v: Rewrites %v, Carries %v", committed, rw.Rewrites(), rw.Carries())
		}
		if sv, ok := rw.(turn.StreamValidation); !ok || sv.ValidatesEvents() {
			t.Errorf("committed=%v: the stream of a Chat answer is validated", committed)
		}
		if rw.Events(io.NopCloser(strings.NewReader("data: [DONE]\n\n"))) != nil {
			t.Errorf("committed=%v: Events wraps the stream", committed)
		}
		in := []byte(`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}`)
		if out, why := rw.JSON(in); why != "" || !sameSlice(out, in) {
			t.Errorf("committed=%v: JSON = %s, %q", committed, out, why)
		}
	}
}

// An upstream error on a committed stream is one error chunk (the openai SDKs' decoders end the
// stream with an error on it), with the upstream's own message and code when it sent an OpenAI
// envelope, and no [DONE] after it.
func TestUpstreamErrorChunk(t *testing.T) {
	_, rw := overTurn(t, true)
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"OpenAI envelope", 429, `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`,
			`data: {"error":{"message":"slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}` + "\n\n"},
		{"not JSON", 502, `<html>bad gateway</html>`,
			`data: {"error":{"message":"upstream answered HTTP 502","type":"server_error","param":null,"code":null}}` + "\n\n"},
		{"JSON without an error", 500, `{"detail":"x"}`,
			`data: {"error":{"message":"upstream answered HTTP 500","type":"server_error","param":null,"code":null}}` + "\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rw.UpstreamError(tc.status, []byte(tc.body))
			if string(got) != tc.want {
				t.Fatalf("UpstreamError\n got %q\nwant %q", got, tc.want)
			}
			if !(Adapter{}).Terminal(bytes.TrimSpace(bytes.TrimPrefix(got, []byte("data:")))) {
				t.Error("the error chunk is not terminal")
			}
		})
	}
}

// Pinned bytes of what compactd writes into a Chat stream itself.
func TestStreamBytes(t *testing.T) {
	if got := string((Adapter{}).KeepAlive(true)) + string((Adapter{}).KeepAlive(false)); got != ": compactd is compacting the conversation\n\n: compactd is compacting the conversation\n\n" {
		t.Errorf("keep-alives = %q", got)
	}
	got := Adapter{}.FaultEvent(turn.UpstreamInterrupted(), &turn.Stream{Streamed: true, Committed: true, Seq: 3})
	want := `data: {"error":{"message":"the upstream API's stream ended before its answer was complete; retry the request","type":"server_error","param":null,"code":"` + fault.CodeUpstreamInterrupted + `"}}` + "\n\n"
	if string(got) != want {
		t.Errorf("FaultEvent\n got %q\nwant %q", got, want)
	}
	if ev := (Adapter{}).Fault(&fault.Fault{Kind: fault.RateLimited, Code: fault.CodeCompactionBusy, Message: "m"}); gjson.GetBytes(ev.Body(), "error.type").Str != "requests" {
		t.Errorf("Fault body = %s", ev.Body())
	}
}

func TestTerminal(t *testing.T) {
	for _, tc := range []struct {
		data string
		want bool
	}{
		{"[DONE]", true},
		{`{"error":{"message":"x"}}`, true},
		{`{"id":"c","error":null}`, true}, // an error member, whatever it holds: what the SDKs check
		{`{"id":"c","choices":[{"delta":{"content":"[DONE]"}}]}`, false},
		{`{"id":"c","choices":[],"usage":{"total_tokens":3}}`, false},
		{"", false},
		{"[DONE] ", false}, // the guard trims; Terminal sees trimmed data only
		{`"error"`, false},
	} {
		if got := (Adapter{}).Terminal([]byte(tc.data)); got != tc.want {
			t.Errorf("Terminal(%q) = %v, want %v", tc.data, got, tc.want)
		}
	}
}

// brokenBody is a stream that ends with err.
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

// guard guards resp as the front guards a turn's stream (proxy's guardTurn): to the adapter's
// terminal, validated when the rewriter rewrites and validates, ended with its fault event; a
// turn without a rewriter is held to the event cap only.
func guard(resp *http.Response, tr *Turn, rw turn.Rewriter) {
	a := Adapter{}
	if rw == nil {
		relay.Guard(resp, relay.GuardOptions{CapOnly: true, Fail: func(_ int, why string) []byte {
			return a.FaultEvent(turn.UpstreamInvalid(a.Words(), false, why), nil)
		}})
		return
	}
	validate := rw.Rewrites()
	if sv, ok := rw.(turn.StreamValidation); ok {
		validate = validate && sv.ValidatesEvents()
	}
	relay.Guard(resp, relay.GuardOptions{Terminal: a.Terminal, Validate: validate, Fail: func(_ int, why string) []byte {
		e := turn.UpstreamInterrupted()
		if why != "" {
			e = turn.UpstreamInvalid(a.Words(), rw.Carries(), why)
		}
		return a.FaultEvent(e, tr.Stream())
	}})
}

// A Chat Completions stream of a turn past the threshold ends normally at [DONE]; cut before
// it, it ends with an error chunk the openai SDKs report as a stream error; complete, it passes
// byte for byte — on a committed stream too, whose events are not validated (nothing splices
// into them). Below the threshold only the event cap holds: a cut stream ends as it ended.
// (Moved from proxy's TestStreamGuardChat.)
func TestStreamGuard(t *testing.T) {
	req, _ := http.NewRequest(http.MethodPost, "http://upstream/v1/chat/completions", nil)
	chunk := "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
	garbled := "data: {not json\n\n"
	for _, tc := range []struct {
		name   string
		stream string
		over   bool // past the threshold: the turn has a rewriter
		commit bool
		cut    bool
	}{
		{"complete", chunk + "data: [DONE]\n\n", true, false, false},
		{"complete, committed", chunk + "data: [DONE]\n\n", true, true, false},
		{"cut before [DONE]", chunk, true, false, true},
		{"cut before [DONE], committed", chunk, true, true, true},
		{"cut mid-chunk", chunk + "data: {\"id\":", true, false, true},
		{"not JSON, committed", chunk + garbled + "data: [DONE]\n\n", true, true, false},
		{"not JSON", chunk + garbled + "data: [DONE]\n\n", true, false, false},
		{"below the threshold, cut", chunk, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := turntest.NewHarness(t, Adapter{})
			tr := parse(t, h.Env, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			if tc.over {
				_ = tr.Compaction(h.Env, 1, true)
			}
			tr.Stream().Committed = tc.commit
			resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Request: req,
				Body: &brokenBody{r: strings.NewReader(tc.stream), err: io.EOF}}
			guard(resp, tr, tr.Rewriter())
			out, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.cut {
				if string(out) != tc.stream {
					t.Fatalf("stream changed: %q", out)
				}
				return
			}
			if !strings.HasPrefix(string(out), chunk) || !strings.Contains(string(out), `"code":"`+fault.CodeUpstreamInterrupted+`"`) || strings.Contains(string(out), "[DONE]") {
				t.Fatalf("stream = %q, want the chunk, then an error chunk and no [DONE]", out)
			}
		})
	}
}
