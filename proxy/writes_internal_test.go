package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestSmallBodyOneWrite: a small turn reaches the upstream byte for byte with its request head in
// the same write (net/http sends the head of a body it does not know to be in memory in a write
// of its own), and a body past the transport's buffer in two; the next turn of the connection too.
func TestSmallBodyOneWrite(t *testing.T) {
	front, got, writes := recordingProxy(t)
	cases := []struct {
		name      string
		size      int
		maxWrites int64
	}{
		{"2 KB", 2 << 10, 1},
		{"2 KB again, same connection", 2 << 10, 1},
		{"20 KB", 20 << 10, 2},
		{"60 KB", 60 << 10, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Appendf(nil, `{"model":"m","input":[{"role":"user","content":"%s"}]}`, strings.Repeat("x", tc.size))
			if n := postCounted(t, front, got, writes, body); n == 0 || n > tc.maxWrites {
				t.Errorf("%d writes to the upstream connection, want 1 to %d", n, tc.maxWrites)
			}
		})
	}
}

// blockingLog holds every access-log record ("request") until release is closed.
type blockingLog struct {
	slog.Handler
	held    chan struct{}
	release chan struct{}
}

func (blockingLog) Enabled(context.Context, slog.Level) bool { return true }

func (h blockingLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "request" {
		h.held <- struct{}{}
		<-h.release
	}
	return nil
}

// TestAnswerSentBeforeBookkeeping: a response whose length is declared reaches the client whole
// while compactd's work after it (here the access log line, held) has not finished; one without
// a declared length (compactd's own error answers) still arrives whole once the handler returns.
func TestAnswerSentBeforeBookkeeping(t *testing.T) {
	answer := `{"id":"resp_1","object":"response","status":"completed","output":[]}`
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(answer)))
		io.WriteString(w, answer)
	})
	h := blockingLog{Handler: slog.DiscardHandler, held: make(chan struct{}, 4), release: make(chan struct{})}
	_, front, _ := newTestServer(t, up, func(c *Config) { c.Logger = slog.New(h) })
	defer close(h.release)

	done := make(chan string, 1)
	go func() {
		resp, err := http.Post(front.URL+"/v1/responses", "application/json", strings.NewReader(`{"model":"m","input":"hi"}`))
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the access log line was never written")
	}
	select {
	case got := <-done:
		if got != answer {
			t.Fatalf("client got %q, want the upstream's answer", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the answer waited for the access log line: not sent when it was complete")
	}
}

// TestObsWriterFlushesCompleteAnswers: the writer flushes exactly when a declared length has
// been written, and never for a response without one or one that announces trailers.
func TestObsWriterFlushesCompleteAnswers(t *testing.T) {
	cases := []struct {
		name    string
		header  http.Header
		writes  []string
		flushes []int // flush count after each write
	}{
		{"declared length, two writes", http.Header{"Content-Length": {"5"}}, []string{"abc", "de"}, []int{0, 1}},
		{"declared length, one write", http.Header{"Content-Length": {"3"}}, []string{"abc"}, []int{1}},
		{"no length", http.Header{}, []string{"abc", "de"}, []int{0, 0}},
		{"trailers announced", http.Header{"Content-Length": {"3"}, "Trailer": {"X-T"}}, []string{"abc"}, []int{0}},
		{"two lengths", http.Header{"Content-Length": {"3", "3"}}, []string{"abc"}, []int{0}},
		{"not a number", http.Header{"Content-Length": {"3x"}}, []string{"abc"}, []int{0}},
		{"empty body", http.Header{"Content-Length": {"0"}}, []string{""}, []int{0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
			for k, v := range tc.header {
				rec.Header()[k] = v
			}
			r := httptest.NewRequest(http.MethodPost, "/v1/responses", nil)
			ow := &obsWriter{ResponseWriter: rec, st: &reqState{id: "req_1"}, r: r}
			for i, s := range tc.writes {
				if _, err := io.WriteString(ow, s); err != nil {
					t.Fatal(err)
				}
				if rec.flushes != tc.flushes[i] {
					t.Errorf("after write %d: %d flushes, want %d", i, rec.flushes, tc.flushes[i])
				}
			}
		})
	}
}

type flushCounter struct {
	*httptest.ResponseRecorder
	flushes int
}

func (f *flushCounter) Flush() { f.flushes++; f.ResponseRecorder.Flush() }
