package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A connection is reused for the next request once an answer was read to its end, whatever
// the answer's framing; one that must not be reused is not.
func TestConnectionReuse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		method string
		answer string
		body   string
		reused bool
	}{
		{"content-length", "POST", ok200("hello"), "hello", true},
		{"chunked", "POST", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n", "hello", true},
		{"chunked with a trailer", "POST", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n", "hello", true},
		{"no content", "POST", "HTTP/1.1 204 No Content\r\n\r\n", "", true},
		{"head", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", "", true},
		{"not modified", "GET", "HTTP/1.1 304 Not Modified\r\n\r\n", "", true},
		{"connection close", "POST", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello", "hello", false},
		{"http/1.0", "POST", "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, serveHTTP(nil, func(*http.Request) string { return tc.answer }))
			tr := newTransport(t, nil)
			for i := 0; i < 3; i++ {
				var req *http.Request
				if tc.method == "POST" {
					req = post(t, srv.url()+"/v1/responses", []byte(`{"input":"hi"}`))
				} else {
					req, _ = http.NewRequest(tc.method, srv.url()+"/v1/models", nil)
				}
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if got := readAll(t, resp); got != tc.body {
					t.Fatalf("request %d: body %q, want %q", i, got, tc.body)
				}
			}
			want := int32(3)
			if tc.reused {
				want = 1
			}
			if got := srv.accepted.Load(); got != want {
				t.Errorf("%d connections for 3 requests, want %d", got, want)
			}
		})
	}
}

// What compactd's client writes is what net/http's Transport writes, header for header and byte
// for byte of the body, but the Accept-Encoding net/http adds to decompress answers itself.
func TestWireMatchesNetHTTP(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB: past the write buffer
	for _, tc := range []struct {
		name  string
		build func(url string) *http.Request
	}{
		{"get", func(u string) *http.Request {
			r, _ := http.NewRequest("GET", u+"/v1/models?limit=2&x=%20y", nil)
			return r
		}},
		{"post small", func(u string) *http.Request {
			r := post(t, u+"/v1/responses", []byte(`{"model":"m","input":"hi"}`))
			r.Header.Set("Authorization", "Bearer sk-test")
			r.Header.Add("X-Multi", "a")
			r.Header.Add("X-Multi", "b")
			r.Header.Set("Content-Type", "application/json")
			return r
		}},
		{"post large", func(u string) *http.Request { return post(t, u+"/v1/responses", big) }},
		{"post empty", func(u string) *http.Request { r, _ := http.NewRequest("POST", u+"/v1/x", nil); return r }},
		{"delete", func(u string) *http.Request { r, _ := http.NewRequest("DELETE", u+"/v1/responses/r1", nil); return r }},
		{"user agent set", func(u string) *http.Request {
			r, _ := http.NewRequest("GET", u+"/", nil)
			r.Header.Set("User-Agent", "codex/0.171")
			return r
		}},
		{"user agent suppressed", func(u string) *http.Request {
			r, _ := http.NewRequest("GET", u+"/", nil)
			r.Header["User-Agent"] = []string{""}
			return r
		}},
		{"host override", func(u string) *http.Request {
			r, _ := http.NewRequest("GET", u+"/", nil)
			r.Host = "api.example.test"
			return r
		}},
		{"connection close", func(u string) *http.Request {
			r, _ := http.NewRequest("GET", u+"/", nil)
			r.Close = true
			return r
		}},
		{"unknown length", func(u string) *http.Request {
			r := post(t, u+"/v1/responses", []byte("streamed"))
			r.ContentLength = -1
			r.Trailer = http.Header{"X-Sum": {"1"}}
			return r
		}},
		{"zero length with a body", func(u string) *http.Request {
			r := post(t, u+"/v1/responses", []byte("surprise"))
			r.ContentLength = 0
			return r
		}},
		{"delete, zero length with a body", func(u string) *http.Request {
			r := post(t, u+"/v1/responses/r1", []byte("x"))
			r.Method, r.ContentLength = "DELETE", 0
			return r
		}},
		{"get, zero length, empty body", func(u string) *http.Request {
			r := post(t, u+"/v1/models", nil)
			r.Method, r.ContentLength = "GET", 0
			return r
		}},
		{"zero length, empty body", func(u string) *http.Request {
			r := post(t, u+"/v1/responses", nil)
			r.ContentLength = 0
			return r
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan *http.Request, 4)
			srv := newServer(t, serveHTTP(got, func(*http.Request) string { return ok200("ok") }))
			var seen [2]*http.Request
			for i, rt := range []http.RoundTripper{newTransport(t, nil), &http.Transport{}} {
				resp, err := rt.RoundTrip(tc.build(srv.url()))
				if err != nil {
					t.Fatalf("transport %d: %v", i, err)
				}
				readAll(t, resp)
				seen[i] = <-got
			}
			a, b := seen[0], seen[1]
			if a.Method != b.Method || a.RequestURI != b.RequestURI || a.Host != b.Host || a.Proto != b.Proto || a.Close != b.Close {
				t.Errorf("request line: %s %s %s host %q close %v; net/http: %s %s %s host %q close %v",
					a.Method, a.RequestURI, a.Proto, a.Host, a.Close, b.Method, b.RequestURI, b.Proto, b.Host, b.Close)
			}
			delete(b.Header, "Accept-Encoding")
			if ah, bh := headerText(a.Header), headerText(b.Header); ah != bh {
				t.Errorf("headers:\n%s\nnet/http:\n%s", ah, bh)
			}
			if !equalTE(a.TransferEncoding, b.TransferEncoding) || a.ContentLength != b.ContentLength {
				t.Errorf("framing: %v %d; net/http: %v %d", a.TransferEncoding, a.ContentLength, b.TransferEncoding, b.ContentLength)
			}
			ab, _ := io.ReadAll(a.Body)
			bb, _ := io.ReadAll(b.Body)
			if !bytes.Equal(ab, bb) {
				t.Errorf("body: %d bytes; net/http: %d", len(ab), len(bb))
			}
			if headerText(a.Trailer) != headerText(b.Trailer) {
				t.Errorf("trailer %v; net/http %v", a.Trailer, b.Trailer)
			}
		})
	}
}

func headerText(h http.Header) string {
	var b strings.Builder
	_ = h.Write(&b)
	return b.String()
}

func equalTE(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// A request net/http's Transport refuses is refused here too, before anything is sent.
func TestInvalidRequestsRefused(t *testing.T) {
	srv := newServer(t, serveHTTP(nil, func(*http.Request) string { return ok200("ok") }))
	for _, tc := range []struct {
		name string
		edit func(r *http.Request)
		want string
	}{
		{"header name", func(r *http.Request) { r.Header["Bad Name"] = []string{"x"} }, "invalid header field name"},
		{"header value", func(r *http.Request) { r.Header.Set("X-Smuggle", "a\r\nX-Other: b") }, "invalid header field value"},
		{"method", func(r *http.Request) { r.Method = "PO ST" }, "invalid method"},
		{"control byte in the target", func(r *http.Request) { r.URL.RawQuery = "a=\r\nb" }, "control character"},
		{"host", func(r *http.Request) { r.Host = "a b\r\n" }, "invalid Host"},
		{"trailer", func(r *http.Request) { r.ContentLength = -1; r.Trailer = http.Header{"Content-Length": {"1"}} }, "invalid trailer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTransport(t, nil)
			req := post(t, srv.url()+"/v1/responses", []byte("x"))
			tc.edit(req)
			_, err := tr.RoundTrip(req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			if n := srv.accepted.Load(); n != 0 {
				t.Errorf("%d connections made for a refused request", n)
			}
		})
	}
}

// A reused connection that fails before any answer (the upstream closed it as the request went
// out, past the peek) is retried on a new connection only for what may be sent twice, as
// net/http's Transport retries: an idempotent method or an idempotency key, with a body it can
// send again.
func TestRetryOnReusedConnection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(url string) *http.Request
		retry bool
	}{
		{"get", func(u string) *http.Request { r, _ := http.NewRequest("GET", u+"/v1/models", nil); return r }, true},
		{"post", func(u string) *http.Request { return post(t, u+"/v1/responses", []byte("turn")) }, false},
		{"post with an idempotency key", func(u string) *http.Request {
			r := post(t, u+"/v1/responses", []byte("turn"))
			r.Header.Set("Idempotency-Key", "k1")
			return r
		}, true},
		{"post with a key but no GetBody", func(u string) *http.Request {
			r := post(t, u+"/v1/responses", []byte("turn"))
			r.Header.Set("Idempotency-Key", "k1")
			r.GetBody = nil
			return r
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			seen := 0
			srv := newServer(t, func(n int, c net.Conn) {
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, r.Body)
					mu.Lock()
					seen++
					mu.Unlock()
					if n == 1 && i == 1 {
						return // the second request on the first connection: closed unanswered
					}
					io.WriteString(c, ok200("ok"))
				}
			})
			tr := newTransport(t, nil)
			resp, err := tr.RoundTrip(tc.build(srv.url()))
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			resp, err = tr.RoundTrip(tc.build(srv.url()))
			if tc.retry {
				if err != nil {
					t.Fatalf("not retried: %v", err)
				}
				readAll(t, resp)
			} else if err == nil {
				resp.Body.Close()
				t.Fatal("a request that must not be sent twice was retried")
			}
			mu.Lock()
			defer mu.Unlock()
			want := 2
			if tc.retry {
				want = 3
			}
			if seen != want {
				t.Errorf("the upstream saw %d requests, want %d", seen, want)
			}
		})
	}
}

