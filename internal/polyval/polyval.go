// Package polyval is POLYVAL (RFC 8452, the universal hash of AES-GCM-SIV) over GF(2^128), with
// VPCLMULQDQ implementations that multiply four blocks per instruction (AVX-512) or two (AVX2,
// for CPUs that have VPCLMULQDQ on 256-bit registers only, such as AMD Zen 3).
//
// It exists for one job: proving, at memory speed, that a request body begins with bytes
// compactd has seen before (internal/skimcache). The standard library's GHASH (crypto/cipher's
// GCM) multiplies one block per PCLMULQDQ: ~13 GB/s on the Xeon compactd was first measured on,
// 4–6 GB/s on an AMD Zen 3, 0.16–0.56 ms for a 2 MB agent history, which is most of compactd's
// extra CPU on such a turn (BENCHMARKS.md, issue 27); no maintained Go library offers a wider
// GHASH or POLYVAL.
//
// POLYVAL rather than GHASH: the two are the same hash up to a byte reversal (RFC 8452, appendix
// A), but POLYVAL's little-endian field elements are the CPU's own, so blocks need no byte swap.
//
// POLYVAL is a universal hash, not a MAC: for a secret key H, two different messages of at most L
// blocks collide with probability at most L/2^128, provided their values never reach whoever
// chooses the messages. Callers that need a MAC encrypt the result (Wegman-Carter), and add a
// length block so that a message and the same message with zero bytes appended differ.
//
// The pure-Go implementation is the reference and the fallback; Accelerated says whether a fast
// path is used, Implementation which. All compute the same function, bit for bit (the tests
// compare them, and compare each against crypto/cipher's GCM tags through the GHASH relation).
package polyval

import "encoding/binary"

// implementation is one way of adding blocks to a running value.
type implementation uint8

const (
	generic implementation = iota // pure Go, constant time
	avx2                          // VPCLMULQDQ on 256-bit registers: 2 blocks an instruction
	avx512                        // VPCLMULQDQ on 512-bit registers: 4 blocks an instruction
)

func (i implementation) String() string {
	switch i {
	case avx2:
		return "avx2"
	case avx512:
		return "avx512"
	}
	return "generic"
}

// impl is the implementation in use: the fastest this CPU runs (tests switch it).
var impl = supported[0]

// Accelerated reports whether a hardware implementation is in use: POLYVAL then runs at memory
// speed, faster than the standard library's GHASH.
func Accelerated() bool { return impl != generic }

// Implementation names the implementation in use: "avx512", "avx2" or "generic".
func Implementation() string { return impl.String() }

// BlockSize is POLYVAL's block size in bytes.
const BlockSize = 16

// Key is a POLYVAL key, with the powers of H the wide implementation multiplies by. It is
// read-only after New and safe for concurrent use.
type Key struct {
	// pow[i] is H^(64-i) in the Montgomery domain of dot (pow[63] is H): the 64 blocks of one
	// step of a wide loop are multiplied, lane by lane, by pow[0..63], the m blocks of a
	// shorter AVX2 step by pow[64-m..63].
	pow [64]elem
	// kpow[i].lo is pow[i].lo^pow[i].hi, the power's factor in Karatsuba's middle product (the
	// AVX2 implementation's: three multiplications a block rather than four).
	kpow [64]elem
}

// elem is a field element: lo holds the coefficients of x^0..x^63, hi those of x^64..x^127.
type elem struct{ lo, hi uint64 }

// New returns the key for H (16 bytes, little endian as RFC 8452 writes it).
func New(h [16]byte) *Key {
	k := &Key{}
	x := load(h[:])
	k.pow[len(k.pow)-1] = x
	for i := len(k.pow) - 2; i >= 0; i-- {
		k.pow[i] = dot(k.pow[i+1], x)
	}
	for i, p := range k.pow {
		k.kpow[i] = elem{p.lo ^ p.hi, 0}
	}
	return k
}

// Hash is a running POLYVAL: the value over the blocks written so far. The zero Hash is the
// empty message's, under no key; use Key.Hash.
type Hash struct {
	k   *Key
	acc elem
}

// Hash returns a running POLYVAL under k, starting from the empty message.
func (k *Key) Hash() Hash { return Hash{k: k} }

// WriteBlocks adds blocks (a multiple of BlockSize long) to the hash. It panics on any other
// length: callers pad their last block themselves, so that what is hashed is spelled out.
func (h *Hash) WriteBlocks(blocks []byte) {
	if len(blocks)%BlockSize != 0 {
		panic("polyval: WriteBlocks of a partial block")
	}
	if len(blocks) == 0 {
		return
	}
	h.update(blocks)
}

// WritePadded adds p, its last block padded with zeros to BlockSize.
func (h *Hash) WritePadded(p []byte) {
	full := len(p) &^ (BlockSize - 1)
	h.WriteBlocks(p[:full])
	if full < len(p) {
		var last [BlockSize]byte
		copy(last[:], p[full:])
		h.update(last[:])
	}
}

// Sum returns the hash of the blocks written so far (16 bytes, little endian).
func (h *Hash) Sum() [16]byte {
	var out [16]byte
	binary.LittleEndian.PutUint64(out[:8], h.acc.lo)
	binary.LittleEndian.PutUint64(out[8:], h.acc.hi)
	return out
}

// updateGeneric is the reference: S = dot(S ^ X, H) block by block.
func (h *Hash) updateGeneric(blocks []byte) {
	x := h.k.pow[len(h.k.pow)-1]
	for len(blocks) >= BlockSize {
		b := load(blocks)
		h.acc = dot(elem{h.acc.lo ^ b.lo, h.acc.hi ^ b.hi}, x)
		blocks = blocks[BlockSize:]
	}
}

func load(b []byte) elem {
	return elem{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])}
}

// dot is POLYVAL's multiplication, a*b*x^-128 mod x^128+x^127+x^126+x^121+1: the 256-bit
// carry-less product, then a Montgomery reduction that divides by x^64 twice. Dividing T by x^64
// adds L*P for T's low word L (P is 1 mod x^64, so the low word cancels) and shifts down:
// T/x^64 + L*(x^57+x^62+x^63) + L*x^64, the constant being 0xc200000000000000.
func dot(a, b elem) elem {
	// Schoolbook 128x128: w3:w2:w1:w0.
	h1, l1 := clmul(a.lo, b.lo)
	h2, l2 := clmul(a.hi, b.hi)
	h3, l3 := clmul(a.lo, b.hi)
	h4, l4 := clmul(a.hi, b.lo)
	w0, w1, w2, w3 := l1, h1^l3^l4, l2^h3^h4, h2
	// Divide by x^64, twice.
	ch, cl := clmul(w0, reduction)
	w0, w1, w2 = w1^cl, w2^ch^w0, w3
	ch, cl = clmul(w0, reduction)
	return elem{w1 ^ cl, w2 ^ ch ^ w0}
}

// reduction is x^57+x^62+x^63, P's middle terms moved down by 64: see dot.
const reduction = 0xc200000000000000

// clmul is the 128-bit carry-less product of a and b, in constant time (no branch or index on
// either: H is secret).
func clmul(a, b uint64) (hi, lo uint64) {
	for i := range 64 {
		m := -(b >> i & 1)
		lo ^= a << i & m
		hi ^= a >> (64 - i) & m // a>>64 is 0 in Go: nothing for i == 0
	}
	return hi, lo
}
