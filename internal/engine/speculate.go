package engine

import (
	"container/list"
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"time"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/memo"
)

// Speculative compaction. A summary takes a model seconds to write, and the turn that crosses the
// threshold would wait for it. So once a conversation passes a fraction of its threshold,
// compactd starts summarising the part of it that will certainly be compacted — everything
// before the newest user message — in the background, keyed by a hash of exactly those items.
// When the crossing turn arrives and begins with the same items, the ready summary is used for
// that prefix and the items after it are kept verbatim behind the summary (the payload records
// how many, so the next turn's handoff rebuilds the same context). A changed prefix simply misses
// and the turn compacts the normal way. Memory and concurrency are bounded, and jobs nobody
// collects are cancelled when they expire or are evicted.

// Defaults of zero SpeculativeConfig fields.
const (
	DefaultSpeculativeFraction      = 0.85
	DefaultSpeculativeMaxEntries    = 128
	DefaultSpeculativeMaxConcurrent = 2
	DefaultSpeculativeTTL           = 15 * time.Minute
)

// SpeculativeConfig bounds speculative compaction.
type SpeculativeConfig struct {
	// Fraction of the threshold at which to start (default 0.85); negative turns it off.
	Fraction float64
	// MaxEntries bounds the remembered summaries (default 128); the oldest is evicted first.
	MaxEntries int
	// MaxConcurrent bounds background summarisations (default 2); past it, nothing is started.
	MaxConcurrent int
	// TTL is how long an unused summary is kept (default 15m).
	TTL time.Duration
	// MinGrowth is how much a conversation must have grown, as a share of its threshold, since
	// the newest summary this replica holds (or is writing) for a prefix of it, before another
	// is started (default: half the room between Fraction and the threshold). Every turn past
	// the fraction would otherwise start a summary of its own, slightly longer prefix, and all
	// but the last are paid for and never used; with it, the crossing turn uses a summary at
	// most MinGrowth behind and keeps what followed verbatim. Negative: a summary every turn.
	MinGrowth float64
}

// specResult is what a background job prepares: the summary and its facts ledger, so the
// crossing turn only has to seal.
type specResult struct {
	res    summarizer.Result
	ledger string
}

type specEntry struct {
	key uint64
	// tenant and conversation say what the summary was made in (Engine.Forget).
	tenant, conversation string
	n                    int // length of the prefix (in items) the summary covers
	total                int // tokens of the turn that started it (MinGrowth)
	done                 chan struct{}
	out                  specResult
	err                  error
	cancel               context.CancelFunc
	expires              time.Time
	elem                 *list.Element
}

type speculator struct {
	cfg  SpeculativeConfig
	seed maphash.Seed
	// canon, when set, is the dialect's canonical form of an item (the memo's), which the
	// prefix hashes are taken over instead of the raw bytes: a client that respells an earlier
	// item between turns (Claude Code moves cache_control to the newest message every request)
	// still finds the summary prepared for the same conversation. Keyed per model string, so
	// one speculator serves every dialect: a dialect without canonical forms hashes raw bytes.
	canon func(key string) dialect.Name
	sem   chan struct{}

	mu      sync.Mutex
	entries map[uint64]*specEntry
	order   *list.List  // front = newest
	lengths map[int]int // prefix length -> live entries with it, so lookups try only those
	now     func() time.Time

	// Lifecycle: every job runs on a context derived from base, which stop cancels; jobs counts
	// the running job goroutines so stop can wait for them. closed (under mu) refuses new jobs
	// once stop has begun, so jobs.Add never races jobs.Wait.
	base    context.Context
	stopAll context.CancelFunc
	jobs    sync.WaitGroup
	closed  bool
}

func newSpeculator(cfg SpeculativeConfig) *speculator {
	if cfg.Fraction == 0 {
		cfg.Fraction = DefaultSpeculativeFraction
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultSpeculativeMaxEntries
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = DefaultSpeculativeMaxConcurrent
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultSpeculativeTTL
	}
	if cfg.MinGrowth == 0 && cfg.Fraction < 1 {
		cfg.MinGrowth = (1 - cfg.Fraction) / 2
	}
	base, stopAll := context.WithCancel(context.Background())
	return &speculator{
		cfg: cfg, seed: maphash.MakeSeed(), sem: make(chan struct{}, cfg.MaxConcurrent), canon: specCanon,
		entries: map[uint64]*specEntry{}, order: list.New(), lengths: map[int]int{}, now: time.Now,
		base: base, stopAll: stopAll,
	}
}

