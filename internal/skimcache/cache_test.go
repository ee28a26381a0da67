package skimcache

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// state is a test State: its End and a size, with a payload so the heap test sees real memory.
type state struct {
	end     int
	payload []byte
}

func (s *state) End() int  { return s.end }
func (s *state) Size() int { return len(s.payload) + 48 }

// conversation is a deterministic body of n bytes: a shared head (the agent's instructions), then
// bytes distinct per id.
func conversation(id, n int) []byte {
	r := rand.New(rand.NewPCG(uint64(id), 7))
	b := make([]byte, n)
	copy(b, bytes.Repeat([]byte("You are a coding agent. "), HeadLen/24+1))
	for i := HeadLen + 16; i < n; i++ {
		b[i] = byte('a' + r.IntN(26))
	}
	copy(b[HeadLen:], fmt.Sprintf("conversation %08d", id))
	return b
}

func newTest(budget int64) *Cache {
	return New(Options{Budget: budget, MinBody: 1, forceGMAC: gmacInTests})
}

// gmacInTests makes newTest's caches use the fallback MAC (TestWithGMAC).
var gmacInTests bool

func TestFindAfterStore(t *testing.T) {
	body := conversation(1, 64<<10)
	st := &state{end: 60 << 10}
	for _, tc := range []struct {
		name  string
		scope string
		edit  func(b []byte) []byte
		hit   bool
	}{
		{"same bytes", "s", nil, true},
		{"longer body, same prefix", "s", func(b []byte) []byte { return append(b, ",more"...) }, true},
		{"byte after End changed", "s", func(b []byte) []byte { b[60<<10] ^= 1; return b }, true},
		{"first byte changed", "s", func(b []byte) []byte { b[0] ^= 1; return b }, false},
		{"byte in the head changed", "s", func(b []byte) []byte { b[HeadLen/2] ^= 1; return b }, false},
		{"byte in the middle changed", "s", func(b []byte) []byte { b[30<<10] ^= 1; return b }, false},
		{"last byte before End changed", "s", func(b []byte) []byte { b[60<<10-1] ^= 1; return b }, false},
		{"byte just before the fingerprint changed", "s", func(b []byte) []byte { b[60<<10-fpLen-1] ^= 1; return b }, false},
		{"body shorter than End", "s", func(b []byte) []byte { return b[:60<<10-1] }, false},
		{"other scope", "t", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTest(1 << 20)
			c.Store("s", body, Hit{}, st)
			b := bytes.Clone(body)
			if tc.edit != nil {
				b = tc.edit(b)
			}
			h := c.Find(tc.scope, b, nil)
			if h.OK() != tc.hit {
				t.Fatalf("hit %v, want %v", h.OK(), tc.hit)
			}
			if tc.hit && h.State != st {
				t.Fatal("a different state came back")
			}
		})
	}
}

// TestTurnHashesItsBodyOnce: a conversation of five turns, each storing from the last hit:
// every turn finds the last state, and a turn (Find then Store) hashes its body once, plus less
// than a chunk for each prefix it proves or stores; with the chain advanced while the body was
// read, Find and Store hash only those part chunks.
func TestTurnHashesItsBodyOnce(t *testing.T) {
	for _, advanced := range []bool{false, true} {
		c := newTest(1 << 20)
		full := conversation(2, 600<<10)
		ends := []int{40 << 10, 150<<10 + 7, 300 << 10, 450<<10 + 1, 600 << 10}
		var hit Hit
		for i, end := range ends {
			body := full[:end]
			var m *BodyMAC
			if advanced {
				buf := bytes.Clone(body)
				m = c.NewBodyMAC(buf)
				for n := 0; n < len(buf); n = min(n+7000, len(buf)) { // as reads arrive
					m.Advance(buf[:n])
				}
				m.Advance(buf)
				body = buf
			}
			before := c.hashed.Load()
			hit = c.Find("s", body, m)
			if i > 0 && (!hit.OK() || hit.State.End() != ends[i-1]) {
				t.Fatalf("turn %d: no hit on the last turn's state", i)
			}
			c.Store("s", body, hit, &state{end: end})
			got := c.hashed.Load() - before
			// Whole chunks once (unless advanced already), then a part chunk per proof and store.
			want := 0
			if !advanced {
				want = end / chunkLen * chunkLen
			}
			if i > 0 {
				want += ends[i-1] % chunkLen
			}
			want += end % chunkLen
			if got != int64(want) {
				t.Fatalf("advanced=%v turn %d: hashed %d bytes, want %d", advanced, i, got, want)
			}
		}
		if st := c.Stats(); st.Entries != 1 || st.Hits != 4 || st.Stores != 5 {
			t.Fatalf("stats %+v: the conversation must be one entry, replaced each turn", st)
		}
		// An edit anywhere before the last End breaks the proof: in a whole chunk, or in the
		// part chunk after them.
		for _, at := range []int{0, 100 << 10, 9*chunkLen - 1, 9*chunkLen + 3} {
			b := bytes.Clone(full)
			b[at] ^= 1
			if c.Find("s", b, nil).OK() {
				t.Fatalf("an edit at byte %d still hit", at)
			}
		}
		if !c.Find("s", full, nil).OK() {
			t.Fatal("the unedited body missed")
		}
	}
}

