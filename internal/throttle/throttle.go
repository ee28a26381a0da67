// Package throttle bounds the rate of failed attempts per client address: a token bucket per
// address, of a burst of attempts that refills by one every refill period. An attempt takes one
// (Take) and a success gives it back (Refund), so ordinary use never drains the bucket; once it
// is empty the address is refused until the bucket refills. compactd throttles failed
// admin-token attempts with it, on the admin API and the console alike (one Throttle for both).
//
// Memory is bounded whatever the number of addresses: past a bound, buckets that have refilled
// (they hold no state) are dropped, and if none has, every address that does not fit shares one
// overflow bucket, so a flood from many addresses is still bounded, in memory and in attempts.
package throttle

import (
	"math"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// maxAddrs bounds the addresses a Throttle remembers (see the package comment).
const maxAddrs = 4096

// Throttle is the per-address bucket set. It is safe for concurrent use. The zero value is not
// usable: New.
type Throttle struct {
	mu       sync.Mutex
	buckets  map[string]*bucket
	burst    float64
	refill   time.Duration
	max      int
	now      func() time.Time
	overflow bucket
}

type bucket struct {
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

// New is a throttle that gives each address burst attempts, refilled by one every refill.
func New(burst int, refill time.Duration) *Throttle {
	return &Throttle{buckets: map[string]*bucket{}, burst: float64(burst), refill: refill,
		max: maxAddrs, now: time.Now}
}

// fill brings b up to date at now.
func (t *Throttle) fill(b *bucket, now time.Time) {
	if b.at.IsZero() {
		b.tokens, b.at = t.burst, now
		return
	}
	if d := now.Sub(b.at); d > 0 {
		b.tokens = math.Min(t.burst, b.tokens+float64(d)/float64(t.refill))
		b.at = now
	}
}

// bucket is addr's bucket, brought up to date; called with mu held.
func (t *Throttle) bucket(addr string, now time.Time) *bucket {
	b := t.buckets[addr]
	if b == nil {
		if len(t.buckets) >= t.max {
			for k, v := range t.buckets {
				if t.fill(v, now); v.tokens >= t.burst {
					delete(t.buckets, k)
				}
			}
		}
		if len(t.buckets) >= t.max {
			b = &t.overflow
		} else {
			b = &bucket{}
			t.buckets[addr] = b
		}
	}
	t.fill(b, now)
	return b
}

// Take spends one attempt of addr's. When none is left it returns false, spending nothing, and
// how long until one is.
func (t *Throttle) Take(addr string) (ok bool, retry time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	b := t.bucket(addr, now)
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) * float64(t.refill))
	}
	b.tokens--
	return true, 0
}

// Refund gives back the attempt a success took (never past the burst).
func (t *Throttle) Refund(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bucket(addr, t.now())
	b.tokens = math.Min(t.burst, b.tokens+1)
}

// Addr is the address r is throttled under: the peer's IP, IPv6 addresses by their /64 (one
// host commonly holds a whole /64). Not X-Forwarded-For: anyone can send that.
func Addr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}
