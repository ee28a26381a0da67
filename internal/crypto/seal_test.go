package crypto

import (
	"bytes"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestSealOpenRoundTrip(t *testing.T) {
	r := mustKeyring(t, testKey("k1", 1))
	big := make([]byte, 256<<10)
	crand.Read(big)
	tests := []struct {
		name string
		pt   []byte
		b    Binding
	}{
		{"empty plaintext", nil, defaultBinding},
		{"one byte", []byte{0}, defaultBinding},
		{"text", []byte("the summary of a long conversation"), defaultBinding},
		{"256 KiB random", big, defaultBinding},
		{"empty binding", []byte("x"), Binding{}},
		{"unicode binding", []byte("x"), Binding{Kind: "archive", ItemID: "msg_ü😀", Tenant: "tenant/é"}},
		{"long binding", []byte("x"), Binding{Kind: strings.Repeat("k", 300), ItemID: strings.Repeat("i", 300), Tenant: "t"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			blob := mustSeal(t, r, tt.pt, tt.b)
			if strings.ContainsAny(blob, "=+/\n") {
				t.Fatalf("blob is not unpadded base64url: %.40q", blob)
			}
			got, err := r.Open(blob, tt.b)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if !bytes.Equal(got, tt.pt) {
				t.Fatalf("Open returned %d bytes, want the %d sealed", len(got), len(tt.pt))
			}
		})
	}
}

// TestEnvelopeLayout pins the documented wire layout, so a change to it is a
// deliberate, visible decision (blobs in clients' hands must keep opening).
func TestEnvelopeLayout(t *testing.T) {
	r := mustKeyring(t, testKey("layout", 1))
	pt := []byte("hello")
	raw, err := base64.RawURLEncoding.DecodeString(mustSeal(t, r, pt, defaultBinding))
	if err != nil {
		t.Fatal(err)
	}
	const id = "layout"
	if raw[0] != 1 || int(raw[1]) != len(id) || string(raw[2:2+len(id)]) != id {
		t.Fatalf("header = % x, want version 1, len %d, %q", raw[:2+len(id)], len(id), id)
	}
	var tag [8]byte
	r.active.tenantTag(tag[:], defaultBinding.Tenant)
	if got := raw[2+len(id) : 2+len(id)+8]; !bytes.Equal(got, tag[:]) {
		t.Fatalf("tenant tag = % x, want % x", got, tag)
	}
	if want := 2 + len(id) + 8 + 12 + len(pt) + 16; len(raw) != want {
		t.Fatalf("envelope is %d bytes, want %d", len(raw), want)
	}
	if bytes.Contains(raw, pt) {
		t.Fatal("plaintext visible in envelope")
	}
}

func TestOpenFailures(t *testing.T) {
	k1, k2 := testKey("k1", 1), testKey("k2", 2)
	sealer := mustKeyring(t, k1)
	pt := []byte("summary")
	blob := mustSeal(t, sealer, pt, defaultBinding)
	raw, _ := base64.RawURLEncoding.DecodeString(blob)
	reencode := func(f func(raw []byte) []byte) string {
		return base64.RawURLEncoding.EncodeToString(f(bytes.Clone(raw)))
	}
	other := func(f func(*Binding)) Binding { b := defaultBinding; f(&b); return b }

	tests := []struct {
		name   string
		opener *Keyring
		blob   string
		b      Binding
		want   string // Reason, or "ok"
	}{
		{"intact", sealer, blob, defaultBinding, "ok"},
		{"retired key still opens", mustKeyring(t, k2, k1), blob, defaultBinding, "ok"},
		{"empty", sealer, "", defaultBinding, "malformed"},
		{"garbage", sealer, "this is not a sealed blob at all, not even base64!", defaultBinding, "malformed"},
		{"json", sealer, `{"summary":"hello"}`, defaultBinding, "malformed"},
		{"over-long", sealer, strings.Repeat("A", MaxBlobLen+1), defaultBinding, "malformed"},
		{"truncated below minimum", sealer, blob[:20], defaultBinding, "malformed"},
		// No base64 text is 1 mod 4 long. (Cutting one char otherwise gives malformed or
		// tampered depending on the random bits, so the test picks the length.)
		{"truncated to impossible length", sealer, blob[:impossibleLen(len(blob))], defaultBinding, "malformed"},
		{"truncated ciphertext", sealer, reencode(func(r []byte) []byte { return r[:len(r)-3] }), defaultBinding, "tampered"},
		{"truncated to header", sealer, reencode(func(r []byte) []byte { return r[:2+2+8+12+15] }), defaultBinding, "malformed"},
		{"padded", sealer, blob + strings.Repeat("=", (4-len(blob)%4)%4), defaultBinding, "malformed"},
		{"std alphabet", sealer, strings.NewReplacer("-", "+", "_", "/").Replace(blob) + "+", defaultBinding, "malformed"},
		{"newline inserted", sealer, blob[:10] + "\n" + blob[10:], defaultBinding, "malformed"},
		{"whitespace around", sealer, " " + blob + " ", defaultBinding, "malformed"},
		{"version 2", sealer, reencode(func(r []byte) []byte { r[0] = 2; return r }), defaultBinding, "malformed"},
		{"version 0", sealer, reencode(func(r []byte) []byte { r[0] = 0; return r }), defaultBinding, "malformed"},
		{"key id length 0", sealer, reencode(func(r []byte) []byte { r[1] = 0; return r }), defaultBinding, "malformed"},
		{"key id length 255", sealer, reencode(func(r []byte) []byte { r[1] = 255; return r }), defaultBinding, "malformed"},
		{"trailing byte", sealer, reencode(func(r []byte) []byte { return append(r, 0) }), defaultBinding, "tampered"},
		{"unknown key id", mustKeyring(t, k2), blob, defaultBinding, "unknown_key"},
		// The tenant tag is keyed, so a same-named key with another secret (another
		// deployment) fails the tenant check first; it is indistinguishable by design.
		{"same id, other secret", mustKeyring(t, testKey("k1", 99)), blob, defaultBinding, "wrong_tenant"},
		{"wrong tenant", sealer, blob, other(func(b *Binding) { b.Tenant = "acme" }), "wrong_tenant"},
		{"empty tenant", sealer, blob, other(func(b *Binding) { b.Tenant = "" }), "wrong_tenant"},
		{"moved item id", sealer, blob, other(func(b *Binding) { b.ItemID = "cmp_other" }), "tampered"},
		{"moved kind", sealer, blob, other(func(b *Binding) { b.Kind = "anthropic.compaction" }), "tampered"},
		{"kind/item boundary slid", sealer, blob, other(func(b *Binding) {
			b.Kind, b.ItemID = defaultBinding.Kind+"c", strings.TrimPrefix(defaultBinding.ItemID, "c")
		}), "tampered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.opener.Open(tt.blob, tt.b)
			if r := reasonOf(err); r != tt.want {
				t.Fatalf("Open: reason %q (%v), want %q", r, err, tt.want)
			}
			if err == nil && !bytes.Equal(got, pt) {
				t.Fatal("Open succeeded with the wrong plaintext")
			}
			if err != nil && got != nil {
				t.Fatal("Open returned data with an error")
			}
			assertOneClass(t, err)
		})
	}
}

