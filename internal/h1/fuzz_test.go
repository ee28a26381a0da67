package h1

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// FuzzAnswer: whatever an upstream sends back, a round trip ends (an error, or an answer whose
// body reads to an end) without a panic, within the header limit.
func FuzzAnswer(f *testing.F) {
	for _, seed := range []string{
		ok200("hello"),
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"HTTP/1.0 200 OK\r\n\r\nuntil close",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
		"garbage",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, answer string) {
		tr := New(&http.Transport{MaxResponseHeaderBytes: 4 << 10, ResponseHeaderTimeout: 5 * time.Second})
		defer tr.CloseIdleConnections()
		tr.std.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			client, upstream := net.Pipe()
			go func() {
				defer upstream.Close()
				if _, err := http.ReadRequest(bufio.NewReader(upstream)); err != nil {
					return
				}
				_ = upstream.SetWriteDeadline(time.Now().Add(5 * time.Second))
				io.WriteString(upstream, answer)
			}()
			return client, nil
		}
		req := post(t, "http://upstream.test/v1/responses", []byte(`{"input":"hi"}`))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return
		}
		n, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if n > int64(len(answer)) {
			t.Fatalf("read %d body bytes from an answer of %d", n, len(answer))
		}
	})
}
