package tokenize

import (
	_ "embed"
	"hash/maphash"
	"math/bits"
)

//go:generate go run ./internal/genvocab -blob o200k.bin -split split_gen.go

// blob is o200k_base's vocabulary (format in internal/vocabblob): 2.2 MB of read-only data in the
// binary, not heap. Embedding it as a string keeps it out of the garbage collector's sight; the
// library's map[string]uint of the same vocabulary is 7.4 MB of heap the GC walks every cycle.
//
//go:embed o200k.bin
var blob string

// rankBits is the width of a rank in an index slot: o200k's 199,998 ranks fit in 18 bits, and the
// slot's other 14 bits hold a hash tag so most probes that miss never touch the blob.
const (
	rankBits = 18
	rankMask = 1<<rankBits - 1
	tagShift = rankBits
)

// table is the vocabulary over blob: token bytes by rank, and an open-addressing index from bytes
// to rank. Everything it owns on the heap is one []uint32 (2 MiB), which the GC never scans.
type table struct {
	offs  string   // (n+1) little-endian uint32 offsets into data, by rank
	data  string   // the tokens' bytes, concatenated in rank order
	index []uint32 // 0: empty; else (tag<<rankBits | rank) + 1, linear probing
	mask  uint64
	seed  maphash.Seed
}

// newTable indexes blob. It panics on a malformed blob: the blob is part of the build, and
// TestGeneratedMatchLibrary checks it.
func newTable(blob string) *table {
	if len(blob) < 8 || blob[:4] != "O2K\x01" {
		panic("tokenize: bad vocabulary blob")
	}
	n := int(uint32(blob[4]) | uint32(blob[5])<<8 | uint32(blob[6])<<16 | uint32(blob[7])<<24)
	if n == 0 || n > rankMask || len(blob) < 8+4*(n+1) {
		panic("tokenize: bad vocabulary blob")
	}
	t := &table{offs: blob[8 : 8+4*(n+1)], data: blob[8+4*(n+1):], seed: maphash.MakeSeed()}
	if int(t.off(n)) != len(t.data) {
		panic("tokenize: bad vocabulary blob")
	}
	size := uint64(1) << bits.Len(uint(2*n-1)) // load factor <= 1/2
	t.index = make([]uint32, size)
	t.mask = size - 1
	for r := range n {
		tok := t.token(uint32(r))
		h := maphash.String(t.seed, tok)
		slot := uint32(h>>(64-(32-tagShift)))<<tagShift | uint32(r)
		for i := h & t.mask; ; i = (i + 1) & t.mask {
			if t.index[i] == 0 {
				t.index[i] = slot + 1
				break
			}
		}
	}
	return t
}

func (t *table) off(r int) uint32 {
	s := t.offs[4*r : 4*r+4]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// token returns the bytes of the token of rank r.
func (t *table) token(r uint32) string { return t.data[t.off(int(r)):t.off(int(r)+1)] }

// rank returns the rank (== token id) of s, if s is a token.
func (t *table) rank(s string) (uint32, bool) {
	h := maphash.String(t.seed, s)
	tag := uint32(h >> (64 - (32 - tagShift)))
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		e := t.index[i]
		if e == 0 {
			return 0, false
		}
		e--
		if e>>tagShift == tag {
			if r := e & rankMask; t.token(r) == s {
				return r, true
			}
		}
	}
}