// impossibleLen is the longest length below n that no base64 text can have.
func impossibleLen(n int) int {
	n--
	for n%4 != 1 {
		n--
	}
	return n
}

// assertOneClass checks that err wraps exactly one of the four Open/Verify errors.
func assertOneClass(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	n := 0
	for _, e := range []error{ErrMalformed, ErrUnknownKey, ErrWrongTenant, ErrTampered} {
		if errors.Is(err, e) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("error %q wraps %d classes, want exactly 1", err, n)
	}
}

// TestOpenBitFlips flips every bit of a sealed envelope in turn; each must fail with
// the class its position implies.
func TestOpenBitFlips(t *testing.T) {
	const id = "flip-key"
	r := mustKeyring(t, testKey(id, 1))
	raw, _ := base64.RawURLEncoding.DecodeString(mustSeal(t, r, []byte("short summary"), defaultBinding))
	tagStart := 2 + len(id)
	nonceStart := tagStart + 8
	for i := range raw {
		var allowed []string
		switch {
		case i == 0:
			allowed = []string{"malformed"}
		case i < tagStart: // id length or id bytes: bad id, or a different (unknown) id
			allowed = []string{"malformed", "unknown_key"}
		case i < nonceStart:
			allowed = []string{"wrong_tenant"}
		default:
			allowed = []string{"tampered"}
		}
		for bit := range 8 {
			mut := bytes.Clone(raw)
			mut[i] ^= 1 << bit
			_, err := r.Open(base64.RawURLEncoding.EncodeToString(mut), defaultBinding)
			if got := reasonOf(err); !contains(allowed, got) {
				t.Fatalf("byte %d bit %d flipped: reason %q, want one of %v", i, bit, got, allowed)
			}
			assertOneClass(t, err)
		}
	}
}

