package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/bench/cputime"
	"github.com/compactd/compactd/bench/workload"
	"github.com/compactd/compactd/internal/crypto"
)

// BenchmarkPassThrough is the small pass-through request of the side-by-side benchmark (a 2 KB
// Responses or Messages turn with nothing for compactd to do, and GET /v1/models) through
// compactd's whole handler as serve sets it up for production: metrics on, the access log on at
// info level (a text handler, as serve's default, into io.Discard), an in-process upstream. "bare"
// is a plain httputil.ReverseProxy over the same upstream: the floor compactd is measured against.
func BenchmarkPassThrough(b *testing.B) {
	key, _ := crypto.GenerateKey()
	ring, _ := crypto.NewKeyring(key)
	up, _ := url.Parse("http://upstream.invalid")
	s, err := New(Config{Upstream: up, AnthropicUpstream: up, Transport: cannedUpstream{}, Sealer: ring,
		Summarizer: instantSummarizer{}, Registry: NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		b.Fatal(err)
	}
	bare := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(up) },
		Transport: cannedUpstream{}, BufferPool: copyBuffers,
	}
	conn := ConnContext(context.Background(), nil) // one kept-alive connection, as serve has it
	cases := []struct {
		name, method, path string
		body               []byte
	}{
		{"Responses2KB", http.MethodPost, "/v1/responses", workload.Request(2<<10, workload.BodyOptions{})},
		{"Messages2KB", http.MethodPost, "/v1/messages", messagesBody2KB()},
		{"GETModels", http.MethodGet, "/v1/models", nil},
	}
	for _, c := range cases {
		for _, target := range []struct {
			name string
			h    http.Handler
		}{{"compactd", s}, {"bare", bare}} {
			b.Run(c.name+"/"+target.name, func(b *testing.B) {
				b.ReportAllocs()
				c0 := cputime.Process()
				for b.Loop() {
					var body io.Reader = http.NoBody
					if c.body != nil {
						body = bytes.NewReader(c.body)
					}
					req := httptest.NewRequestWithContext(conn, c.method, c.path, body)
					if c.body != nil {
						req.Header.Set("Content-Type", "application/json")
					}
					w := deadlineRecorder{httptest.NewRecorder()}
					target.h.ServeHTTP(w, req)
					if w.Code != http.StatusOK {
						b.Fatalf("status %d: %s", w.Code, w.Body)
					}
				}
				cputime.Report(b, c0)
			})
		}
	}
}

// messagesBody2KB is a Messages request of about 2 KB that carries nothing compactd acts on.
func messagesBody2KB() []byte {
	b, _ := json.Marshal(map[string]any{
		"model": "claude-sonnet-4-5", "max_tokens": 1024,
		"messages": []map[string]any{{"role": "user", "content": strings.Repeat("The build failed on step three. ", 50)}},
	})
	return b
}

// deadlineRecorder is a ResponseRecorder that takes read and write deadlines as net/http's
// connections do, so the gate arms and lifts the body's deadline, and the response writer its
// write deadline, as in production, instead of building the "not supported" error a bare
// recorder makes them build.
type deadlineRecorder struct{ *httptest.ResponseRecorder }

func (deadlineRecorder) SetReadDeadline(time.Time) error  { return nil }
func (deadlineRecorder) SetWriteDeadline(time.Time) error { return nil }
