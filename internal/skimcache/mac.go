package skimcache

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"

	"github.com/compactd/compactd/internal/polyval"
)

// segmentMAC is the chained MAC of the package comment: sum extends prev (the chain's tag over
// the bytes before p; zero for the first segment) over p. Keyed when made, with a key that never
// leaves the process; safe for concurrent use.
type segmentMAC interface {
	sum(prev [16]byte, p []byte) [16]byte
}

// newMAC returns the fastest MAC this CPU runs: POLYVAL where it has VPCLMULQDQ (with AVX-512 or
// AVX2), else the standard library's GMAC. forceGMAC is for tests. Which one a cache uses never
// matters outside it: tags live and die in one process.
func newMAC(forceGMAC bool) segmentMAC {
	if polyval.Accelerated() && !forceGMAC {
		return newPolyvalMAC()
	}
	return newGMAC()
}

// gmac is GMAC under AES-256 (AES-GCM over p as additional data, empty plaintext), the nonce
// being the previous tag's first 12 bytes. The standard library's GHASH: one block per
// PCLMULQDQ, 4–13 GB/s on the machines compactd was measured on.
type gmac struct{ aead cipher.AEAD }

func newGMAC() *gmac {
	block, err := aes.NewCipher(randomKey(32))
	if err != nil {
		panic("skimcache: " + err.Error())
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic("skimcache: " + err.Error())
	}
	return &gmac{aead}
}

func (m *gmac) sum(prev [16]byte, p []byte) [16]byte {
	var out [16]byte
	m.aead.Seal(out[:0], prev[:12], nil, p)
	return out
}

// polyvalMAC is Wegman-Carter with a chain: tag = AES_K(POLYVAL_H(p, zero-padded; a block of
// len(p)) ^ prev), H and K independent random keys. POLYVAL is almost-XOR-universal (two
// different messages of at most L blocks collide, or differ by a given value, with probability
// at most L/2^128 over H), so two different segments after the same chain give the same input to
// AES with that probability and the same tag only then; after different chains the inputs differ
// unless the two POLYVALs differ by exactly the XOR of two unequal AES outputs, which nobody
// outside the process sees. The length block tells p from p with zeros appended.
type polyvalMAC struct {
	h     *polyval.Key
	block cipher.Block
}

func newPolyvalMAC() *polyvalMAC {
	block, err := aes.NewCipher(randomKey(32))
	if err != nil {
		panic("skimcache: " + err.Error())
	}
	return &polyvalMAC{h: polyval.New([16]byte(randomKey(16))), block: block}
}

func (m *polyvalMAC) sum(prev [16]byte, p []byte) [16]byte {
	h := m.h.Hash()
	h.WritePadded(p)
	var lens [polyval.BlockSize]byte
	binary.LittleEndian.PutUint64(lens[:], uint64(len(p)))
	h.WriteBlocks(lens[:])
	s := h.Sum()
	for i := range s {
		s[i] ^= prev[i]
	}
	m.block.Encrypt(s[:], s[:])
	return s
}

// MAC names the MAC a Cache made on this CPU uses: "polyval-avx512", "polyval-avx2" or "gmac", for
// the startup log (a 2 MB body costs about 0.05, 0.15–0.2 and 0.16–0.56 ms respectively on the
// machines of BENCHMARKS.md).
func MAC() string {
	if polyval.Accelerated() {
		return "polyval-" + polyval.Implementation()
	}
	return "gmac"
}

func randomKey(n int) []byte {
	k := make([]byte, n)
	if _, err := rand.Read(k); err != nil {
		panic("skimcache: no randomness for the MAC key: " + err.Error())
	}
	return k
}