// TestBodyMACForAnotherBuffer: a chain made for one buffer is never applied to another, even of
// the same bytes' length, so a stale or foreign chain cannot vouch for other bytes.
func TestBodyMACForAnotherBuffer(t *testing.T) {
	c := newTest(1 << 20)
	b := conversation(2, 200<<10)
	a := bytes.Clone(b)
	a[10<<10] ^= 1 // in the first chunk, which b's chain covers
	c.Store("s", b, Hit{}, &state{end: 150 << 10})
	m := c.NewBodyMAC(b)
	m.Advance(b) // b's chain, offered with a's bytes
	if c.Find("s", a, m).OK() {
		t.Fatal("another buffer's chain made a hit")
	}
	if !c.Find("s", b, m).OK() {
		t.Fatal("b's own chain missed")
	}
}

func TestBudgetEvicts(t *testing.T) {
	c := newTest(1 << 20)
	for i := range 500 {
		c.Store("s", conversation(i, 8<<10), Hit{}, &state{end: 8 << 10, payload: make([]byte, 4<<10)})
	}
	st := c.Stats()
	if st.Bytes > 1<<20 || st.Evictions == 0 || st.Entries >= 500 {
		t.Fatalf("stats %+v: over budget or nothing evicted", st)
	}
	// The most recent are kept.
	if !c.Find("s", conversation(499, 8<<10), nil).OK() {
		t.Fatal("the last stored conversation was evicted")
	}
	// A state bigger than the budget is not kept.
	c.Store("s", conversation(9999, 8<<10), Hit{}, &state{end: 8 << 10, payload: make([]byte, 2<<20)})
	if c.Find("s", conversation(9999, 8<<10), nil).OK() {
		t.Fatal("a state over the budget was stored")
	}
}

// TestMemoryBoundTenThousandConversations: 10,000 conversations, each remembered with a 20 KB
// state, into a 16 MiB cache: the cache's count stays within the budget, and so does the heap it
// keeps alive (the test drops its own references; the states the cache holds are what remains).
func TestMemoryBoundTenThousandConversations(t *testing.T) {
	const budget = 16 << 20
	const slack = 4 << 20 // the map's buckets and the runtime's own rounding
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	c := newTest(budget)
	for i := range 10_000 {
		body := conversation(i, 4<<10)
		c.Store(fmt.Sprintf("tenant-%d", i%7), body, Hit{}, &state{end: 3 << 10, payload: make([]byte, 20<<10)})
	}
	st := c.Stats()
	if st.Bytes > budget {
		t.Fatalf("cache counts %d bytes, budget %d", st.Bytes, budget)
	}
	if st.Entries > budget/(20<<10) || st.Entries < budget/(20<<10)/2 {
		t.Fatalf("%d entries for a %d budget of ~20 KB states", st.Entries, budget)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	if grown := int64(ms.HeapAlloc) - int64(before); grown > budget+slack {
		t.Fatalf("heap grew by %d bytes holding the cache, budget %d + slack %d", grown, budget, slack)
	}
	runtime.KeepAlive(c)
}

func TestDisabled(t *testing.T) {
	for _, c := range []*Cache{nil, New(Options{Budget: 0}), New(Options{Budget: -1})} {
		body := conversation(1, 64<<10)
		c.Store("s", body, Hit{}, &state{end: 60 << 10})
		if c.Find("s", body, nil).OK() || c.Wants(len(body)) || c.Stats() != (Stats{}) {
			t.Fatal("a disabled cache answered")
		}
	}
	c := New(Options{Budget: 1 << 20})
	small := conversation(1, 16<<10)
	c.Store("s", small, Hit{}, &state{end: 16 << 10})
	if c.Find("s", small, nil).OK() || c.Stats().Misses != 0 {
		t.Fatal("a body under MinBody was stored or counted")
	}
}

// TestKeyPerCache: two caches never agree on a tag (a key each), so nothing outside one cache
// can compute what it will accept.
func TestKeyPerCache(t *testing.T) {
	a, b := newTest(1<<20), newTest(1<<20)
	body := conversation(1, 8<<10)
	if a.mac([16]byte{}, body) == b.mac([16]byte{}, body) {
		t.Fatal("two caches computed the same MAC")
	}
}

func TestConcurrent(t *testing.T) {
	c := newTest(4 << 20)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			full := conversation(g%3, 64<<10)
			var hit Hit
			for end := 8 << 10; end <= 64<<10; end += 4 << 10 {
				body := full[:end]
				hit = c.Find(fmt.Sprint(g%2), body, nil)
				c.Store(fmt.Sprint(g%2), body, hit, &state{end: end})
			}
		}()
	}
	wg.Wait()
	if st := c.Stats(); st.Hits == 0 || st.Bytes > 4<<20 {
		t.Fatalf("stats %+v", st)
	}
}

