// Package skimcache remembers, per scope (an API and a client), the skim state of the last request
// of each conversation, so that the next request — the same bytes plus a few new items, as
// agents send — is skimmed only past them.
//
// A client controls every byte it sends and must not be able to make compactd believe a body
// begins with bytes it does not hold: a state is found only when a keyed MAC over the body's
// first End bytes equals the one computed over the bytes the state was taken from. The MAC is a
// universal hash with a secret key, encrypted with AES-256 under another (mac.go): POLYVAL where
// the CPU has VPCLMULQDQ (on 512-bit registers with AVX-512, or on 256-bit ones with AVX2), else
// GMAC (the standard library's AES-GCM over the bytes as additional data). A collision between
// two different byte strings of up to L blocks happens with probability at most L/2^128, and the
// keys and tags never leave the process for a client to learn from. A 2 MB history takes about
// 0.05 ms with POLYVAL on AVX-512 (a Xeon) and 0.15–0.2 ms on AVX2 (an AMD Zen 3), against 0.16 ms
// and 0.33–0.56 ms with GMAC on the same machines (BENCHMARKS.md, issue 27).
//
// The MAC is chained over fixed chunks of chunkLen bytes, so that a body can be hashed once, as
// it arrives: tag(k) = MAC(tag(k-1), chunk k) over the body's whole chunks, tag(0) zero, and the
// tag of a prefix of End bytes is MAC(tag(j), body[j*chunkLen:End]) for j = End/chunkLen. A
// BodyMAC holds one body's chunk tags; the proxy advances it after each read of the body, while
// the bytes just read are still in the CPU's cache (hashing them there runs at about twice the
// speed of hashing a 2 MB buffer afterwards), and Find and Store finish it over whatever is left,
// so a turn hashes its body once plus less than a chunk per prefix it proves or stores.
//
// Finding the candidates is an index, not a proof: entries are bucketed by a seeded hash of the
// scope and the body's first HeadLen bytes (an agent's conversations share their instructions,
// so a bucket may hold up to bucketMax), and a fingerprint of the 64 bytes before each entry's End picks the
// ones worth verifying. At most two are verified per lookup, whatever a client sends, so the work
// of a lookup is bounded by two passes over the body.
//
// Memory is a byte budget over the states (their Size) and the cache's own bookkeeping, kept by
// evicting the least recently used entries; a state larger than the budget is not kept.
package skimcache

import (
	"crypto/subtle"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"
)

// State is what a skim remembers of a body's prefix; opaque to the cache.
type State interface {
	// End is the length of the body prefix the state describes (an item boundary).
	End() int
	// Size is the bytes the state holds, counted against the cache's budget.
	Size() int
}

// Options configure a Cache.
type Options struct {
	// Budget is the bytes (states and bookkeeping) held at most; <= 0 disables the cache.
	Budget int64
	// MinBody: bodies shorter than this are neither looked up nor stored (0: DefaultMinBody).
	// Skimming a small body costs less than looking it up.
	MinBody int

	forceGMAC bool // tests: the fallback MAC, whatever the CPU
}

const (
	// DefaultMinBody is the smallest body the cache looks up by default.
	DefaultMinBody = 32 << 10
	// HeadLen is the length of the body head the index is keyed by; states covering less are
	// not stored.
	HeadLen = 1024
	// fpLen is the length of the fingerprinted bytes before a state's End.
	fpLen = 64
	// bucketMax is the most entries one head keeps (most recent first): all the conversations
	// of one agent and client can share a head (the same instructions and tools), and a lookup
	// looks at each of them (a fingerprint of 64 bytes, ~15 ns), so this bounds its work.
	bucketMax = 1024
	// maxVerify is the most candidates one Find verifies.
	maxVerify = 2
	// chunkLen is the length of the chunks the MAC is chained over: long enough that a chunk's
	// AES block and call are nothing beside its hashing, short enough that proving a prefix
	// hashes little past the last whole chunk.
	chunkLen = 64 << 10
	// entryOverhead is what an entry costs beyond its state: the entry, its
	// place in the bucket and the LRU list, the bucket's share of the map.
	entryOverhead = 160
)

// Cache is the skim-state cache. A nil *Cache is a disabled one: Find misses, Store does
// nothing. It is safe for concurrent use.
type Cache struct {
	segMAC  segmentMAC
	seed    maphash.Seed
	minBody int
	// One lock and one budget for all: the conversations of one agent share a head, so sharding
	// by head would put them all in one shard's share of the budget; the lock is held for
	// bookkeeping only (the MAC runs outside it).
	shard shard

	hits, misses, stores, evictions atomic.Int64
	entries, bytes                  atomic.Int64

	// hashed counts the bytes the MAC was computed over (tests check a turn hashes only its tail).
	hashed atomic.Int64
}

