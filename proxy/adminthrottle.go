package proxy

import (
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/compactd/compactd/internal/api"
)

// Failed admin-token attempts are throttled per client address (adminAuth): each address has a
// token bucket of AdminFailureBurst attempts that refills by one every AdminFailureRefill. An
// attempt takes one; a right token gives it back, so an operator's ordinary use never drains
// the bucket. Once it is empty every admin call from the address is answered 429 with
// Retry-After, the right token too, and the token is not even compared: a right token that
// still worked would tell a guess that hit from one that missed, and the throttle would not slow
// guessing. The price is that a client sharing the operator's address (the same host, NAT, or a
// reverse proxy in front of compactd, where every caller is the proxy's address) can lock the
// admin API for about a minute by failing on purpose; the API is an operator's tool, and the
// alternative is an unbounded guessing rate.
const (
	AdminFailureBurst  = 10
	AdminFailureRefill = 6 * time.Second // 10 a minute once the burst is spent
)

// maxThrottledAddrs bounds the addresses the throttle remembers. Past it, buckets that have
// refilled (they hold no state) are dropped; if none has, the new address shares one overflow
// bucket with every other address that did not fit, so a flood from many addresses is still
// bounded, in memory and in attempts.
const maxThrottledAddrs = 4096

// failThrottle is the per-address bucket set. The zero value is not usable: newFailThrottle.
type failThrottle struct {
	mu       sync.Mutex
	buckets  map[string]*failBucket
	burst    float64
	refill   time.Duration
	max      int
	now      func() time.Time
	overflow failBucket
}

type failBucket struct {
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

func newFailThrottle() *failThrottle {
	return &failThrottle{buckets: map[string]*failBucket{}, burst: AdminFailureBurst, refill: AdminFailureRefill,
		max: maxThrottledAddrs, now: time.Now}
}

// fill brings b up to date at now.
func (t *failThrottle) fill(b *failBucket, now time.Time) {
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
func (t *failThrottle) bucket(addr string, now time.Time) *failBucket {
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
			b = &failBucket{}
			t.buckets[addr] = b
		}
	}
	t.fill(b, now)
	return b
}

// take spends one attempt of addr's. When none is left it returns false and how long until one
// is.
func (t *failThrottle) take(addr string) (ok bool, retry time.Duration) {
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

// refund gives back the attempt a right token took.
func (t *failThrottle) refund(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bucket(addr, t.now())
	b.tokens = math.Min(t.burst, b.tokens+1)
}

// throttleAddr is the address r is throttled under: the peer's IP, IPv6 addresses by their /64
// (one host commonly holds a whole /64). Not X-Forwarded-For: anyone can send that.
func throttleAddr(r *http.Request) string {
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

// adminThrottled answers a throttled admin call: 429 in OpenAI's envelope (the admin API's) with
// Retry-After in whole seconds, at least one.
func adminThrottled(w http.ResponseWriter, retry time.Duration) {
	secs := max(1, int(math.Ceil(retry.Seconds())))
	(&api.OpenAIError{Status: http.StatusTooManyRequests, Type: "requests", Code: "admin_auth_throttled",
		RetryAfter: time.Duration(secs) * time.Second,
		Message: "Too many failed admin-token attempts from this address; retry after " + strconv.Itoa(secs) +
			"s with the right 'Authorization: Bearer <admin token>'."}).Write(w)
}
