package proxy_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/compactd/compactd/proxy"
)

// TestStoreAndForward: the benchmark reference forwards every body byte for byte, small and
// large (a pooled buffer read under the receive low-water mark), a shorter body after a longer
// one on the same connection included (a reused buffer carries nothing of the last body), and
// relays the upstream's answer and the query.
func TestStoreAndForward(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		sum := sha256.Sum256(b)
		w.Header().Set("X-Path", r.URL.RequestURI())
		_, _ = io.WriteString(w, hex.EncodeToString(sum[:]))
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy.StoreAndForward(u, 8<<20), ConnContext: proxy.ConnContext}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	for _, n := range []int{2 << 10, 3 << 20, 600 << 10, 0, 1 << 20} {
		body := bytes.Repeat([]byte{byte('a' + n%26)}, n)
		copy(body, "{\"n\":")
		resp, err := client.Post("http://"+ln.Addr().String()+"/v1/responses?x=1", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		sum := sha256.Sum256(body)
		if resp.StatusCode != http.StatusOK || string(got) != hex.EncodeToString(sum[:]) || resp.Header.Get("X-Path") != "/v1/responses?x=1" {
			t.Errorf("%d bytes: status %d, path %q, upstream got a body whose hash is %s; want %x", n, resp.StatusCode, resp.Header.Get("X-Path"), got, sum)
		}
	}
}
