package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A streamed pass-through body whose upstream answers (an event stream) before it has read the
// whole body: compactd must keep forwarding the rest of the body after it has sent the response
// headers on. Without full duplex, net/http's HTTP/1 server closes the request body once the
// handler writes its headers (golang/go#40747), the transport's copy of the body fails, and the
// upstream connection — with the stream on it — is torn down.
func TestPassThroughBodyAfterResponseHeaders(t *testing.T) {
	const half = 64 << 10
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "event: done\ndata: {\"read\":%d,\"err\":%q}\n\n", n, fmt.Sprint(err))
	}))
	t.Cleanup(up.Close)
	addr := newGateProxy(t, &recorder{url: up.URL}, nil)

	for _, path := range []string{"/v1/completions", "/v1/messages/batches"} {
		t.Run(path, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second) // a guard against a hang, not a measurement
			defer cancel()
			pr, pw := io.Pipe()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, pr)
			req.ContentLength = 2 * half
			headers := make(chan struct{})
			go func() {
				chunk := bytes.Repeat([]byte("x"), half)
				if _, err := pw.Write(chunk); err != nil {
					return
				}
				select { // the second half only once the response has begun
				case <-headers:
				case <-ctx.Done():
				}
				_, _ = pw.Write(chunk)
				pw.Close()
			}()
			resp, err := http.DefaultClient.Do(req)
			close(headers)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf(`{"read":%d,"err":"<nil>"}`, 2*half); err != nil || !bytes.Contains(got, []byte(want)) {
				t.Errorf("status %d, stream %q, %v; want the event %s", resp.StatusCode, got, err, want)
			}
		})
	}
}