// Cancelling the request's context ends a round trip at once, waiting for headers or reading the
// body, and the connection is closed, never pooled.
func TestCancel(t *testing.T) {
	for _, stage := range []string{"headers", "body"} {
		t.Run(stage, func(t *testing.T) {
			closed := make(chan struct{})
			srv := newServer(t, onRequest(func(c net.Conn, br *bufio.Reader) {
				if stage == "body" {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
				}
				io.Copy(io.Discard, br) // until compactd's side closes
				close(closed)
			}))
			tr := newTransport(t, nil)
			ctx, cancel := context.WithCancel(context.Background())
			req := post(t, srv.url()+"/v1/responses", []byte("x")).WithContext(ctx)
			res := make(chan error, 1)
			go func() {
				if stage == "headers" {
					time.AfterFunc(20*time.Millisecond, cancel)
					_, err := tr.RoundTrip(req)
					res <- err
					return
				}
				resp, err := tr.RoundTrip(req)
				if err != nil {
					res <- err
					return
				}
				time.AfterFunc(20*time.Millisecond, cancel)
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				res <- err
			}()
			err := await(t, res, "cancelling to end the round trip")
			if !errors.Is(err, context.Canceled) {
				t.Errorf("err %v, want context.Canceled", err)
			}
			await(t, closed, "the connection to close")
			if n := idleCount(tr); n != 0 {
				t.Errorf("%d idle connections after a cancelled request", n)
			}
		})
	}
}

