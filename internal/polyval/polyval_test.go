package polyval

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	mrand "math/rand/v2"
	"slices"
	"testing"
)

// slowDot is dot from the definition, independently of the Montgomery trick: a*b mod P by
// shift and add, then 128 divisions by x (adding P whenever the constant term is set).
func slowDot(a, b elem) elem {
	var r elem
	for i := 127; i >= 0; i-- {
		r = mulX(r)
		var bit uint64
		if i < 64 {
			bit = b.lo >> i & 1
		} else {
			bit = b.hi >> (i - 64) & 1
		}
		if bit == 1 {
			r.lo ^= a.lo
			r.hi ^= a.hi
		}
	}
	for range 128 {
		if r.lo&1 == 1 { // r + P, P = x^128 + x^127 + x^126 + x^121 + 1, then /x
			r.lo ^= 1
			r = elem{r.lo>>1 | r.hi<<63, r.hi>>1 ^ 1<<63} // x^128/x = x^127
			r.hi ^= 1<<62 | 1<<61 | 1<<56                 // (x^127+x^126+x^121)/x
			continue
		}
		r = elem{r.lo>>1 | r.hi<<63, r.hi >> 1}
	}
	return r
}

// mulX is v*x mod P (RFC 8452's mulX_POLYVAL).
func mulX(v elem) elem {
	carry := v.hi >> 63
	v = elem{v.lo << 1, v.hi<<1 | v.lo>>63}
	if carry == 1 {
		v.lo ^= 1
		v.hi ^= 0xc200000000000000
	}
	return v
}

func randElem(r *mrand.Rand) elem { return elem{r.Uint64(), r.Uint64()} }

func TestDot(t *testing.T) {
	r := mrand.New(mrand.NewPCG(1, 2))
	cases := []struct{ a, b elem }{{}, {elem{1, 0}, elem{1, 0}}, {elem{^uint64(0), ^uint64(0)}, elem{^uint64(0), ^uint64(0)}}, {elem{0, 1 << 63}, elem{0, 1 << 63}}}
	for range 500 {
		cases = append(cases, struct{ a, b elem }{randElem(r), randElem(r)})
	}
	for _, c := range cases {
		if got, want := dot(c.a, c.b), slowDot(c.a, c.b); got != want {
			t.Fatalf("dot(%x, %x) = %x, want %x", c.a, c.b, got, want)
		}
	}
}

// TestRFC8452 is the POLYVAL example of RFC 8452, appendix A.
func TestRFC8452(t *testing.T) {
	h := unhex(t, "25629347589242761d31f826ba4b757b")
	x := unhex(t, "4f4f95668c83dfb6401762bb2d01a262d1a24ddd2721d006bbe45f20d3c9f362")
	want := unhex(t, "f7a3b47b846119fae5b7866cf5e5b77e")
	for _, i := range supported {
		setImpl(t, i)
		hs := New([16]byte(h)).Hash()
		hs.WriteBlocks(x)
		if got := hs.Sum(); !bytes.Equal(got[:], want) {
			t.Errorf("%v: POLYVAL = %x, want %x", i, got, want)
		}
	}
}

// TestGHASHRelation checks the implementations against crypto/cipher's AES-GCM: with an empty
// plaintext, the tag is GHASH_H(A || lengths) ^ E_K(J0), H = E_K(0), and GHASH(H, X...) =
// ByteReverse(POLYVAL(mulX(ByteReverse(H)), ByteReverse(X)...)) (RFC 8452, appendix A). Every
// length from 0 to 70 blocks and a few large ones, crossing the wide loops' steps (AVX-512: 64
// blocks, the rest to AVX2; AVX2: any even count up to 64), in every implementation this CPU runs.
func TestGHASHRelation(t *testing.T) {
	var key [32]byte
	rand.Read(key[:])
	block, _ := aes.NewCipher(key[:])
	gcm, _ := cipher.NewGCM(block)
	var h [16]byte
	block.Encrypt(h[:], h[:])
	hp := load(reverse(h[:]))
	hp = mulX(hp)
	var hk [16]byte
	binary.LittleEndian.PutUint64(hk[:], hp.lo)
	binary.LittleEndian.PutUint64(hk[8:], hp.hi)
	lengths := []int{}
	for n := range 70 * 16 {
		if n%16 == 0 || n%7 == 3 {
			lengths = append(lengths, n)
		}
	}
	lengths = append(lengths, 4096, 65536+5, 1<<20+48)
	for _, impl := range supported {
		setImpl(t, impl)
		k := New(hk)
		for _, n := range lengths {
			aad := make([]byte, n)
			rand.Read(aad)
			var nonce [12]byte
			rand.Read(nonce[:])
			tag := gcm.Seal(nil, nonce[:], nil, aad)
			var j0 [16]byte
			copy(j0[:], nonce[:])
			j0[15] = 1
			block.Encrypt(j0[:], j0[:])
			// The GCM blocks, padded, then the length block, each byte-reversed for POLYVAL.
			padded := make([]byte, (n+15)&^15, (n+15)&^15+16)
			copy(padded, aad)
			var lens [16]byte
			binary.BigEndian.PutUint64(lens[:8], uint64(n)*8)
			padded = append(padded, lens[:]...)
			for i := 0; i < len(padded); i += 16 {
				copy(padded[i:i+16], reverse(padded[i:i+16]))
			}
			hs := k.Hash()
			// Written in two uneven parts: the running value carries across calls.
			cut := (len(padded) / 16 / 3) * 16
			hs.WriteBlocks(padded[:cut])
			hs.WriteBlocks(padded[cut:])
			sum := hs.Sum()
			ghash := reverse(sum[:])
			for i := range 16 {
				ghash[i] ^= j0[i]
			}
			if !bytes.Equal(ghash, tag) {
				t.Fatalf("%v, %d bytes: GHASH via POLYVAL ^ E(J0) = %x, GCM tag %x", impl, n, ghash, tag)
			}
		}
	}
}