// prefixHashes returns h[i] = hash of items[:i] (and the key: dialect and model), for every i:
// over each item's canonical form when the key's dialect has one (an item that has none ends the
// chain: the hashes past it are of no prefix any turn can match), else over its raw bytes.
func (sp *speculator) prefixHashes(key string, items []api.Item) []uint64 {
	out := make([]uint64, len(items)+1)
	var h maphash.Hash
	h.SetSeed(sp.seed)
	h.WriteString(key)
	out[0] = h.Sum64()
	var chain *memo.Chain
	if sp.canon != nil {
		if d := sp.canon(key); d != "" {
			chain = memo.NewChain(d)
		}
	}
	var n [8]byte
	for i, it := range items {
		if chain != nil {
			c, err := chain.Add(it.Raw)
			if err != nil {
				for j := i + 1; j < len(out); j++ {
					out[j] = ^uint64(0) - uint64(j) // matches nothing a valid prefix hashes to, in practice
				}
				return out
			}
			h.Write(c[:])
		} else {
			binary.LittleEndian.PutUint64(n[:], uint64(len(it.Raw)))
			h.Write(n[:])
			h.Write(it.Raw)
		}
		out[i+1] = h.Sum64()
	}
	return out
}

// speculationPrefix is the prefix that is sure to be compacted: everything before the newest
// user message, or before the last safe cut ahead of it (compact.SafeCuts: on Messages the
// newest user message is often a tool_result, whose tool_use must stay with it). 0 when there is
// nothing worth summarising.
func speculationPrefix(items []api.Item) int {
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].IsUserMessage() {
			n := compact.SafeCut(compact.SafeCuts(items), i)
			for _, it := range items[:n] {
				if !compact.IsContext(it) { // something to summarise, not only instructions and tool lists
					return n
				}
			}
			return 0
		}
	}
	return 0
}

// start begins summarising items[:n] in the background unless it is already known, a summary
// of a shorter prefix is recent enough (less than minGrowth tokens behind total, the turn's
// tokens: covered), the pool is full, or the prefix is empty. run does the summarising with a
// context the speculator cancels.
func (sp *speculator) start(model string, sc Scope, items []api.Item, total, minGrowth int, run func(ctx context.Context, prefix []api.Item) (specResult, error)) (started, covered bool) {
	n := speculationPrefix(items)
	if n == 0 {
		return false, false
	}
	hashes := sp.prefixHashes(model, items[:n])
	key := hashes[n]
	sp.mu.Lock()
	if sp.closed {
		sp.mu.Unlock()
		return false, false
	}
	sp.expireLocked()
	if _, ok := sp.entries[key]; ok {
		sp.mu.Unlock()
		return false, false
	}
	for m := range sp.lengths {
		if m >= n {
			continue
		}
		if e, ok := sp.entries[hashes[m]]; ok && e.n == m && total-e.total < minGrowth && !e.failed() {
			sp.mu.Unlock()
			return false, true
		}
	}
	select {
	case sp.sem <- struct{}{}:
	default:
		sp.mu.Unlock()
		return false, false
	}
	ctx, cancel := context.WithCancel(sp.base)
	e := &specEntry{key: key, tenant: sc.Tenant, conversation: sc.Conversation, n: n, total: total, done: make(chan struct{}), cancel: cancel, expires: sp.now().Add(sp.cfg.TTL)}
	e.elem = sp.order.PushFront(e)
	sp.entries[key] = e
	sp.lengths[n]++
	for sp.order.Len() > sp.cfg.MaxEntries {
		sp.removeLocked(sp.order.Back().Value.(*specEntry))
	}
	sp.jobs.Add(1)
	sp.mu.Unlock()
	prefix := append([]api.Item(nil), items[:n]...) // the caller's slice is reused after the turn
	go func() {
		defer sp.jobs.Done()
		defer func() { <-sp.sem }()
		e.out, e.err = run(ctx, prefix)
		close(e.done)
	}()
	return true, false
}

