package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/compactd/compactd/internal/api"
)

// countingConn counts the writes that reach the socket.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// countingTransport is DefaultTransport whose connections count their writes in writes.
func countingTransport(writes *atomic.Int64) *http.Transport {
	tr := DefaultTransport()
	d := &net.Dialer{}
	tr.DialContext = bulkDial(func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		return countingConn{c, writes}, err
	})
	return tr
}

// TestBulkConnWritesBodiesWhole: compactd's request bodies (whole, and spliced) reach the
// upstream byte for byte through the bulk path, in a handful of writes instead of one per 32 KiB;
// a body of another type still goes through the transport's copy.
func TestBulkConnWritesBodiesWhole(t *testing.T) {
	var got atomic.Pointer[[]byte]
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(&b)
	}))
	defer up.Close()
	var writes atomic.Int64
	tr := countingTransport(&writes)
	defer tr.CloseIdleConnections()
	body := bytes.Repeat([]byte("0123456789abcdef"), 2<<20/16)
	mid := len(body) / 2
	cases := []struct {
		name      string
		req       func(r *http.Request) *http.Request
		want      []byte
		maxWrites int64
	}{
		{"whole body", func(r *http.Request) *http.Request { return withBody(r, r.Context(), body) }, body, 4},
		{"splice", func(r *http.Request) *http.Request {
			return withSplice(r, r.Context(), api.Splice{body[:mid], []byte(`"inserted"`), body[mid:]})
		}, append(append(append([]byte{}, body[:mid]...), `"inserted"`...), body[mid:]...), 6},
		{"another body type", func(r *http.Request) *http.Request {
			out := r.Clone(r.Context())
			out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			return out
		}, body, 1 << 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, _ := http.NewRequest(http.MethodPost, up.URL+"/v1/responses", nil)
			writes.Store(0)
			resp, err := tr.RoundTrip(tc.req(in))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if b := got.Load(); b == nil || !bytes.Equal(*b, tc.want) {
				t.Fatalf("the upstream did not receive the body as sent")
			}
			if n := writes.Load(); n > tc.maxWrites {
				t.Errorf("%d writes to the connection, want at most %d", n, tc.maxWrites)
			}
			if tc.maxWrites > 100 && writes.Load() < 16 {
				t.Errorf("%d writes through the transport's copy; the count does not see the copy buffer", writes.Load())
			}
		})
	}
}

// TestBulkConnThroughTheProxy: a 2 MB pass-through turn reaches the upstream through the
// ReverseProxy (which wraps the body in a reader of its own) in a handful of writes, byte for
// byte, and so does the next turn of the same connection.
func TestBulkConnThroughTheProxy(t *testing.T) {
	front, got, writes := recordingProxy(t)
	for i := range 2 {
		body := fmt.Appendf(nil, `{"model":"m","input":[{"role":"user","content":"%s"}],"n":%d}`, strings.Repeat("x", 2<<20), i)
		if n := postCounted(t, front, got, writes, body); n > 2<<20/earlyBatch+4 || n == 0 {
			t.Errorf("turn %d: %d writes to the upstream connection, want a few (a 2 MB body through a 32 KiB buffer is 64; an early forward writes per 128 KiB at most)", i, n)
		}
	}
}

// recordingProxy is compactd in front of an upstream that keeps the last body it received (got),
// dialled through a transport that counts the writes of its connections (writes).
func recordingProxy(t *testing.T) (front *httptest.Server, got *atomic.Pointer[[]byte], writes *atomic.Int64) {
	got, writes = new(atomic.Pointer[[]byte]), new(atomic.Int64)
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(&b)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"resp_1","object":"response","status":"completed","output":[]}`)
	})
	tr := countingTransport(writes)
	t.Cleanup(tr.CloseIdleConnections)
	_, front, _ = newTestServer(t, up, func(c *Config) { c.Transport = tr })
	return front, got, writes
}

// postCounted posts body as a Responses turn through front, checks the answer and that the
// upstream received the body byte for byte, and returns the writes its forward took.
func postCounted(t *testing.T, front *httptest.Server, got *atomic.Pointer[[]byte], writes *atomic.Int64, body []byte) int64 {
	t.Helper()
	writes.Store(0)
	resp, err := http.Post(front.URL+"/v1/responses", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if b := got.Load(); b == nil || !bytes.Equal(*b, body) {
		t.Fatalf("the upstream did not receive the body as sent")
	}
	return writes.Load()
}
