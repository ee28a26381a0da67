package compact

import (
	"hash/maphash"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/tokenize"
)

// ItemOverhead is the fixed token cost added to every item for its role/type framing in the
// model's rendered prompt.
const ItemOverhead = 4

// DefaultMargin is the relative distance from the threshold inside which Request replaces
// estimates by exact counts. It must exceed the estimator's measured error (see estimate.go).
const DefaultMargin = 0.15

const (
	defaultCacheEntries = 200_000
	cacheShards         = 16
	// textCacheMin is the length from which Text caches its result: shorter strings cost less to
	// tokenize than to hash and look up.
	textCacheMin = 512
	// queueItems and queueBytes bound the background worker's backlog; work beyond them is
	// dropped (the next turn estimates again and re-queues).
	queueItems = 4096
	queueBytes = 64 << 20
	// parallelMin is the uncached volume from which Request counts exactly on all CPUs.
	parallelMin = 256 << 10
)

// CounterOptions configure a Counter. The zero value is usable.
type CounterOptions struct {
	// CacheEntries bounds the number of cached counts (default 200,000; roughly 100 bytes each).
	CacheEntries int
	// Background exact-counts uncached items in one bounded background worker, so that a
	// request counted by estimate this turn is counted exactly on the next.
	Background bool
	// Margin overrides DefaultMargin (fraction of the threshold).
	Margin float64
}

// kinds of cached content; part of the cache key so the same bytes counted as an item and as
// text (which differ by the overhead and by JSON decoding) never share an entry.
const (
	kindItem uint8 = iota + 1
	kindText
	kindTools
	kindJSON // a JSON value counted like an item but without the item overhead
)

type cacheKey struct {
	h    uint64
	n    uint32
	kind uint8
}

type job struct {
	key  cacheKey
	kind uint8
	raw  []byte
}

// Counter counts input tokens with o200k_base, caching counts by content hash. Agents resend the
// same history prefix every turn, so after the first turn only new items need the tokenizer
// (4.5 MB/s); the rest cost a hash (GB/s) and a map lookup. It is safe for concurrent use.
//
// The hash is maphash with a seed drawn per Counter, so clients cannot construct colliding items
// to make one item borrow another's count.
type Counter struct {
	seed   maphash.Seed
	shards [cacheShards]*lru.Cache[cacheKey, int32]
	margin float64

	// bpe counts the tokens of plain text; tests replace it to observe tokenizer calls.
	bpe func(string) int

	queue   chan job
	pending atomic.Int64 // bytes queued
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

// o200k is the process's one o200k_base codec (internal/tokenize), shared with handoff.
func o200k() *tokenize.Encoder { return tokenize.Codec() }

// bpeCount is the tokenizer call. On the (regexp timeout) error path it falls back to the estimate
// rather than failing a request over a count.
func bpeCount(s string) int {
	n, err := o200k().Count(s)
	if err != nil {
		var sc scanner
		sc.scanPlain(s)
		return int(math.Round(sc.f.tokens()))
	}
	return n
}

// NewCounter returns a Counter. Call Close when done if Background is set.
func NewCounter(o CounterOptions) *Counter {
	entries := o.CacheEntries
	if entries <= 0 {
		entries = defaultCacheEntries
	}
	per := max(entries/cacheShards, 1)
	c := &Counter{seed: maphash.MakeSeed(), margin: o.Margin, bpe: bpeCount, stop: make(chan struct{})}
	if c.margin <= 0 {
		c.margin = DefaultMargin
	}
	for i := range c.shards {
		c.shards[i], _ = lru.New[cacheKey, int32](per) // only fails for size <= 0
	}
	o200k()
	if o.Background {
		c.queue = make(chan job, queueItems)
		c.wg.Add(1)
		go c.worker()
	}
	return c
}

// Close stops the background worker and waits for it; queued work is dropped. It is idempotent;
// counting keeps working after Close (without background work).
func (c *Counter) Close() {
	c.once.Do(func() { close(c.stop) })
	c.wg.Wait()
}

func (c *Counter) worker() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		case j := <-c.queue:
			c.pending.Add(-int64(len(j.raw)))
			if _, ok := c.lookup(j.key); !ok {
				c.store(j.key, c.exact(j.kind, bytesToString(j.raw)))
			}
		}
	}
}

// enqueue hands a copy of raw to the background worker if there is room. The copy matters: the
// caller's bytes belong to a request body that may be reused once the request is done.
func (c *Counter) enqueue(k cacheKey, kind uint8, raw []byte) {
	if c.queue == nil || c.pending.Load()+int64(len(raw)) > queueBytes {
		return
	}
	select {
	case <-c.stop:
		return
	default:
	}
	j := job{key: k, kind: kind, raw: append([]byte(nil), raw...)}
	c.pending.Add(int64(len(raw)))
	select {
	case c.queue <- j:
	default:
		c.pending.Add(-int64(len(raw)))
	}
}

func (c *Counter) key(kind uint8, raw []byte) cacheKey {
	return cacheKey{h: maphash.Bytes(c.seed, raw), n: uint32(len(raw)), kind: kind}
}

func (c *Counter) keyString(kind uint8, s string) cacheKey {
	return cacheKey{h: maphash.String(c.seed, s), n: uint32(len(s)), kind: kind}
}

func (c *Counter) shard(k cacheKey) *lru.Cache[cacheKey, int32] {
	return c.shards[(k.h>>59)&(cacheShards-1)]
}

func (c *Counter) lookup(k cacheKey) (int, bool) {
	n, ok := c.shard(k).Get(k)
	return int(n), ok
}

func (c *Counter) store(k cacheKey, n int) {
	c.shard(k).Add(k, int32(min(n, math.MaxInt32)))
}

