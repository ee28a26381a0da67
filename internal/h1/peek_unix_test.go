//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package h1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// An idle connection the upstream closed (its keep-alive timeout) or wrote to unasked is not
// used for the next request: a POST, which must not be sent twice, still gets its answer.
func TestIdleConnectionClosedByUpstream(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(c net.Conn) // what the upstream does after its first answer
	}{
		{"closed", func(c net.Conn) { c.Close() }},
		{"half closed", func(c net.Conn) { c.(*net.TCPConn).CloseWrite() }},
		{"unasked bytes", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var posts []string
			after := make(chan struct{})
			srv := newServer(t, func(n int, c net.Conn) {
				br := bufio.NewReader(c)
				r, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				posts = append(posts, string(b))
				mu.Unlock()
				io.WriteString(c, ok200("first"))
				tc.after(c)
				if n == 1 {
					close(after)
				}
				io.Copy(io.Discard, c) // a second request on this connection would go unanswered
			})
			tr := newTransport(t, nil)
			for i, body := range []string{"one", "two"} {
				if i == 1 {
					<-after
					// what the upstream did has reached this side (a test's own look, not alive's)
					eventually(t, "the upstream's close or bytes to arrive", func() bool { return pending(t, tr) })
				}
				resp, err := tr.RoundTrip(post(t, srv.url()+"/v1/responses", []byte(body)))
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				readAll(t, resp)
			}
			mu.Lock()
			defer mu.Unlock()
			if strings.Join(posts, ",") != "one,two" {
				t.Errorf("the upstream got %q, want each POST once", posts)
			}
		})
	}
}

// pending reports whether the pool's one idle connection has something to read (an end of
// stream or bytes), or there is none (bytes that came with the answer were in the read buffer
// when it ended, and the connection was not pooled).
func pending(t *testing.T, tr *Transport) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var idle *conn
	for _, p := range tr.hosts {
		if len(p.idle) > 0 {
			idle = p.idle[0]
		}
	}
	if idle == nil {
		return true
	}
	var b [1]byte
	got := false
	if err := idle.peek.raw.Read(func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		got = err == nil && n >= 0
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return got
}