// failed reports whether the job has finished without a summary (a running job has not failed).
func (e *specEntry) failed() bool {
	select {
	case <-e.done:
		return e.err != nil || e.out.res.Summary == ""
	default:
		return false
	}
}

// lookup finds a summary of the longest known prefix of items that ends at a safe cut of them
// (safe: compact.SafeCuts(items); nil computes it). It returns the prefix length and the entry
// (which may still be running), or 0, nil on a miss. A hit is removed: a summary is used once.
func (sp *speculator) lookup(model string, items []api.Item, safe []bool) (int, *specEntry) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.expireLocked()
	if len(sp.entries) == 0 {
		return 0, nil
	}
	hashes := sp.prefixHashes(model, items)
	if safe == nil {
		safe = compact.SafeCuts(items)
	}
	best := (*specEntry)(nil)
	for n := range sp.lengths {
		if n >= len(hashes) || !safe[n] {
			continue
		}
		if e, ok := sp.entries[hashes[n]]; ok && e.n == n && (best == nil || n > best.n) {
			best = e
		}
	}
	if best == nil {
		return 0, nil
	}
	sp.order.Remove(best.elem)
	delete(sp.entries, best.key)
	if sp.lengths[best.n]--; sp.lengths[best.n] == 0 {
		delete(sp.lengths, best.n)
	}
	return best.n, best
}

func (sp *speculator) removeLocked(e *specEntry) {
	e.cancel()
	sp.order.Remove(e.elem)
	delete(sp.entries, e.key)
	if sp.lengths[e.n]--; sp.lengths[e.n] == 0 {
		delete(sp.lengths, e.n)
	}
}

func (sp *speculator) expireLocked() {
	now := sp.now()
	for el := sp.order.Back(); el != nil; {
		e := el.Value.(*specEntry)
		prev := el.Prev()
		if now.After(e.expires) {
			sp.removeLocked(e)
		}
		el = prev
	}
}

// forget drops (and cancels) every entry made in the tenant's conversation.
func (sp *speculator) forget(tenant, conversation string) int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	n := 0
	for el := sp.order.Front(); el != nil; {
		next := el.Next()
		if e := el.Value.(*specEntry); e.tenant == tenant && e.conversation == conversation && conversation != "" {
			sp.removeLocked(e)
			n++
		}
		el = next
	}
	return n
}

// close cancels every job.
func (sp *speculator) close() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for el := sp.order.Front(); el != nil; el = sp.order.Front() {
		sp.removeLocked(el.Value.(*specEntry))
	}
}

// stop ends speculation for good: no job starts after it, every job is cancelled (also those a
// turn has already taken out of the cache and is awaiting: they share the base context), and it
// waits until their goroutines have returned or ctx is done. A turn still waiting on a cancelled
// job sees it fail and compacts the normal way.
func (sp *speculator) stop(ctx context.Context) error {
	sp.mu.Lock()
	sp.closed = true
	sp.mu.Unlock()
	sp.stopAll()
	sp.close()
	done := make(chan struct{})
	go func() { sp.jobs.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("speculative compaction: jobs still running: %w", context.Cause(ctx))
	}
}

// Speculating reports whether a turn of total tokens is past the speculative fraction of limit.
func (e *Engine) Speculating(total, limit int) bool {
	return e.spec != nil && float64(total) >= e.spec.cfg.Fraction*float64(limit)
}

// specKey keys speculation by dialect and model: two dialects' prefixes are different bytes, and
// a summary written for one is never used by the other; and by tenant and owner, like the memo:
// a summary prepared for one owner's conversation is never handed to another's request.
// The key also names the dialect whose canonical form (the memo's, when Dialect.Memo) the prefix
// hashes are taken over (specCanon), "" for raw bytes.
func specKey(d Dialect, model, tenant, owner string) string {
	canon := dialect.Name("")
	if d.Memo {
		canon = d.Name
	}
	return string(d.Name) + "\x00" + string(canon) + "\x00" + model + "\x00" + tenant + "\x00" + owner
}

