package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
)

// brokenBody yields its reader's bytes, then err.
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

func streamResponse(ctx context.Context, body io.ReadCloser) *http.Response {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://upstream/v1/x", nil)
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Request: req, Body: body}
}

// failCall records how the guard ended a stream.
type failCall struct {
	seq int
	why string
}

// testGuard is a guard whose terminal event is {"type":"done"} and whose closing event names
// the sequence number and reason it was given.
func testGuard(resp *http.Response, validate, capOnly bool, calls *[]failCall) {
	Guard(resp, GuardOptions{
		Terminal: func(data []byte) bool { return bytes.Equal(data, []byte(`{"type":"done"}`)) },
		Fail: func(seq int, why string) []byte {
			*calls = append(*calls, failCall{seq, why})
			return []byte(fmt.Sprintf("event: error\ndata: {\"seq\":%d,\"why\":%q}\n\n", seq, why))
		},
		Validate: validate,
		CapOnly:  capOnly,
	})
}

// The guard passes whole events byte for byte and ends a broken stream with Fail's events,
// numbered on from the upstream's sequence numbers; with CapOnly it passes the stream on as the
// upstream ended it; with Validate an event that is not JSON ends it.
func TestGuard(t *testing.T) {
	first := "event: a\ndata: {\"type\":\"a\",\"sequence_number\":4}\n\n"
	crlf := "event: b\r\ndata: {\"type\":\"b\",\"sequence_number\":5}\r\n\r\n"
	done := "data: {\"type\":\"done\"}\n\n"
	garbled := "data: {\"type\":\n\n"
	partial := "event: b\ndata: {\"ty"
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name              string
		ctx               context.Context
		validate, capOnly bool
		body              string
		err               error // what the body's last read returns
		want              string
		fail              []failCall
		readErr           error
	}{
		{name: "complete", body: first + crlf + done, err: io.EOF, want: first + crlf + done},
		{name: "trailing bytes after terminal", body: first + done + ": bye", err: io.EOF, want: first + done + ": bye"},
		{name: "cut mid-event", body: first + crlf + partial, err: io.ErrUnexpectedEOF, want: first + crlf, fail: []failCall{{6, ""}}},
		{name: "reset between events", body: first, err: syscall.ECONNRESET, want: first, fail: []failCall{{5, ""}}},
		{name: "clean EOF before terminal", body: first + crlf, err: io.EOF, want: first + crlf, fail: []failCall{{6, ""}}},
		{name: "nothing at all", body: "", err: io.EOF, fail: []failCall{{0, ""}}},
		{name: "not JSON, not validating", body: first + garbled + done, err: io.EOF, want: first + garbled + done},
		{name: "not JSON, validating", validate: true, body: first + garbled + done, err: io.EOF, want: first,
			fail: []failCall{{5, "sent an event that is not valid JSON"}}},
		{name: "cap only, cut mid-event", capOnly: true, body: first + partial, err: io.EOF, want: first + partial},
		{name: "cap only, no terminal", capOnly: true, body: first + crlf, err: io.EOF, want: first + crlf},
		{name: "cap only, reset", capOnly: true, body: first, err: syscall.ECONNRESET, want: first, readErr: syscall.ECONNRESET},
		{name: "client gone", ctx: cancelled, body: first + partial, err: context.Canceled, want: first, readErr: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			resp := streamResponse(ctx, &brokenBody{r: iotest.HalfReader(strings.NewReader(tc.body)), err: tc.err})
			var calls []failCall
			testGuard(resp, tc.validate, tc.capOnly, &calls)
			out, err := io.ReadAll(resp.Body)
			if !errors.Is(err, tc.readErr) {
				t.Fatalf("read error %v, want %v", err, tc.readErr)
			}
			want := tc.want
			for _, c := range tc.fail {
				want += fmt.Sprintf("event: error\ndata: {\"seq\":%d,\"why\":%q}\n\n", c.seq, c.why)
			}
			if string(out) != want {
				t.Errorf("stream\n got %q\nwant %q", out, want)
			}
			if fmt.Sprint(calls) != fmt.Sprint(tc.fail) {
				t.Errorf("Fail called %v, want %v", calls, tc.fail)
			}
		})
	}
}

// An event over MaxEvent ends the stream with Fail's events, with CapOnly too; the events
// before it pass.
func TestGuardOversizedEvent(t *testing.T) {
	defer func(old int) { MaxEvent = old }(MaxEvent)
	MaxEvent = 4 << 10
	first := "data: {\"type\":\"a\"}\n\n"
	huge := "data: {\"type\":\"b\",\"text\":\"" + strings.Repeat("x", 8<<10) + "\"}\n\n"
	for _, capOnly := range []bool{false, true} {
		t.Run(fmt.Sprint("capOnly=", capOnly), func(t *testing.T) {
			resp := streamResponse(context.Background(), io.NopCloser(strings.NewReader(first+huge+"data: {\"type\":\"done\"}\n\n")))
			var calls []failCall
			testGuard(resp, false, capOnly, &calls)
			out, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(out), first) || strings.Contains(string(out), "xxxx") || strings.Contains(string(out), "done") {
				t.Fatalf("stream = %.200q", out)
			}
			if len(calls) != 1 || !strings.Contains(calls[0].why, "sent an event larger than the ") {
				t.Fatalf("Fail called %v", calls)
			}
		})
	}
}

// A response that is not a successful event stream is left alone.
func TestGuardLeavesOthersAlone(t *testing.T) {
	for _, resp := range []*http.Response{
		{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}},
		{StatusCode: 500, Header: http.Header{"Content-Type": {"text/event-stream"}}},
	} {
		body := io.NopCloser(strings.NewReader("x"))
		resp.Body = body
		Guard(resp, GuardOptions{Fail: func(int, string) []byte { return nil }})
		if resp.Body != body {
			t.Errorf("status %d %s: body wrapped", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
}
