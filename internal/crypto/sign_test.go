package crypto

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

func TestSignVerify(t *testing.T) {
	k1, k2 := testKey("k1", 1), testKey("k2", 2)
	signer := mustKeyring(t, k1)
	msg := []byte(`{"type":"compaction","content":"summary"}`)
	sig := signer.Sign(msg, defaultBinding)
	tamperedMsg := bytes.Clone(msg)
	tamperedMsg[10] ^= 0x20
	other := func(f func(*Binding)) Binding { b := defaultBinding; f(&b); return b }
	flipped := func(i int) string {
		raw, _ := base64.RawURLEncoding.DecodeString(sig)
		raw[i] ^= 0x01
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	tests := []struct {
		name     string
		verifier *Keyring
		sig      string
		msg      []byte
		b        Binding
		want     string
	}{
		{"intact", signer, sig, msg, defaultBinding, "ok"},
		{"retired key verifies", mustKeyring(t, k2, k1), sig, msg, defaultBinding, "ok"},
		{"tampered message", signer, sig, tamperedMsg, defaultBinding, "tampered"},
		{"extended message", signer, sig, append(append([]byte(nil), msg...), ' '), defaultBinding, "tampered"},
		{"empty message", signer, sig, nil, defaultBinding, "tampered"},
		{"other tenant", signer, sig, msg, other(func(b *Binding) { b.Tenant = "acme" }), "tampered"},
		{"other item", signer, sig, msg, other(func(b *Binding) { b.ItemID = "cmp_x" }), "tampered"},
		{"other kind", signer, sig, msg, other(func(b *Binding) { b.Kind = "archive" }), "tampered"},
		{"flipped mac bit", signer, flipped(len("k1") + 2 + 5), msg, defaultBinding, "tampered"},
		{"flipped version", signer, flipped(0), msg, defaultBinding, "malformed"},
		{"unknown key", mustKeyring(t, k2), sig, msg, defaultBinding, "unknown_key"},
		{"same id, other secret", mustKeyring(t, testKey("k1", 50)), sig, msg, defaultBinding, "tampered"},
		{"empty", signer, "", msg, defaultBinding, "malformed"},
		{"garbage", signer, "definitely not a signature", msg, defaultBinding, "malformed"},
		{"truncated", signer, sig[:len(sig)-2], msg, defaultBinding, "malformed"},
		{"padded", signer, sig + "=", msg, defaultBinding, "malformed"},
		{"over-long", signer, sig + strings.Repeat("A", 200), msg, defaultBinding, "malformed"},
		{"a sealed blob is not a signature", signer, mustSeal(t, signer, msg, defaultBinding), msg, defaultBinding, "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.verifier.Verify(tt.sig, tt.msg, tt.b)
			if got := reasonOf(err); got != tt.want {
				t.Fatalf("Verify: reason %q (%v), want %q", got, err, tt.want)
			}
			assertOneClass(t, err)
		})
	}
}

func TestSignDeterministicAndKeyed(t *testing.T) {
	r := mustKeyring(t, testKey("k1", 1))
	msg := []byte("m")
	if first, again := r.Sign(msg, defaultBinding), r.Sign(msg, defaultBinding); first != again {
		t.Fatal("Sign is not deterministic; clients must be able to echo it byte-exact")
	}
	raw, err := base64.RawURLEncoding.DecodeString(r.Sign(msg, defaultBinding))
	if err != nil {
		t.Fatal(err)
	}
	if raw[0] != 1 || raw[1] != 2 || string(raw[2:4]) != "k1" || len(raw) != 4+32 {
		t.Fatalf("signature layout % x, want version 1, id k1 and a 32-byte MAC", raw)
	}
	if mustKeyring(t, testKey("k1", 2)).Sign(msg, defaultBinding) == r.Sign(msg, defaultBinding) {
		t.Fatal("signature does not depend on the secret")
	}
}

func BenchmarkSign(b *testing.B) {
	r := mustKeyring(b, testKey("kbench0000000", 1))
	msg := make([]byte, 16<<10)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		r.Sign(msg, defaultBinding)
	}
}

func BenchmarkVerify(b *testing.B) {
	r := mustKeyring(b, testKey("kbench0000000", 1))
	msg := make([]byte, 16<<10)
	sig := r.Sign(msg, defaultBinding)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Verify(sig, msg, defaultBinding); err != nil {
			b.Fatal(err)
		}
	}
}