// specCanon is the dialect whose canonical form a specKey names ("" for none).
func specCanon(key string) dialect.Name {
	_, rest, _ := strings.Cut(key, "\x00")
	d, _, _ := strings.Cut(rest, "\x00")
	return dialect.Name(d)
}

// SpecRequest is a below-threshold turn that may start a background summary.
type SpecRequest struct {
	Dialect Dialect
	Tenant  string
	// Owner and Conversation are as in Request: whose summary it is and what it was made in.
	Owner, Conversation string
	Model               string
	Auth                summarizer.Auth
	// Units and Prefix are as in Request (nil Prefix: units are the neutral items themselves).
	Units  []api.Item
	Prefix func(n int) []api.Item
	// Retain is the dialect's retain budget: the job partitions with it, so its window is the one
	// the crossing turn would compute.
	Retain       int
	Total, Limit int
}

// Speculate starts a background summary (and ledger, and gap check) of the part of a turn that
// is sure to be compacted when the turn is past the speculative fraction of its threshold. It
// never blocks the turn: a full pool or a known prefix starts nothing.
func (e *Engine) Speculate(r SpecRequest) {
	if !e.Speculating(r.Total, r.Limit) {
		return
	}
	minGrowth := int(e.spec.cfg.MinGrowth * float64(r.Limit))
	sc := Scope{Tenant: r.Tenant, Owner: r.Owner, Conversation: r.Conversation}
	started, covered := e.spec.start(specKey(r.Dialect, r.Model, r.Tenant, r.Owner), sc, r.Units, r.Total, minGrowth, func(ctx context.Context, p []api.Item) (specResult, error) {
		items := p
		if r.Prefix != nil {
			items = r.Prefix(len(p))
		}
		// The crossing turn's window and saving rule (Compact), with the threshold for the turn's
		// size: a prefix the crossing turn would not compact is not summarised either.
		w := compact.Partition(items, r.Retain, e.countItem)
		replaced := e.replacedTokens(items, w, r.Retain)
		if replaced == 0 {
			return specResult{}, ErrNothingToCompact
		}
		if err := e.enoughSaving(Request{Dialect: r.Dialect, TokensBefore: r.Limit}, replaced); err != nil {
			return specResult{}, err
		}
		res, err := e.summarizer(r.Dialect.Name).Summarize(ctx, summarizer.Request{Model: r.Model, Entries: compact.RenderEntries(items, w.Summarise), Auth: r.Auth})
		if err != nil {
			return specResult{}, err
		}
		e.capSummary(r.Dialect.Name, &res)
		out := specResult{res: res, ledger: e.ledger(ctx, r.Dialect.Name, r.Auth, r.Model, items, w, res, &res.Usage)}
		e.shareSpeculation(ctx, r.Dialect, sc, r.Model, p, out)
		return out, nil
	})
	switch {
	case started:
		e.obs.Speculative("started")
	case covered:
		e.obs.Speculative("covered")
	}
}

// useSpeculation returns a ready (or running, then awaited) summary of a prefix of the turn's
// units, with the prefix length: this replica's own, or one another replica prepared and
// shared through the memo. n == 0 means the turn must compact the normal way.
func (e *Engine) useSpeculation(ctx context.Context, in Request, items []api.Item) (int, specResult) {
	if e.spec == nil {
		return 0, specResult{}
	}
	safe := compact.SafeCuts(items) // a summary is used only for a prefix that ends at a safe cut
	n, en := e.spec.lookup(specKey(in.Dialect, in.Model, in.Tenant, in.Owner), items, safe)
	if en == nil {
		if n, out := e.sharedSpeculation(ctx, in.Dialect, Scope{Tenant: in.Tenant, Owner: in.Owner}, in.Model, items, safe); n > 0 {
			e.obs.Speculative("hit")
			return n, out
		}
		e.obs.Speculative("miss")
		return 0, specResult{}
	}
	select {
	case <-en.done:
	case <-ctx.Done():
		en.cancel()
		return 0, specResult{}
	}
	if en.err != nil || en.out.res.Summary == "" {
		e.obs.Speculative("failed")
		return 0, specResult{}
	}
	e.obs.Speculative("hit")
	return n, en.out
}
