package proxy

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/compactd/compactd/internal/dialect/responses"
)

// TestBodyMACAdvancedWhileRead: a body the skim cache takes is hashed as it is read, each read's
// whole chunks while they are still in cache, so the cache's proof of the remembered prefix
// after the read hashes only what is left; one it does not take (too small) is not hashed, and
// the turn reads it as before.
func TestBodyMACAdvancedWhileRead(t *testing.T) {
	s, _, _ := newTestServer(t, http.NotFoundHandler(), func(c *Config) { c.EarlyForwardBytes = 0 })
	for _, tc := range []struct {
		name   string
		body   []byte
		hashed int
	}{
		{"large", turnBody(1, ""), len(turnBody(1, "")) / (64 << 10) * (64 << 10)},
		{"small", []byte(`{"model":"m","input":"hi"}`), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/responses", bytes.NewReader(tc.body))
			w := httptest.NewRecorder()
			p := &pipe{s: s, w: w, r: r, a: responses.Adapter{}}
			body, ok := s.readBody(w, r, responses.Adapter{}, p.onBodyBuffer(false))
			if !ok || !bytes.Equal(body, tc.body) {
				t.Fatalf("read %d bytes (ok %v), want the %d sent", len(body), ok, len(tc.body))
			}
			got := -1
			if p.bodyMAC != nil {
				got = p.bodyMAC.Hashed()
			}
			if got != tc.hashed {
				t.Fatalf("hashed %d bytes while reading, want %d", got, tc.hashed)
			}
		})
	}
}
