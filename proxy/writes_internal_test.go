package proxy

import (
	"fmt"
	"strings"
	"testing"
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