func idleCount(tr *Transport) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.nidle
}

// Closing the body from another goroutine ends a read in progress.
func TestBodyCloseEndsRead(t *testing.T) {
	srv := newServer(t, onRequest(func(c net.Conn, br *bufio.Reader) {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nx")
		io.Copy(io.Discard, br)
	}))
	tr := newTransport(t, nil)
	resp, err := tr.RoundTrip(post(t, srv.url()+"/", []byte("x")))
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(20*time.Millisecond, func() { resp.Body.Close() })
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(resp.Body); done <- err }()
	if err := await(t, done, "Close to end the read"); err == nil {
		t.Error("a read cut short by Close reported no error")
	}
	if _, err := resp.Body.Read(make([]byte, 1)); err == nil {
		t.Error("a read after Close succeeded")
	}
}

// The wait for response headers is bounded by ResponseHeaderTimeout, with net/http's error.
func TestResponseHeaderTimeout(t *testing.T) {
	srv := newServer(t, func(n int, c net.Conn) {
		io.Copy(io.Discard, c)
	})
	tr := newTransport(t, func(s *http.Transport) { s.ResponseHeaderTimeout = 30 * time.Millisecond })
	_, err := tr.RoundTrip(post(t, srv.url()+"/", []byte("x")))
	if err == nil || !strings.Contains(err.Error(), "timeout awaiting response headers") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want net/http's response header timeout", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("err %v is not a timeout", err)
	}
}

