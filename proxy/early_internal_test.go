package proxy

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/crypto"
)

// earlyUpstream records what reached it: complete bodies, and requests whose body broke off.
type earlyUpstream struct {
	mu         sync.Mutex
	complete   [][]byte
	incomplete int
}

func (u *earlyUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	u.mu.Lock()
	if err != nil || int64(len(b)) != r.ContentLength {
		u.incomplete++
		u.mu.Unlock()
		return
	}
	u.complete = append(u.complete, b)
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Upstream", "yes")
	io.WriteString(w, `{"id":"resp_1","object":"response","status":"completed","output":[]}`)
}

func (u *earlyUpstream) counts() (complete [][]byte, incomplete int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]byte(nil), u.complete...), u.incomplete
}

func newEarlyServer(t *testing.T, up http.Handler) (*Server, *httptest.Server, *prometheus.Registry) {
	return newTestServer(t, up, nil)
}

// newTestServer is a Server with early forwarding on in front of up, its front end, and its
// metrics; mod (nil: none) edits the Config first.
func newTestServer(t *testing.T, up http.Handler, mod func(*Config)) (*Server, *httptest.Server, *prometheus.Registry) {
	t.Helper()
	us := httptest.NewServer(up)
	t.Cleanup(us.Close)
	u, _ := url.Parse(us.URL)
	k, _ := crypto.GenerateKey()
	ring, _ := crypto.NewKeyring(k)
	counter := compact.NewCounter(compact.CounterOptions{})
	t.Cleanup(counter.Close)
	reg := prometheus.NewRegistry()
	cfg := Config{Upstream: u, Sealer: ring, Counter: counter, Summarizer: instantSummarizer{}, Registry: reg,
		EarlyForwardBytes: SuggestedEarlyForwardBytes, Logger: slog.New(slog.DiscardHandler), KeepAlive: time.Hour}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(s)
	t.Cleanup(front.Close)
	return s, front, reg
}

func turnBody(turn int, extra string) []byte {
	return fmt.Appendf(nil, `{"model":"m","input":[{"role":"user","content":"%s"},{"role":"user","content":"turn %d"}]%s}`, strings.Repeat("h", 1<<20), turn, extra)
}

func postTurn(t *testing.T, url string, body []byte) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url+"/v1/responses", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

func earlyCount(reg *prometheus.Registry, outcome string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "compactd_early_forwards_total" {
			continue
		}
		n := 0.0
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					n += m.GetCounter().GetValue()
				}
			}
		}
		return n
	}
	return -1
}

// TestEarlyForwardCommitsAnAsSentTurn: once a client's turn went as sent, its next large turn
// goes upstream while it arrives, and the upstream gets it byte for byte, once, with its answer
// passed back (headers included).
func TestEarlyForwardCommitsAnAsSentTurn(t *testing.T) {
	up := &earlyUpstream{}
	_, front, reg := newEarlyServer(t, up)
	for i := range 3 {
		body := turnBody(i, "")
		resp, b := postTurn(t, front.URL, body)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Upstream") != "yes" || !strings.Contains(string(b), "resp_1") {
			t.Fatalf("turn %d: %d %q (X-Upstream %q)", i, resp.StatusCode, b, resp.Header.Get("X-Upstream"))
		}
		got, broken := up.counts()
		if len(got) != i+1 || !bytes.Equal(got[i], body) || broken != 0 {
			t.Fatalf("turn %d: the upstream has %d complete requests (the last the client's: %v), %d broken", i, len(got), len(got) > i && bytes.Equal(got[i], body), broken)
		}
	}
	if n := earlyCount(reg, "committed"); n != 2 {
		t.Errorf("compactd_early_forwards_total{outcome=committed} = %v, want 2 (the turns after the first)", n)
	}
}

// TestEarlyForwardWithdrawnWhenTheTurnChanges: a large turn compactd rewrites (its
// context_management taken out), or refuses (not JSON at its very end), after an as-sent one:
// the early request is withdrawn before its last byte, so the upstream acts only on what
// compactd decided — the rewritten body, or nothing.
func TestEarlyForwardWithdrawnWhenTheTurnChanges(t *testing.T) {
	up := &earlyUpstream{}
	_, front, reg := newEarlyServer(t, up)
	if resp, b := postTurn(t, front.URL, turnBody(0, "")); resp.StatusCode != http.StatusOK {
		t.Fatalf("first turn: %d %s", resp.StatusCode, b)
	}
	cm := `,"context_management":[{"type":"compaction","compact_threshold":100000000}]`
	resp, b := postTurn(t, front.URL, turnBody(1, cm))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("rewritten turn: %d %s", resp.StatusCode, b)
	}
	got, _ := up.counts()
	if len(got) != 2 || bytes.Contains(got[1], []byte("context_management")) {
		t.Fatalf("the upstream's complete requests: %d; the last carries context_management: %v", len(got), len(got) == 2 && bytes.Contains(got[1], []byte("context_management")))
	}
	// As sent again, then a body that is the same turn but not JSON at its last byte.
	postTurn(t, front.URL, turnBody(2, ""))
	bad := turnBody(3, "")
	bad[len(bad)-1] = ']'
	resp, b = postTurn(t, front.URL, bad)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a body that is not JSON: %d %s, want 400", resp.StatusCode, b)
	}
	got, _ = up.counts()
	if len(got) != 3 {
		t.Fatalf("%d complete requests reached the upstream, want 3 (the refused body never completes)", len(got))
	}
	for _, g := range got {
		if bytes.Equal(g, bad) {
			t.Fatal("the refused body reached the upstream whole")
		}
	}
	// Both changed turns followed an as-sent one, so both were sent early and withdrawn.
	if n := earlyCount(reg, "withdrawn"); n != 2 {
		t.Errorf("compactd_early_forwards_total{outcome=withdrawn} = %v, want 2", n)
	}
}

// TestEarlyForwardClientGoesAway: a client that stops halfway through its body leaves the
// upstream an incomplete request and compactd nothing running.
func TestEarlyForwardClientGoesAway(t *testing.T) {
	up := &earlyUpstream{}
	s, front, _ := newEarlyServer(t, up)
	postTurn(t, front.URL, turnBody(0, ""))
	body := turnBody(1, "")
	c, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	c.Write(body[:len(body)/2])
	time.Sleep(100 * time.Millisecond)
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, broken := up.counts()
		if len(got) == 1 && broken == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("upstream: %d complete, %d broken; want 1 and 1", len(got), broken)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The next turn of the same client still works.
	if resp, b := postTurn(t, front.URL, turnBody(2, "")); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the client went away: %d %s", resp.StatusCode, b)
	}
	if got, _ := up.counts(); len(got) != 2 {
		t.Fatalf("%d complete requests upstream, want 2", len(got))
	}
	_ = s
}