type shard struct {
	mu      sync.Mutex
	budget  int64
	bytes   int64
	buckets map[uint64]*bucket
	lru     entry // sentinel of the LRU list: lru.next is the most recent
}

type bucket struct {
	head    uint64
	entries []*entry // most recent first
}

type entry struct {
	scope      string
	state      State
	end        int      // state.End(), kept here: a lookup's walk touches entries, not states
	tag        [16]byte // the MAC of the body's first end bytes
	fp         uint64   // maphash of the fpLen bytes before end
	size       int64
	b          *bucket
	prev, next *entry
}

// Hit is the result of Find: the state found, and the body's MAC chain for Store to go on from.
// The zero Hit is a miss.
type Hit struct {
	State State
	e     *entry
	mac   *BodyMAC
}

// OK reports whether the Find found a state.
func (h Hit) OK() bool { return h.State != nil }

// New returns a Cache, nil when o.Budget <= 0.
func New(o Options) *Cache {
	if o.Budget <= 0 {
		return nil
	}
	c := &Cache{segMAC: newMAC(o.forceGMAC), seed: maphash.MakeSeed(), minBody: o.MinBody}
	if c.minBody <= 0 {
		c.minBody = DefaultMinBody
	}
	s := &c.shard
	s.budget = o.Budget
	s.buckets = map[uint64]*bucket{}
	s.lru.next, s.lru.prev = &s.lru, &s.lru
	return c
}

// Wants reports whether a body of n bytes is looked up and stored: the cache is on and n is at
// least its minimum. Callers skip the work of a lookup (and of making a state) otherwise.
func (c *Cache) Wants(n int) bool { return c != nil && n >= c.minBody && n >= HeadLen }

func (c *Cache) headKey(scope string, body []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(scope)
	h.WriteByte(0)
	h.Write(body[:HeadLen])
	return h.Sum64()
}

func (c *Cache) fingerprint(body []byte, end int) uint64 {
	return maphash.Bytes(c.seed, body[max(end-fpLen, 0):end])
}

// mac extends prev, a chain's tag over the bytes before p, over p.
func (c *Cache) mac(prev [16]byte, p []byte) [16]byte {
	c.hashed.Add(int64(len(p)))
	return c.segMAC.sum(prev, p)
}

// BodyMAC is the MAC chain over one body's whole chunks, made for the buffer the body is read
// into and advanced as it fills (or by Find and Store, over what is left). It is for one body
// and one goroutine at a time.
type BodyMAC struct {
	c    *Cache
	base *byte      // the buffer's first byte: a BodyMAC is never applied to another one
	tags [][16]byte // tags[k]: the chain's tag over the first k*chunkLen bytes; tags[0] zero
}

// NewBodyMAC returns the MAC chain for a body to be read into buf, nil when the cache does not
// take bodies of its length (or is off).
func (c *Cache) NewBodyMAC(buf []byte) *BodyMAC {
	if !c.Wants(len(buf)) {
		return nil
	}
	return c.newBodyMAC(buf)
}

func (c *Cache) newBodyMAC(buf []byte) *BodyMAC {
	return &BodyMAC{c: c, base: unsafe.SliceData(buf), tags: make([][16]byte, 1, len(buf)/chunkLen+1)}
}

// Advance hashes the whole chunks of filled (the buffer's first bytes, as far as they have
// arrived) that are not hashed yet.
func (m *BodyMAC) Advance(filled []byte) {
	for k := len(m.tags); k*chunkLen <= len(filled); k++ {
		m.tags = append(m.tags, m.c.mac(m.tags[k-1], filled[(k-1)*chunkLen:k*chunkLen]))
	}
}

// Hashed is how many of the body's bytes the chain covers so far (its whole chunks).
func (m *BodyMAC) Hashed() int { return (len(m.tags) - 1) * chunkLen }

// prefixTag is the MAC of body[:end].
func (m *BodyMAC) prefixTag(body []byte, end int) [16]byte {
	j := end / chunkLen
	m.Advance(body[:j*chunkLen])
	return m.c.mac(m.tags[j], body[j*chunkLen:end])
}

// macFor returns m if it is this cache's chain for body, else a fresh one.
func (c *Cache) macFor(m *BodyMAC, body []byte) *BodyMAC {
	if m != nil && m.c == c && m.base == unsafe.SliceData(body) && m.Hashed() <= len(body) {
		return m
	}
	return c.newBodyMAC(body)
}

