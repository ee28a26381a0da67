package proxy

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/crypto"
)

// The buffer of a pass-through body is reused for the next body, and only then: each body the
// upstream gets is the client's, byte for byte, while buffers go round; a turn compactd changed
// keeps its buffer to itself.
func TestBodyPoolReusesPassThroughBuffers(t *testing.T) {
	var mu sync.Mutex
	var got [][]byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"resp_1","object":"response","status":"completed","output":[]}`)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	k, _ := crypto.GenerateKey()
	ring, _ := crypto.NewKeyring(k)
	counter := compact.NewCounter(compact.CounterOptions{})
	defer counter.Close()
	s, err := New(Config{Upstream: u, Sealer: ring, Counter: counter, Summarizer: instantSummarizer{}, Logger: slog.New(slog.DiscardHandler), KeepAlive: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(s)
	defer front.Close()
	body := func(i int) []byte {
		return fmt.Appendf(nil, `{"model":"m","input":[{"role":"user","content":"%s"}],"n":%d}`, strings.Repeat(string(rune('a'+i%26)), 200<<10+i*100), i)
	}
	for i := range 6 {
		resp, err := http.Post(front.URL+"/v1/responses", "application/json", bytes.NewReader(body(i)))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	for i, b := range got {
		if !bytes.Equal(b, body(i)) {
			t.Fatalf("request %d reached the upstream changed", i)
		}
	}
	s.bodies.mu.Lock()
	idle := len(s.bodies.free)
	s.bodies.mu.Unlock()
	if idle != 1 {
		t.Fatalf("%d idle buffers after 6 sequential pass-through turns, want 1 (each reused by the next)", idle)
	}
	// A turn compactd rewrites (context_management is dropped) does not give its buffer back.
	s.bodies.mu.Lock()
	s.bodies.free, s.bodies.bytes = nil, 0
	s.bodies.mu.Unlock()
	changed := fmt.Appendf(nil, `{"model":"m","input":[{"role":"user","content":"%s"}],"context_management":[{"type":"compaction","compact_threshold":100000000}]}`, strings.Repeat("z", 200<<10))
	resp, err := http.Post(front.URL+"/v1/responses", "application/json", bytes.NewReader(changed))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s.bodies.mu.Lock()
	idle = len(s.bodies.free)
	s.bodies.mu.Unlock()
	if idle != 0 {
		t.Fatal("a rewritten turn gave its body's buffer back")
	}
}

func TestBodyPoolBounds(t *testing.T) {
	var p bodyPool
	for range poolMaxIdle + 4 {
		p.put(make([]byte, 0, 1<<20))
	}
	if len(p.free) != poolMaxIdle || p.bytes > poolMaxIdleBytes {
		t.Fatalf("%d idle, %d bytes", len(p.free), p.bytes)
	}
	p.put(make([]byte, 0, 1024)) // too small to keep
	// A kept buffer comes back for a body it fits, with nothing of the last body past its end:
	// a shorter body's slack is cleared of what the last one reached, a longer one's was zero.
	b := p.get(900 << 10)
	if cap(b) != 1<<20 || len(b) != 900<<10 {
		t.Fatalf("got len %d cap %d", len(b), cap(b))
	}
	for _, n := range []int{900 << 10, 800 << 10, 850 << 10, 1000 << 10, 600 << 10} {
		for i := range b {
			b[i] = 0xAA // the body read into it
		}
		p.put(b)
		b = p.get(n)
		if len(b) != n || cap(b) != 1<<20 {
			t.Fatalf("get(%d): len %d cap %d", n, len(b), cap(b))
		}
		if tail := b[len(b):cap(b)]; bytes.IndexByte(tail, 0xAA) >= 0 {
			t.Fatalf("get(%d): the slack of a reused buffer holds the last body's bytes", n)
		}
	}
	p.put(b)
	// Not a buffer more than twice the body (the pool holds b's 1 MiB).
	if small := p.get(100 << 10); cap(small) >= 1<<20 {
		t.Fatal("a 1 MiB buffer was handed out for a 100 KiB body")
	}
}
