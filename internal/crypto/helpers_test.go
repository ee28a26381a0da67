package crypto

import (
	"testing"
)

// testKey returns a deterministic key whose secret is seed, seed+1, … so tests can
// build the same keyring twice without randomness.
func testKey(id string, seed byte) Key {
	k := Key{ID: id}
	for i := range k.Secret {
		k.Secret[i] = seed + byte(i)
	}
	return k
}

func mustKeyring(t testing.TB, active Key, retired ...Key) *Keyring {
	t.Helper()
	r, err := NewKeyring(active, retired...)
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	return r
}

func mustSeal(t testing.TB, r *Keyring, pt []byte, b Binding) string {
	t.Helper()
	blob, err := r.Seal(pt, b)
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	return blob
}

// reasonOf is Reason, but spelled "ok" for success so failures print readably.
func reasonOf(err error) string {
	if err == nil {
		return "ok"
	}
	return Reason(err)
}

var defaultBinding = Binding{Kind: "openai.compaction", ItemID: "cmp_0123456789abcdef", Tenant: "default"}