// An upstream that stops reading a body and never answers holds the request no longer than
// ResponseHeaderTimeout.
func TestStuckWrite(t *testing.T) {
	done := make(chan struct{})
	srv := newServer(t, onRequest(func(c net.Conn, br *bufio.Reader) { // the head; the body is left unread
		<-done
	}))
	t.Cleanup(func() { close(done) }) // before the server's cleanup, which waits for this handler
	tr := newTransport(t, func(s *http.Transport) { s.ResponseHeaderTimeout = 100 * time.Millisecond })
	res := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(post(t, srv.url()+"/", bytes.Repeat([]byte("x"), 64<<20)))
		res <- err
	}()
	select {
	case err := <-res:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err %v, want the response header timeout", err)
		}
	case <-time.After(8 * time.Second): // a guard against a hang, not a measurement
		t.Fatal("a write the upstream never reads was not bounded")
	}
}

// A header timeout on a reused connection is not retried: it is no idle connection the upstream
// closed, and a second wait would double the first.
func TestTimeoutNotRetried(t *testing.T) {
	srv := newServer(t, func(n int, c net.Conn) {
		br := bufio.NewReader(c)
		for i := 0; ; i++ {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			if i == 1 {
				io.Copy(io.Discard, br) // the second request on a connection: no answer
				return
			}
			io.WriteString(c, ok200("ok"))
		}
	})
	tr := newTransport(t, func(s *http.Transport) { s.ResponseHeaderTimeout = 50 * time.Millisecond })
	get := func() (*http.Response, error) {
		req, _ := http.NewRequest("GET", srv.url()+"/v1/models", nil)
		return tr.RoundTrip(req)
	}
	resp, err := get()
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if _, err := get(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the header timeout", err)
	}
	if n := srv.accepted.Load(); n != 1 {
		t.Errorf("%d connections: the timed-out GET was sent again", n)
	}
}

// DisableKeepAlives on the Transport: every request says "Connection: close" and gets a
// connection of its own.
func TestDisableKeepAlives(t *testing.T) {
	got := make(chan *http.Request, 3)
	srv := newServer(t, serveHTTP(got, func(*http.Request) string { return ok200("ok") }))
	tr := newTransport(t, func(s *http.Transport) { s.DisableKeepAlives = true })
	for i := 0; i < 3; i++ {
		resp, err := tr.RoundTrip(post(t, srv.url()+"/", []byte("x")))
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if r := <-got; !r.Close {
			t.Errorf("request %d did not ask for the connection to close", i)
		}
	}
	if n := srv.accepted.Load(); n != 3 {
		t.Errorf("%d connections for 3 requests, want 3", n)
	}
}

// Response headers are bounded (MaxResponseHeaderBytes, net/http's 10 MiB by default): an upstream
// that sends header lines without end is cut off there.
func TestResponseHeaderLimit(t *testing.T) {
	srv := newServer(t, onRequest(func(c net.Conn, br *bufio.Reader) {
		io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := []byte("X-Filler: " + strings.Repeat("y", 1000) + "\r\n")
		for {
			if _, err := c.Write(line); err != nil {
				return
			}
		}
	}))
	tr := newTransport(t, func(s *http.Transport) { s.MaxResponseHeaderBytes = 64 << 10 })
	_, err := tr.RoundTrip(post(t, srv.url()+"/", []byte("x")))
	if err == nil || !strings.Contains(err.Error(), "exceeded 65536 bytes") {
		t.Fatalf("err %v, want the header limit", err)
	}
}

