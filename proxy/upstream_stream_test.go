package proxy

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/compactd/compactd/bench/workload"
	"github.com/compactd/compactd/internal/fakeupstream"
)

// upstreamStream returns a Responses SSE body as the fake upstream writes it, with deltas text
// deltas, and the number of events in it.
func upstreamStream(tb testing.TB, deltas int) ([]byte, int) {
	tb.Helper()
	fake := fakeupstream.New(fakeupstream.Options{Deltas: deltas, DropBodies: true})
	body := workload.Request(8<<10, workload.BodyOptions{Stream: true})
	w := httptest.NewRecorder()
	fake.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/responses", bytes.NewReader(body)))
	if w.Code != http.StatusOK {
		tb.Fatalf("fake upstream: %d %s", w.Code, w.Body)
	}
	out := w.Body.Bytes()
	return out, bytes.Count(out, []byte("\n\n"))
}
