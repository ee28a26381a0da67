package throttle

import (
	"net/http/httptest"
	"testing"
	"time"
)

// The admin API's figures (proxy.burst, proxy.refill).
const (
	burst  = 10
	refill = 6 * time.Second
)

// The failure throttle: a burst per address, refilled over time; a right token refunds what it
// took; addresses are independent (IPv6 by /64); past the address bound, refilled buckets are
// dropped and the rest share one overflow bucket.
func TestThrottle(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	th := New(burst, refill)
	th.now = func() time.Time { return now }
	spend := func(addr string) int { // attempts granted until refused
		n := 0
		for {
			if ok, _ := th.Take(addr); !ok {
				return n
			}
			n++
		}
	}
	if n := spend("10.0.0.1"); n != burst {
		t.Fatalf("burst: %d attempts, want %d", n, burst)
	}
	if ok, retry := th.Take("10.0.0.1"); ok || retry <= 0 || retry > refill {
		t.Errorf("spent address: ok=%v retry=%v, want refused with a wait of at most %v", ok, retry, refill)
	}
	if ok, _ := th.Take("10.0.0.2"); !ok {
		t.Error("another address is throttled too")
	}
	now = now.Add(refill)
	if n := spend("10.0.0.1"); n != 1 {
		t.Errorf("after one refill period: %d attempts, want 1", n)
	}
	now = now.Add(time.Hour)
	if n := spend("10.0.0.1"); n != burst {
		t.Errorf("after an hour: %d attempts, want the burst %d (no more)", n, burst)
	}
	// A right token refunds its attempt: the burst is whole again.
	for range 100 {
		if ok, _ := th.Take("10.0.0.3"); !ok {
			t.Fatal("right tokens drained the bucket")
		}
		th.Refund("10.0.0.3")
	}
	if n := spend("10.0.0.3"); n != burst {
		t.Errorf("after right tokens: %d attempts, want %d", n, burst)
	}

	// The bound: spent buckets stay, refilled ones go; past it the overflow bucket is shared.
	th = New(burst, refill)
	th.now = func() time.Time { return now }
	th.max = 3
	for _, a := range []string{"a", "b", "c"} {
		spend(a)
	}
	if n := spend("d"); n != burst {
		t.Errorf("overflow: %d attempts, want %d", n, burst)
	}
	if ok, _ := th.Take("e"); ok {
		t.Error("a second overflowing address has a bucket of its own: memory is not bounded")
	}
	if len(th.buckets) != 3 {
		t.Errorf("%d buckets kept, want the bound 3", len(th.buckets))
	}
	now = now.Add(time.Hour) // everything refilled: dropped, room again
	if ok, _ := th.Take("f"); !ok || th.buckets["f"] == nil {
		t.Error("refilled buckets were not dropped for a new address")
	}

	for remote, want := range map[string]string{
		"192.0.2.7:5555":             "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:1":   "2001:db8:1:2::/64",
		"[::ffff:192.0.2.7]:80":      "192.0.2.7",
		"@":                          "@",
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		if got := Addr(r); got != want {
			t.Errorf("Addr(%q) = %q, want %q", remote, got, want)
		}
	}
}