// Informational answers before the final one are skipped, and handed to the request's
// ClientTrace (the ReverseProxy passes 103 Early Hints on to its client that way); there is a
// bound on how many.
func TestInformationalAnswers(t *testing.T) {
	t.Run("passed on", func(t *testing.T) {
		srv := newServer(t, serveHTTP(nil, func(*http.Request) string {
			return "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n" + ok200("done")
		}))
		tr := newTransport(t, nil)
		var got []string
		continued := false
		trace := &httptrace.ClientTrace{
			Got100Continue: func() { continued = true },
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				got = append(got, strings.Join(h["Link"], ""))
				return nil
			},
		}
		req := post(t, srv.url()+"/", []byte("x"))
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(t, resp); resp.StatusCode != 200 || body != "done" {
			t.Errorf("%d %q, want the final answer", resp.StatusCode, body)
		}
		if !continued || len(got) != 1 || got[0] != "</a>; rel=preload" {
			t.Errorf("trace: continue %v, 1xx %q", continued, got)
		}
	})
	t.Run("too many", func(t *testing.T) {
		srv := newServer(t, serveHTTP(nil, func(*http.Request) string {
			return strings.Repeat("HTTP/1.1 103 Early Hints\r\n\r\n", 100) + ok200("done")
		}))
		_, err := newTransport(t, nil).RoundTrip(post(t, srv.url()+"/", []byte("x")))
		if err == nil || !strings.Contains(err.Error(), "1xx") {
			t.Fatalf("err %v, want too many informational answers", err)
		}
	})
}

// An upstream that answers before it has read the whole body (a 413, say) and closes: the
// answer is what the round trip returns, not the failed write.
func TestEarlyAnswer(t *testing.T) {
	srv := newServer(t, onRequest(func(c net.Conn, br *bufio.Reader) {
		io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 8\r\nConnection: close\r\n\r\ntoo big!")
		c.(*net.TCPConn).SetLinger(0) // reset: whatever else arrives fails the writer
	}))
	tr := newTransport(t, nil)
	resp, err := tr.RoundTrip(post(t, srv.url()+"/", bytes.Repeat([]byte("x"), 32<<20)))
	if err != nil {
		t.Fatalf("err %v, want the upstream's 413", err)
	}
	if body := readAll(t, resp); resp.StatusCode != 413 || body != "too big!" {
		t.Errorf("%d %q", resp.StatusCode, body)
	}
}

// Idle connections are closed after IdleConnTimeout even when no request comes to find them,
// and never more are kept than MaxIdleConnsPerHost.
func TestIdlePool(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		eof := make(chan struct{})
		srv := newServer(t, func(n int, c net.Conn) {
			serveHTTP(nil, func(*http.Request) string { return ok200("ok") })(n, c)
			close(eof)
		})
		tr := newTransport(t, func(s *http.Transport) { s.IdleConnTimeout = 30 * time.Millisecond })
		resp, err := tr.RoundTrip(post(t, srv.url()+"/", []byte("x")))
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		await(t, eof, "the idle connection to close")
		if n := idleCount(tr); n != 0 {
			t.Errorf("%d idle connections left", n)
		}
	})
	t.Run("per host", func(t *testing.T) {
		release := make(chan struct{})
		srv := newServer(t, serveHTTP(nil, func(*http.Request) string { <-release; return ok200("ok") }))
		tr := newTransport(t, func(s *http.Transport) { s.MaxIdleConnsPerHost = 2 })
		var wg sync.WaitGroup
		for i := 0; i < 5; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := tr.RoundTrip(post(t, srv.url()+"/", []byte("x")))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}()
		}
		eventually(t, "five connections", func() bool { return srv.accepted.Load() == 5 })
		close(release)
		wg.Wait()
		if n := idleCount(tr); n != 2 {
			t.Errorf("%d idle connections, want 2", n)
		}
		tr.CloseIdleConnections()
		if n := idleCount(tr); n != 0 {
			t.Errorf("%d idle connections after CloseIdleConnections", n)
		}
	})
}