// BenchmarkTurn: one 2 MB turn that extends the last by 20 KB — Find (the MAC over the prefix)
// and Store (the MAC over the tail).
func BenchmarkTurn(b *testing.B) {
	c := New(Options{Budget: 64 << 20})
	full := conversation(1, 3<<20)
	end := 2 << 20
	c.Store("s", full[:end], Hit{}, &state{end: end})
	b.SetBytes(int64(end))
	b.ReportAllocs()
	for b.Loop() {
		h := c.Find("s", full[:end+20<<10], nil)
		if !h.OK() {
			b.Fatal("miss")
		}
		c.Store("s", full[:end+20<<10], h, &state{end: end}) // same End: the chain is kept
	}
}

func BenchmarkMiss(b *testing.B) {
	c := New(Options{Budget: 64 << 20})
	body := conversation(1, 2<<20)
	c.Store("s", conversation(2, 2<<20), Hit{}, &state{end: 2 << 20})
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		c.Find("s", body, nil)
	}
}

// TestManyConversationsOneHead: an agent's conversations share their first kilobytes (the same
// instructions and tools); 300 of them, growing in turn, each find their own last state.
func TestManyConversationsOneHead(t *testing.T) {
	c := newTest(64 << 20)
	const n = 300
	fulls := make([][]byte, n)
	hits := make([]Hit, n)
	for i := range fulls {
		fulls[i] = conversation(i, 40<<10)
	}
	for turn := range 4 {
		end := (2 + turn) * 8 << 10
		for i := range fulls {
			body := fulls[i][:end]
			if turn > 0 {
				h := c.Find("s", body, nil)
				if !h.OK() || h.State.End() != end-8<<10 {
					t.Fatalf("conversation %d, turn %d: no hit on its own state", i, turn)
				}
				hits[i] = h
			}
			c.Store("s", body, hits[i], &state{end: end})
		}
	}
	if st := c.Stats(); st.Entries != n {
		t.Fatalf("%d entries, want one per conversation (%d)", st.Entries, n)
	}
}

// TestWrongFromNeverHits: a Hit found for one body, passed to Store with another, makes no entry
// that verifies for bytes it was not computed over — its chain is for another buffer, so Store
// hashes the body it is given.
func TestWrongFromNeverHits(t *testing.T) {
	c := newTest(1 << 20)
	a, b := conversation(1, 40<<10), conversation(2, 40<<10) // the same head, other bytes
	c.Store("s", a[:20<<10], Hit{}, &state{end: 20 << 10})
	h := c.Find("s", a, nil)
	if !h.OK() {
		t.Fatal("no hit on a")
	}
	c.Store("s", b, h, &state{end: 40 << 10})
	if got := c.Find("s", b, nil); !got.OK() {
		t.Fatal("b's entry, stored with a's Hit, does not prove b's bytes")
	}
	c2 := bytes.Clone(b)
	c2[30<<10] ^= 1
	if c.Find("s", c2, nil).OK() {
		t.Fatal("an entry stored with another body's Hit proved other bytes")
	}
}

// TestFindPastAFailedCandidate: the most recent entry under a head has the right scope, an End
// within the body and the body's fingerprint there, yet is another conversation's (its bytes
// differ before the fingerprint's 64): its MAC fails and the walk goes on to the body's own
// entry.
func TestFindPastAFailedCandidate(t *testing.T) {
	c := newTest(1 << 20)
	end := 32 << 10
	own, other := conversation(1, 40<<10), conversation(2, 40<<10)
	copy(other[end-fpLen:end], own[end-fpLen:end]) // the same fingerprint at end
	c.Store("s", own[:end], Hit{}, &state{end: end})
	c.Store("s", other[:end], Hit{}, &state{end: end}) // stored last: walked first
	h := c.Find("s", own, nil)
	if !h.OK() || h.e.tag != c.Find("s", own[:end], nil).e.tag {
		t.Fatal("the body's own entry was not found behind a colliding one")
	}
	if h := c.Find("s", other, nil); !h.OK() {
		t.Fatal("the colliding entry's own body does not find it")
	}
}

// BenchmarkFindOneHead: a turn's lookup where 1,000 finished conversations of the same agent
// share the body's head (each left its last state) and the live conversation stored last.
func BenchmarkFindOneHead(b *testing.B) {
	c := New(Options{Budget: 64 << 20, MinBody: 1})
	const n = 1000
	end := 8 << 10
	for i := range n {
		c.Store("s", conversation(i, end+HeadLen)[:end+HeadLen], Hit{}, &state{end: end + HeadLen})
	}
	live := conversation(n, 2*end)
	c.Store("s", live[:end], Hit{}, &state{end: end})
	b.ReportAllocs()
	for b.Loop() {
		if !c.Find("s", live, nil).OK() {
			b.Fatal("miss")
		}
	}
}
