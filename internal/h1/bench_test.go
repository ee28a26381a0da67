package h1

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkRoundTrip: one small turn (a 2 KB body, a 1 KB answer) at a time over a kept-alive
// loopback connection, compactd's client against net/http's Transport. The upstream is in the
// same process, so the figure is both sides' CPU; compare the two, not the absolute time.
func BenchmarkRoundTrip(b *testing.B) {
	answer := bytes.Repeat([]byte("a"), 1<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(answer)
	}))
	defer srv.Close()
	body := bytes.Repeat([]byte("b"), 2<<10)
	for _, tc := range []struct {
		name string
		rt   func() http.RoundTripper
	}{
		{"h1", func() http.RoundTripper { return New(&http.Transport{}) }},
		{"net-http", func() http.RoundTripper { return &http.Transport{} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rt := tc.rt()
			defer rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/responses", nil)
				req.Body, req.ContentLength = newMemBody(body), int64(len(body))
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
