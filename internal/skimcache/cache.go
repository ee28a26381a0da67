// Package skimcache remembers, per scope (an API and a client), the skim state of the last request
// of each conversation, so that the next request — the same bytes plus a few new items, as
// agents send — is skimmed only past them.
//
// A client controls every byte it sends and must not be able to make compactd believe a body
// begins with bytes it does not hold: a state is found only when a keyed MAC over the body's
// first End bytes equals the one computed over the bytes the state was taken from. The MAC is a
// universal hash with a secret key, encrypted with AES-256 under another (mac.go): POLYVAL with
// AVX-512 where the CPU has VPCLMULQDQ on 512-bit registers, else GMAC (the standard library's
// AES-GCM over the bytes as additional data). A collision between two different byte strings of
// up to L blocks happens with probability at most L/2^128, and the keys and tags never leave the
// process for a client to learn from. A 2 MB history takes about 0.1 ms with POLYVAL, 0.16 ms
// with GMAC (BENCHMARKS.md, issue 27).
//
// The MAC is chained per segment, so each turn hashes only its new bytes: a conversation's entry
// holds the ends e1 < … < en of the segments its requests added and the tag of the last;
// tag1 = MAC(zero, body[0:e1]) and tagk = MAC(tag(k-1), body[e(k-1):ek]). Verifying a candidate recomputes the chain over the new body (one pass over
// its first End bytes); storing the next state extends the verified chain by one segment.
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
	// maxSegments caps an entry's chain; past it Store hashes the prefix again as one segment.
	maxSegments = 512
	// entryOverhead is what an entry costs beyond its state and segment ends: the entry, its
	// place in the bucket and the LRU list, the bucket's share of the map.
	entryOverhead = 160
	// shards is one: the conversations of one agent share a head, so sharding by head would put
	// them all in one shard's share of the budget; the lock is held for bookkeeping only (the MAC
	// runs outside it).
	shards = 1
)

// Cache is the skim-state cache. A nil *Cache is a disabled one: Find misses, Store does
// nothing. It is safe for concurrent use.
type Cache struct {
	mac     segmentMAC
	seed    maphash.Seed
	minBody int
	shards  [shards]shard

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
	ends       []int32 // segment ends; the last is state.End()
	tag        [16]byte
	fp         uint64 // maphash of the fpLen bytes before End
	size       int64
	b          *bucket
	prev, next *entry
}

// Hit is the result of Find: the state found and the verified chain Store extends. The zero
// Hit is a miss.
type Hit struct {
	State State
	e     *entry
	tag   [16]byte // the chain's tag over the new body's first State.End() bytes
	ends  []int32
}

// OK reports whether the Find found a state.
func (h Hit) OK() bool { return h.State != nil }

// New returns a Cache, nil when o.Budget <= 0.
func New(o Options) *Cache {
	if o.Budget <= 0 {
		return nil
	}
	c := &Cache{mac: newMAC(o.forceGMAC), seed: maphash.MakeSeed(), minBody: o.MinBody}
	if c.minBody <= 0 {
		c.minBody = DefaultMinBody
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.budget = o.Budget / shards
		s.buckets = map[uint64]*bucket{}
		s.lru.next, s.lru.prev = &s.lru, &s.lru
	}
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

// macFrom extends tag (the chain's tag over body[:from]; zero when from is 0) over body[from:to].
func (c *Cache) macFrom(tag [16]byte, body []byte, from, to int) [16]byte {
	c.hashed.Add(int64(to - from))
	return c.mac.sum(tag, body[from:to])
}

// chain is the tag of the segments ends over body.
func (c *Cache) chain(body []byte, ends []int32) [16]byte {
	var tag [16]byte
	from := 0
	for _, e := range ends {
		tag = c.macFrom(tag, body, from, int(e))
		from = int(e)
	}
	return tag
}

func (c *Cache) shard(uint64) *shard { return &c.shards[0] }

// Find returns the most recently stored state under scope whose prefix body begins with, proved
// by the MAC; else a miss.
func (c *Cache) Find(scope string, body []byte) Hit {
	if !c.Wants(len(body)) {
		return Hit{}
	}
	head := c.headKey(scope, body)
	s := c.shard(head)
	// Pick the candidates under the lock, verify outside it: the MAC is the expensive part.
	var cand [maxVerify]*entry
	var ends [maxVerify][]int32
	var tags [maxVerify][16]byte
	n := 0
	s.mu.Lock()
	if b := s.buckets[head]; b != nil {
		for _, e := range b.entries {
			end := e.state.End()
			if e.scope != scope || end > len(body) || c.fingerprint(body, end) != e.fp {
				continue
			}
			cand[n], ends[n], tags[n] = e, e.ends, e.tag
			if n++; n == maxVerify {
				break
			}
		}
	}
	s.mu.Unlock()
	for i := range n {
		tag := c.chain(body, ends[i])
		if subtle.ConstantTimeCompare(tag[:], tags[i][:]) == 1 {
			s.mu.Lock()
			if cand[i].b != nil {
				s.touch(cand[i])
			}
			s.mu.Unlock()
			c.hits.Add(1)
			return Hit{State: cand[i].state, e: cand[i], tag: tag, ends: ends[i]}
		}
	}
	c.misses.Add(1)
	return Hit{}
}

// Store remembers st for scope: the state of body's first st.End() bytes. from is the Hit the
// body's skim resumed from (zero when none): the new entry extends its chain, hashing only
// body[from.State.End():st.End()], and replaces its entry, since the conversation moved on. A
// from that was not found for this body cannot make a false hit: Find recomputes the chain over
// the body it is given, so an entry extended from a wrong tag never verifies (it only misses).
func (c *Cache) Store(scope string, body []byte, from Hit, st State) {
	if !c.Wants(len(body)) || st == nil {
		return
	}
	end := st.End()
	if end < HeadLen || end > len(body) || end > 1<<31-1 {
		return
	}
	var ends []int32
	var tag [16]byte
	if f := from.State; f != nil && f.End() <= end && len(from.ends) < maxSegments {
		ends = append(make([]int32, 0, len(from.ends)+1), from.ends...)
		tag = from.tag
		if f.End() < end {
			tag = c.macFrom(from.tag, body, f.End(), end)
			ends = append(ends, int32(end))
		}
	} else {
		ends = []int32{int32(end)}
		tag = c.macFrom(tag, body, 0, end)
	}
	e := &entry{scope: scope, state: st, ends: ends, tag: tag, fp: c.fingerprint(body, end),
		size: int64(st.Size()) + int64(4*cap(ends)) + int64(len(scope)) + entryOverhead}
	head := c.headKey(scope, body)
	s := c.shard(head)
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
