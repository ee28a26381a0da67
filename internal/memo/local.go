package memo

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/compactd/compactd/internal/dialect"
)

// Local is a Memo held in this process's memory: what compactd uses when no archive store is
// configured (--archive off), so the transparent policy still compacts once per compaction and
// not once per turn on a single replica. It is bounded (the least recently used record goes
// first) and expiring, keyed like the store by tenant, owner and dialect (and model for speculative
// summaries); it is lost on restart and not shared between replicas — run with an archive store
// for that.
type Local struct {
	max int
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	items map[localKey]*list.Element
	lru   *list.List // front = most recently used
}

type localKey struct {
	kind                 byte // 'c' compaction, 's' speculative summary
	tenant, owner, model string
	dialect              dialect.Name
	prefix               Hash
}

type localEntry struct {
	key          localKey
	conversation string
	items        int
	blob         []byte
	created      time.Time
	expires      time.Time
}

// NewLocal returns an in-memory memo of at most max records (0: 4096) that each live ttl after
// their last use (0: one day).
func NewLocal(max int, ttl time.Duration) *Local {
	if max <= 0 {
		max = 4096
	}
	if ttl <= 0 {
		ttl = 24 * time.Hour
	}
	return &Local{max: max, ttl: ttl, now: time.Now, items: map[localKey]*list.Element{}, lru: list.New()}
}

func tenantOf(k Key) string {
	if k.Tenant == "" {
		return "default"
	}
	return k.Tenant
}

func (l *Local) put(k localKey, conversation string, items int, blob []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	e := &localEntry{key: k, conversation: conversation, items: items, blob: append([]byte(nil), blob...), created: now, expires: now.Add(l.ttl)}
	if el, ok := l.items[k]; ok {
		el.Value = e
		l.lru.MoveToFront(el)
		return
	}
	l.items[k] = l.lru.PushFront(e)
	for l.lru.Len() > l.max {
		old := l.lru.Back()
		delete(l.items, old.Value.(*localEntry).key)
		l.lru.Remove(old)
	}
}

// get returns the live entry under k and extends its life, as a use does in the store.
func (l *Local) get(k localKey) (*localEntry, bool) {
	el, ok := l.items[k]
	if !ok {
		return nil, false
	}
	e := el.Value.(*localEntry)
	now := l.now()
	if now.After(e.expires) {
		delete(l.items, k)
		l.lru.Remove(el)
		return nil, false
	}
	e.expires = now.Add(l.ttl)
	l.lru.MoveToFront(el)
	return e, true
}

func (l *Local) Record(_ context.Context, k Key, prefix Hash, items int, compaction []byte) error {
	l.put(localKey{kind: 'c', tenant: tenantOf(k), owner: k.Owner, dialect: k.Dialect, prefix: prefix}, k.Conversation, items, compaction)
	return nil
}

func (l *Local) Longest(_ context.Context, k Key, prefixes []Hash) (Entry, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := localKey{kind: 'c', tenant: tenantOf(k), owner: k.Owner, dialect: k.Dialect}
	for i := len(prefixes) - 1; i >= 0; i-- {
		key.prefix = prefixes[i]
		if e, ok := l.get(key); ok && e.items == i+1 {
			return Entry{Items: e.items, Prefix: prefixes[i], Compaction: append([]byte(nil), e.blob...), CreatedAt: e.created}, true, nil
		}
	}
	return Entry{}, false, nil
}

func (l *Local) PutSpeculative(_ context.Context, k Key, model string, prefix Hash, items int, summary []byte) error {
	l.put(localKey{kind: 's', tenant: tenantOf(k), owner: k.Owner, dialect: k.Dialect, model: model, prefix: prefix}, k.Conversation, items, summary)
	return nil
}

func (l *Local) Speculative(_ context.Context, k Key, model string, prefix Hash) ([]byte, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.get(localKey{kind: 's', tenant: tenantOf(k), owner: k.Owner, dialect: k.Dialect, model: model, prefix: prefix}); ok {
		return append([]byte(nil), e.blob...), true, nil
	}
	return nil, false, nil
}

// Forget drops every record and speculative summary made in the tenant's conversation. It walks
// all entries (at most max): deleting a conversation is rare and bounded.
func (l *Local) Forget(_ context.Context, tenant, conversation string) (int, error) {
	if conversation == "" {
		return 0, nil
	}
	if tenant == "" {
		tenant = "default"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for el := l.lru.Front(); el != nil; {
		next := el.Next()
		if e := el.Value.(*localEntry); e.key.tenant == tenant && e.conversation == conversation {
			delete(l.items, e.key)
			l.lru.Remove(el)
			n++
		}
		el = next
	}
	return n, nil
}

var _ Memo = (*Local)(nil)
