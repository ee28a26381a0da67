package h1

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// server is a loopback listener whose connections are served by a handler of the test's own,
// byte by byte: what an upstream sends, and when it closes, is the test's to choose.
type server struct {
	ln       net.Listener
	accepted atomic.Int32
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func newServer(t *testing.T, handle func(n int, c net.Conn)) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(s.accepted.Add(1))
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				handle(n, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *server) url() string { return "http://" + s.ln.Addr().String() }

// serveHTTP answers every request on a connection with answer (status 200 and body, or a raw
// response of its own when raw is set), keeping the connection open between them; each request
// read, body included, goes to got.
func serveHTTP(got chan<- *http.Request, answer func(r *http.Request) string) func(int, net.Conn) {
	return func(_ int, c net.Conn) {
		br := bufio.NewReader(c)
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			if got != nil {
				got <- r
			}
			if _, err := io.WriteString(c, answer(r)); err != nil {
				return
			}
		}
	}
}

// ok200 is a keep-alive 200 answer with body.
func ok200(body string) string {
	return "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// memBody is a request body held in memory, as compactd's forwards are: a BodyWriter.
type memBody struct {
	bytes.Reader
	writes int // WriteBodyTo calls
}

func newMemBody(b []byte) *memBody {
	m := &memBody{}
	m.Reset(b)
	return m
}

func (m *memBody) Close() error { return nil }

func (m *memBody) WriteBodyTo(w io.Writer, n int64) (int64, error) {
	m.writes++
	return io.CopyN(w, &m.Reader, n)
}

// post is a request to url with a body in memory, replayable.
func post(t *testing.T, url string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Body, req.ContentLength = newMemBody(body), int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return newMemBody(body), nil }
	return req
}

// newTransport is a Transport over a fresh net/http Transport with the test's settings.
func newTransport(t *testing.T, set func(*http.Transport)) *Transport {
	t.Helper()
	std := &http.Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: time.Minute}
	if set != nil {
		set(std)
	}
	tr := New(std)
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// readAll reads resp's body and closes it.
func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return string(b)
}

// eventually waits up to 10 s for cond: a guard against a hang, not a measurement.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// onRequest is a connection handler that reads one request's head and leaves the rest (its body,
// what to answer, when to close) to f.
func onRequest(f func(c net.Conn, br *bufio.Reader)) func(int, net.Conn) {
	return func(_ int, c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		f(c, br)
	}
}

// await receives from ch, waiting up to 10 s for what: a guard against a hang, not a measurement.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
