package proxy_test

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/proxy"
)

// When the client goes away mid-stream, compactd must cancel the upstream request rather than
// keep a model generating for nobody.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	upstreamDone := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := 0; ; i++ {
			if _, err := w.Write([]byte("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n")); err != nil {
				break
			}
			_ = rc.Flush()
			select {
			case <-r.Context().Done():
				close(upstreamDone)
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		close(upstreamDone)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	srv, err := proxy.New(proxy.Config{Upstream: u, Sealer: testRing(t, "k1"), Summarizer: failingSummarizer{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer closeServer(t, srv)
	ts := httptest.NewServer(srv)
	defer ts.Close()

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/responses", strings.NewReader(`{"model":"m","stream":true,"input":"hi"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "event:") {
		t.Fatalf("first line %q, err %v", line, err)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-upstreamDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not cancelled after the client disconnected")
	}
}
