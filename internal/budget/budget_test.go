package budget

import (
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestBytesFor(t *testing.T) {
	const maxBody = 32 << 20
	for _, tc := range []struct {
		name             string
		memLimit, budget int64
	}{
		{"no limit", math.MaxInt64, DefaultBytes},
		{"no limit, zero", 0, DefaultBytes},
		{"a quarter of the limit", 2 << 30, 512 << 20},
		{"never below one largest body", 64 << 20, maxBody},
	} {
		if got := BytesFor(tc.memLimit, maxBody); got != tc.budget {
			t.Errorf("%s: BytesFor(%d) = %d, want %d", tc.name, tc.memLimit, got, tc.budget)
		}
	}
	if got := BytesFor(0, 2*DefaultBytes); got != 2*DefaultBytes {
		t.Errorf("no limit, a body larger than the default: %d, want the body", got)
	}
}

func TestReserved(t *testing.T) {
	const n = 1000
	for _, tc := range []struct {
		canon string
		n     int64
		want  int64
	}{
		{"/v1/responses", n, n + n/4},
		{"/v1/chat/completions", n, n + n/4},
		{"/v1/messages", n, n + n/2},
		{"/v1/messages/count_tokens", n, n + n/2},
		{"/v1/responses/compact", n, n + n/4 + 2*n},
		{"/v1/responses", math.MaxInt64 - 1, math.MaxInt64},
	} {
		if got := Reserved(tc.canon, tc.n); got != tc.want {
			t.Errorf("Reserved(%s, %d) = %d, want %d", tc.canon, tc.n, got, tc.want)
		}
	}
}

func post(path string, body string, declared bool) *http.Request {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	if !declared {
		r.ContentLength = -1
		r.Body = io.NopCloser(strings.NewReader(body)) // a chunked body
	}
	return r
}

// No budget, and requests outside it, reserve nothing and always fit.
func TestOutsideTheBudget(t *testing.T) {
	for _, limit := range []int64{0, -1} {
		if b := New(limit); b != nil {
			t.Errorf("New(%d) = %v, want nil (no budget)", limit, b)
		}
	}
	var none *Budget
	if h, ok := none.Reserve(post("/v1/responses", "{}", true), "/v1/responses"); h != nil || !ok {
		t.Errorf("no budget: Reserve = %v, %v; want nil, true", h, ok)
	}
	if none.Limit() != 0 || none.InUse() != 0 {
		t.Errorf("no budget: Limit %d, InUse %d; want 0, 0", none.Limit(), none.InUse())
	}
	var h *Hold
	if !h.Compaction() || !h.Rebuild() {
		t.Error("a nil hold refused a reservation")
	}
	h.Release()

	b := New(100)
	big := strings.Repeat("x", 1000)
	for _, tc := range []struct {
		name string
		r    *http.Request
		path string
	}{
		{"GET", httptest.NewRequest(http.MethodGet, "/v1/responses", strings.NewReader(big)), "/v1/responses"},
		{"pass-through", post("/v1/files", big, true), "/v1/files"},
		{"no body", httptest.NewRequest(http.MethodPost, "/v1/responses", nil), "/v1/responses"},
	} {
		body := tc.r.Body
		if h, ok := b.Reserve(tc.r, tc.path); h != nil || !ok || b.InUse() != 0 || tc.r.Body != body {
			t.Errorf("%s: Reserve = %v, %v, %d in use, body replaced %v; want nil, true, 0, false", tc.name, h, ok, b.InUse(), tc.r.Body != body)
		}
	}
}

// A declared body reserves its route's share at once, or nothing and false; Release gives it
// all back, and the budget is shared between requests.
func TestReserveDeclared(t *testing.T) {
	b := New(1000)
	if b.Limit() != 1000 {
		t.Fatalf("Limit = %d", b.Limit())
	}
	body := strings.Repeat("x", 400)
	h1, ok := b.Reserve(post("/v1/responses", body, true), "/v1/responses")
	if !ok || h1 == nil || b.InUse() != 500 {
		t.Fatalf("first: %v, %v, %d in use; want a hold of 500", h1, ok, b.InUse())
	}
	if h, ok := b.Reserve(post("/v1/messages", body, true), "/v1/messages"); ok || h != nil || b.InUse() != 500 {
		t.Errorf("second, 600 more past the limit: %v, %v, %d in use; want refused with nothing reserved", h, ok, b.InUse())
	}
	h2, ok := b.Reserve(post("/v1/chat/completions", body, true), "/v1/chat/completions")
	if !ok || b.InUse() != 1000 {
		t.Fatalf("third, 500 more: %v, %d in use; want it to fit exactly", ok, b.InUse())
	}
	h1.Release()
	h1.Release() // twice gives back nothing more
	if b.InUse() != 500 {
		t.Errorf("after the first's release: %d in use, want 500", b.InUse())
	}
	h2.Release()
	if b.InUse() != 0 {
		t.Errorf("after every release: %d in use, want 0", b.InUse())
	}
}

// A compaction reserves two bodies and a rebuild one beside the body, each once per request, or
// nothing when it does not fit; the compact route reserved its compaction with its body.
func TestHoldBeside(t *testing.T) {
	b := New(1000)
	h, _ := b.Reserve(post("/v1/responses", strings.Repeat("x", 100), true), "/v1/responses")
	if b.InUse() != 125 {
		t.Fatalf("%d in use, want 125", b.InUse())
	}
	for i := range 2 {
		if !h.Compaction() || b.InUse() != 325 {
			t.Errorf("compaction #%d: %d in use, want 325 (two bodies more, once)", i, b.InUse())
		}
	}
	for i := range 2 {
		if !h.Rebuild() || b.InUse() != 425 {
			t.Errorf("rebuild #%d: %d in use, want 425 (one body more, once)", i, b.InUse())
		}
	}
	h.Release()

	h, _ = b.Reserve(post("/v1/responses", strings.Repeat("x", 400), true), "/v1/responses")
	other, _ := b.Reserve(post("/v1/responses", strings.Repeat("x", 200), true), "/v1/responses")
	if h.Compaction() || b.InUse() != 750 {
		t.Errorf("a compaction of 800 with 250 left: %d in use, want refused with nothing reserved (750)", b.InUse())
	}
	if h.Rebuild() || b.InUse() != 750 {
		t.Errorf("a rebuild of 400 with 250 left: %d in use, want refused with nothing reserved (750)", b.InUse())
	}
	other.Release()
	// Alone, a compaction past the whole budget takes what is left of it, to run rather than never.
	if !h.Compaction() || b.InUse() != 1000 {
		t.Errorf("a compaction of 800 beside a hold of 500, alone: %d in use, want the whole budget (1000)", b.InUse())
	}
	h.Release()

	c, _ := b.Reserve(post("/v1/responses/compact", strings.Repeat("x", 100), true), "/v1/responses/compact")
	if b.InUse() != 325 || !c.Compaction() || b.InUse() != 325 {
		t.Errorf("compact route: %d in use, want 325 with its compaction reserved with the body", b.InUse())
	}
	c.Release()
	if b.InUse() != 0 {
		t.Errorf("%d in use after every release", b.InUse())
	}
}

// A request that would reserve more than the whole budget reserves all of it and runs alone,
// declared or chunked; a body past the whole budget is still refused.
func TestRunsAlone(t *testing.T) {
	b := New(1000)
	body := strings.Repeat("x", 750) // compacting: 750 + 187 + 1500
	for _, declared := range []bool{true, false} {
		r := post("/v1/responses/compact", body, declared)
		h, ok := b.Reserve(r, "/v1/responses/compact")
		if !ok {
			t.Fatalf("declared %v: refused", declared)
		}
		if _, err := io.ReadAll(r.Body); err != nil {
			t.Fatalf("declared %v: %v", declared, err)
		}
		if b.InUse() != 1000 {
			t.Errorf("declared %v: %d in use, want the whole budget", declared, b.InUse())
		}
		if _, ok := b.Reserve(post("/v1/responses", "{}", true), "/v1/responses"); ok {
			t.Errorf("declared %v: another request fit beside one holding the whole budget", declared)
		}
		h.Release()
	}
	if _, ok := b.Reserve(post("/v1/responses", strings.Repeat("x", 1001), true), "/v1/responses"); ok || b.InUse() != 0 {
		t.Errorf("a body past the whole budget: reserved, %d in use", b.InUse())
	}
}

// A chunked body reserves its bytes as they are read; a read past the budget fails with
// ErrExceeded, and every read after it; Release gives back what was reserved.
func TestReserveChunked(t *testing.T) {
	b := New(1000)
	other, _ := b.Reserve(post("/v1/responses", strings.Repeat("x", 400), true), "/v1/responses") // 500
	r := post("/v1/messages", strings.Repeat("x", 600), false)
	h, ok := b.Reserve(r, "/v1/messages")
	if !ok || h == nil || b.InUse() != 500 {
		t.Fatalf("chunked: %v, %v, %d in use; want a hold and nothing reserved before the read", h, ok, b.InUse())
	}
	buf := make([]byte, 100)
	for range 3 {
		if n, err := io.ReadFull(r.Body, buf); n != 100 || err != nil {
			t.Fatalf("read under the budget: %d, %v", n, err)
		}
	}
	if b.InUse() != 500+450 {
		t.Errorf("after 300 bytes: %d in use, want 950 (the bytes and the Messages skim's half)", b.InUse())
	}
	if n, err := r.Body.Read(buf); n != 0 || !errors.Is(err, ErrExceeded) {
		t.Errorf("read past the budget: %d, %v; want 0, ErrExceeded", n, err)
	}
	other.Release()
	if n, err := r.Body.Read(buf); n != 0 || !errors.Is(err, ErrExceeded) {
		t.Errorf("read after a refused one: %d, %v; want ErrExceeded again", n, err)
	}
	h.Release()
	if b.InUse() != 0 {
		t.Errorf("%d in use after every release", b.InUse())
	}
}

// Concurrent reservations never take more than the limit, and every release gives back its own.
func TestConcurrent(t *testing.T) {
	b := New(10_000)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 500 {
				h, ok := b.Reserve(post("/v1/responses", strings.Repeat("x", 800), true), "/v1/responses")
				if u := b.InUse(); u > b.Limit() {
					t.Errorf("%d in use past the limit %d", u, b.Limit())
				}
				if ok {
					h.Rebuild()
					h.Release()
				}
			}
		})
	}
	wg.Wait()
	if b.InUse() != 0 {
		t.Errorf("%d in use after every release", b.InUse())
	}
}