// Find returns the most recently stored state under scope whose prefix body begins with, proved
// by the MAC; else a miss. m is the body's MAC chain as far as it was advanced while the body was
// read (nil: none); a chain made for another buffer is not used. The Hit, found or not, carries
// the chain on to Store.
func (c *Cache) Find(scope string, body []byte, m *BodyMAC) Hit {
	if !c.Wants(len(body)) {
		return Hit{}
	}
	m = c.macFor(m, body)
	head := c.headKey(scope, body)
	s := &c.shard
	// Walk the bucket (most recent first) under the lock only up to the first candidate, and
	// verify it outside: the MAC is the expensive part, and the conversation's own last state is
	// usually the bucket's first entry, so a hit does not look at the hundreds of finished
	// conversations an agent's head can gather. A candidate that fails (a fingerprint collision)
	// sends the walk on past it, up to maxVerify candidates in all.
	var tried [maxVerify]*entry
	for v := range maxVerify {
		s.mu.Lock()
		e := c.candidate(s, head, scope, body, tried[:v])
		var want [16]byte
		if e != nil {
			want = e.tag
		}
		s.mu.Unlock()
		if e == nil {
			break
		}
		tried[v] = e
		tag := m.prefixTag(body, e.end)
		if subtle.ConstantTimeCompare(tag[:], want[:]) == 1 {
			s.mu.Lock()
			if e.b != nil {
				s.touch(e)
			}
			s.mu.Unlock()
			c.hits.Add(1)
			return Hit{State: e.state, e: e, mac: m}
		}
	}
	c.misses.Add(1)
	return Hit{mac: m}
}

// candidate is the first entry of head's bucket, not in tried, that may hold body's prefix: the
// same scope, an End within body and the same fingerprint there. s.mu is held.
func (c *Cache) candidate(s *shard, head uint64, scope string, body []byte, tried []*entry) *entry {
	b := s.buckets[head]
	if b == nil {
		return nil
	}
next:
	for _, e := range b.entries {
		if e.scope != scope || e.end > len(body) || c.fingerprint(body, e.end) != e.fp {
			continue
		}
		for _, t := range tried {
			if t == e {
				continue next
			}
		}
		return e
	}
	return nil
}

// Store remembers st for scope: the state of body's first st.End() bytes. from is what this
// body's Find returned (zero when there was none): its chain is reused, and the entry it found is
// replaced, since the conversation moved on. A from that Find returned for another body cannot
// make a false hit: its chain is for another buffer and is not used, and Find recomputes the MAC
// over the body it is given.
func (c *Cache) Store(scope string, body []byte, from Hit, st State) {
	if !c.Wants(len(body)) || st == nil {
		return
	}
	end := st.End()
	if end < HeadLen || end > len(body) {
		return
	}
	m := c.macFor(from.mac, body)
	e := &entry{scope: scope, state: st, end: end, tag: m.prefixTag(body, end), fp: c.fingerprint(body, end),
		size: int64(st.Size()) + int64(len(scope)) + entryOverhead}
	head := c.headKey(scope, body)
	s := &c.shard
	if e.size > s.budget {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if from.e != nil && from.e.b != nil && from.e.b.head == head {
		c.remove(s, from.e)
	}
	b := s.buckets[head]
	if b == nil {
		b = &bucket{head: head}
		s.buckets[head] = b
	}
	if len(b.entries) == bucketMax {
		c.remove(s, b.entries[len(b.entries)-1]) // leaves bucketMax-1: the bucket stays
		c.evictions.Add(1)
	}
	b.entries = append(b.entries, nil)
	copy(b.entries[1:], b.entries)
	b.entries[0] = e
	e.b = b
	s.pushFront(e)
	s.bytes += e.size
	c.bytes.Add(e.size)
	c.entries.Add(1)
	c.stores.Add(1)
	for s.bytes > s.budget && s.lru.prev != &s.lru {
		c.remove(s, s.lru.prev)
		c.evictions.Add(1)
	}
}

// remove takes e out of its bucket and the LRU list. s.mu is held.
func (c *Cache) remove(s *shard, e *entry) {
	b := e.b
	if b == nil {
		return
	}
	for i, x := range b.entries {
		if x == e {
			b.entries = append(b.entries[:i], b.entries[i+1:]...)
			break
		}
	}
	if len(b.entries) == 0 {
		delete(s.buckets, b.head)
	}
	e.b = nil
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	s.bytes -= e.size
	c.bytes.Add(-e.size)
	c.entries.Add(-1)
}

func (s *shard) pushFront(e *entry) {
	e.prev, e.next = &s.lru, s.lru.next
	s.lru.next.prev = e
	s.lru.next = e
}

func (s *shard) touch(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	s.pushFront(e)
}

// Stats are the cache's counters.
type Stats struct {
	Hits, Misses, Stores, Evictions int64
	Entries, Bytes                  int64
}

// Stats reads the counters; a nil cache has none.
func (c *Cache) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	return Stats{Hits: c.hits.Load(), Misses: c.misses.Load(), Stores: c.stores.Load(), Evictions: c.evictions.Load(),
		Entries: c.entries.Load(), Bytes: c.bytes.Load()}
}