// exact counts content of the given kind with the tokenizer, uncached.
func (c *Counter) exact(kind uint8, s string) int {
	switch kind {
	case kindText:
		return c.bpe(s)
	case kindItem:
		return ItemOverhead + c.jsonTokens(s, false)
	case kindTools:
		return c.jsonTokens(s, true)
	default:
		return c.jsonTokens(s, false)
	}
}

func (c *Counter) jsonTokens(s string, schemaKeys bool) int {
	n := 0
	walkStrings(s, schemaKeys,
		func(str string) {
			if str != "" {
				n += c.bpe(str)
			}
		},
		func(t int) { n += t })
	return n
}

// estimate approximates content of the given kind without the tokenizer.
func estimate(kind uint8, s string) int {
	if kind == kindText {
		var sc scanner
		sc.scanPlain(s)
		return int(math.Round(sc.f.tokens()))
	}
	var sc scanner
	special := 0
	walkRawStrings(s, kind == kindTools,
		func(lit string) { sc.scanLiteral(lit) },
		func(t int) { special += t })
	n := int(math.Round(sc.f.tokens())) + special
	if kind == kindItem {
		n += ItemOverhead
	}
	return n
}

func (c *Counter) cached(kind uint8, raw []byte) int {
	k := c.key(kind, raw)
	if n, ok := c.lookup(k); ok {
		return n
	}
	n := c.exact(kind, bytesToString(raw))
	c.store(k, n)
	return n
}

// Item returns the exact token count of one Responses input item (its JSON bytes): the BPE
// tokens of every string value except ids, statuses, ciphertext and client metadata, plus
// ItemOverhead. Inline images count a fixed imageTokens. Cached by content hash.
func (c *Counter) Item(raw []byte) int { return c.cached(kindItem, raw) }

// Count is Item for an api.Item; its method value fits Partition's count argument.
func (c *Counter) Count(it api.Item) int { return c.Item(it.Raw) }

// Tools returns the exact token count of a tools array (the string values, plus JSON-schema
// property names, which the model reads). Cached by content hash.
func (c *Counter) Tools(raw []byte) int { return c.cached(kindTools, raw) }

// Text returns the exact token count of plain text; texts of textCacheMin bytes or more are cached.
func (c *Counter) Text(s string) int {
	if len(s) < textCacheMin {
		return c.bpe(s)
	}
	k := c.keyString(kindText, s)
	if n, ok := c.lookup(k); ok {
		return n
	}
	n := c.bpe(s)
	c.store(k, n)
	return n
}

// Estimate approximates Item(raw) from its bytes alone, without the tokenizer and without
// copying strings (error figures in estimate.go); it costs a few percent of exact counting
// (BenchmarkCount: ~20x faster than cold BPE on a contended 2-core machine).
func (c *Counter) Estimate(raw []byte) int { return estimate(kindItem, bytesToString(raw)) }

// part is one countable piece of a request.
type part struct {
	kind uint8
	raw  []byte
	key  cacheKey
	est  int
}

// Request counts instructions + items + tools of a Responses request and reports whether the
// total is exact. instructions and tools are raw JSON values as found in the body (nil or "null"
// when absent; instructions is usually a JSON string).
//
// Cached parts count exactly; uncached parts are estimated. If the estimated total lies within
// ±margin of threshold, the uncached parts are counted exactly (on all CPUs when there is much
// of it) so the decision near the threshold is exact; otherwise they are queued for the
// background worker, if enabled, so the next turn is exact. threshold <= 0 means no decision is
// pending: the total is estimated where not cached.
func (c *Counter) Request(instructions []byte, items []api.Item, tools []byte, threshold int) (total int, exact bool) {
	var uncached []part
	add := func(kind uint8, raw []byte) {
		k := c.key(kind, raw)
		if n, ok := c.lookup(k); ok {
			total += n
			return
		}
		e := estimate(kind, bytesToString(raw))
		total += e
		uncached = append(uncached, part{kind: kind, raw: raw, key: k, est: e})
	}
	if v := instructionsValue(instructions); len(v) > 0 {
		if v[0] == '"' {
			// the string's text, not its JSON escaping, is what the model reads
			total += c.Text(gjson.ParseBytes(v).Str)
		} else {
			add(kindJSON, v)
		}
	}
	for _, it := range items {
		add(kindItem, it.Raw)
	}
	if v := trimJSON(tools); len(v) > 0 && string(v) != "null" && string(v) != "[]" {
		add(kindTools, v)
	}
	if len(uncached) == 0 {
		return total, true
	}
	if threshold > 0 && math.Abs(float64(total-threshold)) <= c.margin*float64(threshold) {
		return c.countExact(total, uncached), true
	}
	for _, p := range uncached {
		c.enqueue(p.key, p.kind, p.raw)
	}
	return total, false
}

// countExact replaces the estimates of parts by exact counts, storing them in the cache.
func (c *Counter) countExact(total int, parts []part) int {
	size := 0
	for _, p := range parts {
		size += len(p.raw)
	}
	workers := 1
	if size >= parallelMin {
		workers = min(runtime.GOMAXPROCS(0), len(parts))
	}
	counts := make([]int, len(parts))
	var next atomic.Int64
	run := func() {
		for {
			i := int(next.Add(1)) - 1
			if i >= len(parts) {
				return
			}
			p := parts[i]
			counts[i] = c.exact(p.kind, bytesToString(p.raw))
			c.store(p.key, counts[i])
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(run)
	}
	run()
	wg.Wait()
	for i, p := range parts {
		total += counts[i] - p.est
	}
	return total
}

func trimJSON(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\n' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\n' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func instructionsValue(b []byte) []byte {
	b = trimJSON(b)
	if string(b) == "null" {
		return nil
	}
	return b
}