// What this client does not serve goes to net/http's Transport: https, a request through a
// proxy, a protocol upgrade, and a body that streams rather than sits in memory.
func TestFallback(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tls") }))
	defer tlsSrv.Close()
	plain := newServer(t, serveHTTP(nil, func(*http.Request) string { return ok200("direct") }))
	proxied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "via proxy") }))
	defer proxied.Close()

	for _, tc := range []struct {
		name   string
		build  func() *http.Request
		proxy  bool
		direct bool
		want   string
		capped bool // the Transport caps connections a host
	}{
		{"plain in memory", func() *http.Request { return post(t, plain.url()+"/", []byte("x")) }, false, true, "direct", false},
		{"https", func() *http.Request { return post(t, tlsSrv.URL+"/", []byte("x")) }, false, false, "tls", false},
		{"proxy", func() *http.Request { return post(t, plain.url()+"/", []byte("x")) }, true, false, "via proxy", false},
		{"streamed body", func() *http.Request {
			r, _ := http.NewRequest("POST", plain.url()+"/", io.NopCloser(strings.NewReader("x")))
			r.ContentLength = 1
			return r
		}, false, false, "direct", false},
		{"upgrade", func() *http.Request {
			r, _ := http.NewRequest("GET", plain.url()+"/", nil)
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
			return r
		}, false, false, "direct", false},
		{"connections capped", func() *http.Request { return post(t, plain.url()+"/", []byte("x")) }, false, false, "direct", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTransport(t, func(s *http.Transport) {
				if tc.capped {
					s.MaxConnsPerHost = 1
				}
				s.TLSClientConfig = &tls.Config{RootCAs: tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
				if tc.proxy {
					u, _ := url.Parse(proxied.URL)
					s.Proxy = http.ProxyURL(u)
				}
			})
			req := tc.build()
			if got := tr.Direct(req); got != tc.direct {
				t.Errorf("Direct %v, want %v", got, tc.direct)
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if body := readAll(t, resp); body != tc.want {
				t.Errorf("body %q, want %q", body, tc.want)
			}
		})
	}
}

// Many requests at once on one Transport (run with -race): each gets its own answer.
func TestConcurrentRequests(t *testing.T) {
	srv := newServer(t, serveHTTP(nil, func(r *http.Request) string {
		b, _ := io.ReadAll(r.Body)
		return ok200("echo:" + string(b))
	}))
	tr := newTransport(t, func(s *http.Transport) { s.MaxIdleConnsPerHost = 4 })
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				body := strings.Repeat(string(rune('a'+g)), 1+i)
				resp, err := tr.RoundTrip(post(t, srv.url()+"/", []byte(body)))
				if err != nil {
					t.Error(err)
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != "echo:"+body {
					t.Errorf("got %q, %v; want the echo of %q", b, err, body)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A body in memory is written by its own WriteBodyTo, not copied through a buffer by reads.
func TestBodyWriterUsed(t *testing.T) {
	srv := newServer(t, serveHTTP(nil, func(*http.Request) string { return ok200("ok") }))
	tr := newTransport(t, nil)
	for _, size := range []int{10, 100 << 10} {
		req := post(t, srv.url()+"/", bytes.Repeat([]byte("z"), size))
		mb := req.Body.(*memBody)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if mb.writes != 1 {
			t.Errorf("%d bytes: WriteBodyTo called %d times, want once", size, mb.writes)
		}
	}
}

// A connection error that is the upstream's is returned as such; one on a new connection is
// not retried.
func TestUpstreamGoneNoAnswer(t *testing.T) {
	srv := newServer(t, func(n int, c net.Conn) {
		br := bufio.NewReader(c)
		http.ReadRequest(br) //nolint:errcheck // read, then close unanswered
	})
	tr := newTransport(t, nil)
	_, err := tr.RoundTrip(post(t, srv.url()+"/", []byte("x")))
	if err == nil {
		t.Fatal("no error for an upstream that closed without answering")
	}
	if n := srv.accepted.Load(); n != 1 {
		t.Errorf("%d connections: a fresh connection's failure was retried", n)
	}
}

// A Transport set up with the older Dial (no DialContext) dials through it, as net/http's does.
func TestDeprecatedDial(t *testing.T) {
	srv := newServer(t, serveHTTP(nil, func(*http.Request) string { return ok200("dialed") }))
	var dials atomic.Int32
	tr := newTransport(t, func(s *http.Transport) {
		//lint:ignore SA1019 the setting under test
		s.Dial = func(network, addr string) (net.Conn, error) {
			dials.Add(1)
			return net.Dial(network, addr)
		}
	})
	resp, err := tr.RoundTrip(post(t, srv.url()+"/", []byte("x")))
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); body != "dialed" {
		t.Errorf("body %q", body)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("Dial called %d times, want 1", n)
	}
}
