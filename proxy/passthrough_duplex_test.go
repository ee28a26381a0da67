package proxy_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/duplextest"
)

// A streamed pass-through body whose upstream answers (an event stream) before it has read the
// whole body: compactd must keep forwarding the rest of the body after it has sent the response
// headers on. Without full duplex, net/http's HTTP/1 server closes the request body once the
// handler writes its headers (golang/go#40747), the transport's copy of the body fails, and the
// upstream connection — with the stream on it — is torn down.
func TestPassThroughBodyAfterResponseHeaders(t *testing.T) {
	const half = 64 << 10
	up := httptest.NewServer(duplextest.Upstream())
	t.Cleanup(up.Close)
	addr := newGateProxy(t, &recorder{url: up.URL}, nil)

	for _, path := range []string{"/v1/completions", "/v1/messages/batches"} {
		t.Run(path, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second) // a guard against a hang, not a measurement
			defer cancel()
			status, got, err := duplextest.Post(ctx, http.DefaultClient, "http://"+addr+path, half)
			if want := duplextest.Done(2 * half); err != nil || !bytes.Contains(got, []byte(want)) {
				t.Errorf("status %d, stream %q, %v; want the event %s", status, got, err, want)
			}
		})
	}
}
