package memo

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/compactd/compactd/internal/dialect"
)

// Hash is one link of a conversation's prefix-hash chain: H_n names the first n items.
type Hash [sha256.Size]byte

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// seedDomain versions the chain: changing any canonicalisation rule must change it, so records
// written under old rules simply stop matching (misses, not wrong hits). v2: lone surrogate
// escapes keep their spelling; v1 read them as U+FFFD, so a v1 record of a conversation with
// "\ud800" names the same chain as one with a real U+FFFD, which v2 still canonicalises as v1
// did — without the new domain that record would stay a wrong hit.
const seedDomain = "compactd/memo/v2\x00"

// Seed is H_0 for a dialect: the hash of an empty prefix.
func Seed(d dialect.Name) Hash { return sha256.Sum256([]byte(seedDomain + string(d))) }

// Chain computes the rolling prefix hash H_n = sha256(H_{n-1} || canon(item_n)) one item at a
// time, so the engine hashes every prefix of an input in one pass over it. canon(item) is one
// JSON value, self-delimiting, and H_{n-1} is fixed-size, so the concatenation is unambiguous.
// A Chain reuses its buffers across items; it is not safe for concurrent use.
type Chain struct {
	d   dialect.Name
	cur Hash
	t   tree
	err error
}

// NewChain starts a chain at Seed(d). An unknown dialect makes every Add fail with ErrDialect.
func NewChain(d dialect.Name) *Chain {
	c := &Chain{d: d, cur: Seed(d)}
	if !d.Valid() {
		_, c.err = c.t.canonical(d, nil)
	}
	return c
}

// Add extends the chain by one item and returns the new H_n. After an error the chain is stuck:
// every later Add returns the same error, because hashes past a bad item would name nothing.
func (c *Chain) Add(item []byte) (Hash, error) {
	if c.err != nil {
		return c.cur, c.err
	}
	canon, err := c.t.canonical(c.d, item)
	if err != nil {
		c.err = err
		return c.cur, err
	}
	h := sha256.New()
	h.Write(c.cur[:])
	h.Write(canon)
	h.Sum(c.cur[:0])
	// Large items leave large buffers behind; do not pin them for the rest of the input.
	if cap(c.t.out) > 1<<20 {
		c.t = tree{}
	}
	return c.cur, nil
}

// Prefixes returns H_1..H_len(items): out[i] names items[0..i]. On an item that cannot be
// canonicalised it returns the hashes before it with the error, so the caller can still look
// up a shorter prefix (or, simpler, treat the error as a memo miss).
func Prefixes(d dialect.Name, items []json.RawMessage) ([]Hash, error) {
	c := NewChain(d)
	out := make([]Hash, 0, len(items))
	for _, it := range items {
		h, err := c.Add(it)
		if err != nil {
			return out, err
		}
		out = append(out, h)
	}
	return out, nil
}
