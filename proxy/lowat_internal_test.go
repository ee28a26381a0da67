//go:build linux

package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"
)

// TestLowatMark: the mark is raised for a large body still to come, never above what is left
// less half of lowatMin, 1 for the body's last lowatMin, and 1 again when done.
func TestLowatMark(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	l := &lowat{conn: rc, cur: 1}
	mark := func() int {
		var v int
		_ = rc.Control(func(fd uintptr) { v, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT) })
		return v
	}
	for _, step := range []struct{ left, want int }{
		{2 << 20, lowatMax},
		{1 << 20, lowatMax},
		{lowatMax, lowatMax - lowatMin/2},
		{300 << 10, 300<<10 - lowatMin/2},
		{lowatMin + 1, lowatMin/2 + 1},
		{lowatMin, 1},
		{10, 1},
	} {
		l.before(step.left)
		if got := mark(); got != step.want {
			t.Fatalf("%d bytes to come: mark %d, want %d", step.left, got, step.want)
		}
	}
	l.cur = 1
	l.before(2 << 20)
	l.done()
	if got := mark(); got != 1 {
		t.Fatalf("after done: mark %d, want 1", got)
	}
}

// lowatFront is compactd in front of an upstream that records bodies, served with ConnContext as
// serve sets it, and a raw connection to it with a guard deadline (a read held back would hang;
// a guard, not a measurement).
func lowatFront(t *testing.T) (*earlyUpstream, net.Conn) {
	t.Helper()
	up := &earlyUpstream{}
	s, _, _ := newTestServer(t, up, func(c *Config) { c.EarlyForwardBytes = 0 })
	front := httptest.NewUnstartedServer(s)
	front.Config.ConnContext = ConnContext
	front.Start()
	t.Cleanup(front.Close)
	conn, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	return up, conn
}

// TestLowatSlowClient: with ConnContext set, a large body that arrives in small pieces with
// pauses is read whole, byte for byte, and the next request on the same connection is answered
// (the mark is back to 1), all within a guard deadline (a read waiting for bytes that never come
// would hang).
func TestLowatSlowClient(t *testing.T) {
	up, conn := lowatFront(t)
	br := bufio.NewReader(conn)
	for i, pieces := range []int{100 << 10, 7 << 10} {
		body := turnBody(i, "")
		fmt.Fprintf(conn, "POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
		for off := 0; off < len(body); off += pieces {
			if _, err := conn.Write(body[off:min(off+pieces, len(body))]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		got, _ := up.counts()
		if len(got) != i+1 || !bytes.Equal(got[i], body) {
			t.Fatalf("request %d: the upstream has %d bodies, the last the client's: %v", i, len(got), len(got) > i && bytes.Equal(got[i], body))
		}
	}
	// A small request after them: a mark left raised would hold its headers back.
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// TestLowatClientCloses: a client that sends part of a large body and closes its side wakes the
// read at once (the mark does not hold a shut-down connection's read back): the request ends,
// with an answer or the connection closed, well before the guard deadline, and nothing reaches
// the upstream.
func TestLowatClientCloses(t *testing.T) {
	up, conn := lowatFront(t)
	body := bytes.Repeat([]byte("x"), 2<<20)
	fmt.Fprintf(conn, "POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	if _, err := conn.Write(body[:300<<10]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the server is reading, with the mark raised
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatalf("the request did not end after the client closed its side: %v", err)
	}
	if got, _ := up.counts(); len(got) != 0 {
		t.Fatalf("the upstream got %d bodies from a request cut short", len(got))
	}
}