// TestWideMatchesGeneric compares each hardware implementation this CPU runs with the generic one
// on random keys, lengths, offsets (unaligned loads) and splits of one message into several
// writes.
func TestWideMatchesGeneric(t *testing.T) {
	if len(supported) == 1 {
		t.Skip("this CPU has no VPCLMULQDQ; the generic implementation is the one in use")
	}
	for _, impl := range supported[:len(supported)-1] {
		t.Run(impl.String(), func(t *testing.T) {
			setImpl(t, impl)
			r := mrand.New(mrand.NewPCG(3, 4))
			buf := make([]byte, 64<<10+64)
			rand.Read(buf)
			for i := range 3000 {
				var h [16]byte
				rand.Read(h[:])
				k := New(h)
				off := r.IntN(64)
				n := r.IntN(300) * 16
				if i%50 == 0 {
					n = r.IntN(4096) * 16
				}
				msg := buf[off : off+n]
				var parts []int // cut points, on block boundaries
				for range r.IntN(4) {
					parts = append(parts, r.IntN(n/16+1)*16)
				}
				slices.Sort(parts)
				parts = append(parts, n)
				wide, gen := k.Hash(), k.Hash()
				gen.updateGeneric(msg)
				from := 0
				for _, p := range parts {
					wide.WriteBlocks(msg[from:p])
					from = p
				}
				if wide.Sum() != gen.Sum() {
					t.Fatalf("case %d: %d bytes at offset %d in parts %v: %v %x, generic %x", i, n, off, parts, impl, wide.Sum(), gen.Sum())
				}
			}
		})
	}
}

func TestWritePadded(t *testing.T) {
	var h [16]byte
	rand.Read(h[:])
	k := New(h)
	for n := range 40 {
		p := make([]byte, n)
		rand.Read(p)
		padded := make([]byte, (n+15)&^15)
		copy(padded, p)
		a, b := k.Hash(), k.Hash()
		a.WritePadded(p)
		b.WriteBlocks(padded)
		if a.Sum() != b.Sum() {
			t.Errorf("%d bytes: WritePadded differs from the zero-padded blocks", n)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("WriteBlocks of 15 bytes did not panic")
		}
	}()
	hs := k.Hash()
	hs.WriteBlocks(make([]byte, 15))
}

// setImpl makes i the implementation in use for the rest of t.
func setImpl(t *testing.T, i implementation) {
	old := impl
	impl = i
	t.Cleanup(func() { impl = old })
}

func reverse(b []byte) []byte {
	out := slices.Clone(b)
	slices.Reverse(out)
	return out
}

func unhex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkPOLYVAL is the hash over a 2 MB agent history in each hardware implementation, beside
// the standard library's GMAC over the same bytes (internal/skimcache's fallback). The AVX-512
// sub-benchmark was called "wide" before the AVX2 implementation came.
func BenchmarkPOLYVAL(b *testing.B) {
	data := make([]byte, 2<<20)
	rand.Read(data)
	var h [16]byte
	rand.Read(h[:])
	k := New(h)
	for _, i := range []implementation{avx512, avx2} {
		b.Run(i.String(), func(b *testing.B) {
			if !slices.Contains(supported, i) {
				b.Skipf("this CPU does not run the %v implementation", i)
			}
			impl = i
			defer func() { impl = supported[0] }()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				hs := k.Hash()
				hs.WriteBlocks(data)
			}
		})
	}
	b.Run("gmac", func(b *testing.B) {
		block, _ := aes.NewCipher(make([]byte, 32))
		gcm, _ := cipher.NewGCM(block)
		var nonce [12]byte
		out := make([]byte, 0, 16)
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			gcm.Seal(out[:0], nonce[:], nil, data)
		}
	})
}

// FuzzImplementations: every implementation this CPU runs gives the generic one's value for any
// key, message and split of the message into two writes.
func FuzzImplementations(f *testing.F) {
	f.Add(make([]byte, 16), make([]byte, 1040), uint16(17))
	f.Add(bytes.Repeat([]byte{0xff}, 16), bytes.Repeat([]byte{0xa5}, 64*16+48), uint16(3))
	f.Fuzz(func(t *testing.T, key, msg []byte, cut uint16) {
		if len(key) < 16 {
			return
		}
		k := New([16]byte(key[:16]))
		msg = msg[:len(msg)&^(BlockSize-1)]
		c := min(int(cut)*BlockSize, len(msg))
		gen := k.Hash()
		gen.updateGeneric(msg)
		for _, i := range supported {
			setImpl(t, i)
			h := k.Hash()
			h.WriteBlocks(msg[:c])
			h.WriteBlocks(msg[c:])
			if h.Sum() != gen.Sum() {
				t.Fatalf("%v: %d bytes cut at %d: %x, generic %x", i, len(msg), c, h.Sum(), gen.Sum())
			}
		}
	})
}