// TestOpenCharMutations replaces every character of the text form with every other
// character of the alphabet and a few outside it: nothing may open.
func TestOpenCharMutations(t *testing.T) {
	r := mustKeyring(t, testKey("k", 1))
	blob := mustSeal(t, r, []byte("s"), defaultBinding)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/= \x00"
	for i := range len(blob) {
		for _, c := range []byte(alphabet) {
			if c == blob[i] {
				continue
			}
			mut := blob[:i] + string(c) + blob[i+1:]
			if _, err := r.Open(mut, defaultBinding); err == nil {
				t.Fatalf("blob with char %d replaced by %q opened", i, c)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestSealNeverReusesNonce(t *testing.T) {
	r := mustKeyring(t, testKey("k", 1))
	const n = 20000
	nonces := make(map[[12]byte]struct{}, n)
	hdr := 2 + len("k") + 8
	for range n {
		raw, _ := base64.RawURLEncoding.DecodeString(mustSeal(t, r, []byte("same plaintext"), defaultBinding))
		nonce := [12]byte(raw[hdr : hdr+12])
		if _, dup := nonces[nonce]; dup {
			t.Fatalf("nonce reused after %d seals", len(nonces))
		}
		nonces[nonce] = struct{}{}
	}
}

func TestSealTooLarge(t *testing.T) {
	r := mustKeyring(t, testKey("k", 1))
	// The largest plaintext whose envelope still fits, and one byte more.
	hdr := 2 + 1 + 8 + 12 + 16
	fit := MaxBlobLen/4*3 - hdr
	blob, err := r.Seal(make([]byte, fit), defaultBinding)
	if err != nil {
		t.Fatalf("Seal of %d bytes: %v", fit, err)
	}
	if len(blob) > MaxBlobLen {
		t.Fatalf("blob is %d chars, over MaxBlobLen", len(blob))
	}
	if _, err := r.Open(blob, defaultBinding); err != nil {
		t.Fatalf("Open of the largest blob: %v", err)
	}
	if _, err := r.Seal(make([]byte, fit+1), defaultBinding); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Seal of %d bytes: %v, want ErrTooLarge", fit+1, err)
	}
}

func TestSealUsesActiveKey(t *testing.T) {
	old, cur := testKey("old", 1), testKey("cur", 2)
	r := mustKeyring(t, cur, old)
	blob := mustSeal(t, r, []byte("x"), defaultBinding)
	if _, err := mustKeyring(t, cur).Open(blob, defaultBinding); err != nil {
		t.Fatalf("blob not sealed with the active key: %v", err)
	}
	if _, err := mustKeyring(t, old).Open(blob, defaultBinding); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("retired-only keyring: %v, want ErrUnknownKey", err)
	}
}

func TestErrorsDoNotLeak(t *testing.T) {
	k := testKey("k", 1)
	r := mustKeyring(t, k)
	pt := []byte("SECRET-PROMPT-CONTENT")
	blob := mustSeal(t, r, pt, defaultBinding)
	secret := base64.RawURLEncoding.EncodeToString(k.Secret[:])
	var errs []error
	for _, b := range []Binding{{Tenant: "x"}, {Kind: "y", Tenant: defaultBinding.Tenant}} {
		_, err := r.Open(blob, b)
		errs = append(errs, err)
	}
	_, err := mustKeyring(t, testKey("k", 9)).Open(blob, defaultBinding)
	errs = append(errs, err)
	for _, err := range errs {
		if err == nil {
			t.Fatal("expected an error")
		}
		for _, s := range []string{secret, string(pt), blob[:16]} {
			if strings.Contains(err.Error(), s) {
				t.Fatalf("error %q leaks %q", err, s)
			}
		}
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{ErrMalformed, "malformed"},
		{ErrUnknownKey, "unknown_key"},
		{ErrWrongTenant, "wrong_tenant"},
		{ErrTampered, "tampered"},
		{fmt.Errorf("outer: %w", fmt.Errorf("%w: detail", ErrTampered)), "tampered"},
		{ErrTooLarge, "other"},
		{errors.New("unrelated"), "other"},
	}
	for _, tt := range tests {
		if got := Reason(tt.err); got != tt.want {
			t.Errorf("Reason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestConcurrentUse exercises the shared AEAD and HMAC pools from many goroutines;
// run with -race.
func TestConcurrentUse(t *testing.T) {
	r := mustKeyring(t, testKey("k", 1), testKey("old", 2))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				b := Binding{Kind: "archive", ItemID: fmt.Sprintf("cmp_%d_%d", g, i), Tenant: fmt.Sprintf("t%d", g%3)}
				pt := []byte(b.ItemID)
				blob, err := r.Seal(pt, b)
				if err == nil {
					var got []byte
					got, err = r.Open(blob, b)
					if err == nil && !bytes.Equal(got, pt) {
						err = errors.New("plaintext mismatch")
					}
				}
				if err == nil {
					sig := r.Sign(pt, b)
					err = r.Verify(sig, pt, b)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

var benchSizes = []int{1 << 10, 16 << 10, 256 << 10}

func benchSetup(b *testing.B, size int) (*Keyring, []byte) {
	r := mustKeyring(b, testKey("kbench0000000", 1), testKey("old", 2))
	pt := make([]byte, size)
	crand.Read(pt)
	return r, pt
}

func BenchmarkSeal(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dKB", size>>10), func(b *testing.B) {
			r, pt := benchSetup(b, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Seal(pt, defaultBinding); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkOpen(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dKB", size>>10), func(b *testing.B) {
			r, pt := benchSetup(b, size)
			blob := mustSeal(b, r, pt, defaultBinding)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Open(blob, defaultBinding); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSealOpen(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dKB", size>>10), func(b *testing.B) {
			r, pt := benchSetup(b, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				blob, err := r.Seal(pt, defaultBinding)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := r.Open(blob, defaultBinding); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestEncodeString cross-checks the SIMD encoder against encoding/base64 across chunk
// boundaries and every length remainder.
func TestEncodeString(t *testing.T) {
	src := make([]byte, 3*1024*3+7)
	crand.Read(src)
	lengths := []int{0, 1, 2, 3, 4, 27, 28, 29, 31, 32, 33, 47, 48, 49, 95, 96, 97, 3071, 3072, 3073, 6144, 6145, len(src)}
	for _, n := range lengths {
		if got, want := encodeString(src[:n]), base64.RawURLEncoding.EncodeToString(src[:n]); got != want {
			t.Fatalf("encodeString of %d bytes differs from encoding/base64", n)
		}
	}
}

// TestDecodeEnvelopeCanonical: only the exact canonical base64url text of some bytes
// is accepted, whatever leniency the underlying decoder has.
func TestDecodeEnvelopeCanonical(t *testing.T) {
	raw := bytes.Repeat([]byte{0xFB, 0xEF, 0xBE, 0xFF, 0xFF, 0xFF}, 10) // "----____…"
	raw = append(raw, 0xFF)                                             // and a partial final quantum
	canon := base64.RawURLEncoding.EncodeToString(raw)
	if !strings.Contains(canon, "_") || !strings.Contains(canon, "-") {
		t.Fatalf("test input %q lacks '-' or '_'", canon)
	}
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"canonical", canon, true},
		{"slash for underscore", strings.Replace(canon, "_", "/", 1), false},
		{"plus for dash", strings.Replace(canon, "-", "+", 1), false},
		{"LF inside", canon[:8] + "\n" + canon[8:], false},
		{"CRLF inside", canon[:8] + "\r\n" + canon[8:], false},
		{"LF at end", canon + "\n", false},
		{"padding", canon + "==", false},
		{"non-zero trailing bits", canon[:len(canon)-1] + "_", false},
		{"space", canon[:8] + " " + canon[8:], false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeEnvelope(tt.in, 1, 1<<20)
			if tt.ok {
				if err != nil || !bytes.Equal(got, raw) {
					t.Fatalf("decodeEnvelope(canonical) = %x, %v", got, err)
				}
				return
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("decodeEnvelope accepted a non-canonical spelling (err %v)", err)
			}
		})
	}
}

// BenchmarkDecodeEnvelope keeps the case for the SIMD decoder measurable: decodeEnvelope (SIMD
// decode plus the re-encode check that makes it canonical) against encoding/base64's strict
// decoder, which would need no check. Open runs on every turn that carries a compaction item.
func BenchmarkDecodeEnvelope(b *testing.B) {
	r, pt := benchSetup(b, 16<<10)
	blob := mustSeal(b, r, pt, defaultBinding)
	b.Run("simd+check", func(b *testing.B) {
		b.SetBytes(int64(len(blob)))
		for b.Loop() {
			if _, err := decodeEnvelope(blob, minEnvelope, MaxBlobLen); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/base64", func(b *testing.B) {
		b.SetBytes(int64(len(blob)))
		for b.Loop() {
			if _, err := b64.DecodeString(blob); err != nil {
				b.Fatal(err)
			}
		}
	})
}
