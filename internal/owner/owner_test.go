package owner

import (
	"strings"
	"testing"
)

func keyer(t *testing.T, b byte) *Keyer {
	t.Helper()
	k, err := New([]byte(strings.Repeat(string(rune('a'+b)), 32)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestOf(t *testing.T) {
	k, other := keyer(t, 0), keyer(t, 1)
	a := k.Of("default", "sk-a")
	cases := []struct {
		name string
		got  string
		same bool
	}{
		{"same tenant and credential", k.Of("default", "sk-a"), true},
		{"other credential", k.Of("default", "sk-b"), false},
		{"other tenant", k.Of("acme", "sk-a"), false},
		{"no credential", k.Of("default", ""), false},
		{"fields do not run into each other", k.Of("defaults", "k-a"), false},
		{"other server key", other.Of("default", "sk-a"), false},
	}
	for _, c := range cases {
		if (c.got == a) != c.same {
			t.Errorf("%s: %q vs %q, want same=%v", c.name, c.got, a, c.same)
		}
	}
	if len(a) != Len || strings.Contains(a, "sk-a") {
		t.Errorf("digest %q: want %d hex characters and no trace of the credential", a, Len)
	}
	if _, err := New(make([]byte, 16)); err == nil {
		t.Error("New accepted a 16-byte key")
	}
}

func TestRef(t *testing.T) {
	k := keyer(t, 0)
	o := k.Of("default", "sk-a")
	ref := k.Ref("default", "sess-1", o)
	if c, got, ok := k.Verify("default", ref); !ok || c != "sess-1" || got != o {
		t.Fatalf("Verify(own ref) = %q, %q, %v", c, got, ok)
	}
	forged := k.Ref("default", "sess-2", o)
	bad := []struct{ name, tenant, ref string }{
		{"other tenant", "acme", ref},
		{"other server key", "default", keyer(t, 1).Ref("default", "sess-1", o)},
		{"conversation swapped", "default", swap(ref, forged, 1)},
		{"mac moved from another ref", "default", swap(ref, forged, 3)},
		{"owner swapped", "default", strings.Replace(ref, o, k.Of("default", "sk-b"), 1)},
		{"mac cut", "default", ref[:len(ref)-2]},
		{"no prefix", "default", strings.TrimPrefix(ref, refPrefix)},
		{"empty", "default", ""},
		{"too long", "default", ref + strings.Repeat("A", maxRef)},
	}
	for _, b := range bad {
		if _, _, ok := k.Verify(b.tenant, b.ref); ok {
			t.Errorf("%s: %q verified", b.name, b.ref)
		}
	}
}

// swap returns ref with its dot-separated part i taken from other.
func swap(ref, other string, i int) string {
	p, q := strings.Split(ref, "."), strings.Split(other, ".")
	p[i] = q[i]
	return strings.Join(p, ".")
}

func TestFindRef(t *testing.T) {
	k := keyer(t, 0)
	o := k.Of("default", "sk-a")
	ref := k.Ref("default", "sess-1", o)
	cases := []struct {
		name string
		text string
		ok   bool
	}{
		{"in a sentence", "The conversation is archived (reference " + ref + "). Call the tool.", true},
		{"at the end with a full stop", "archived: " + ref + ".", true},
		{"after a forged one", "cref1.AAAA." + o + ".AAAA and then " + ref, true},
		{"only a forged one", "cref1.c2Vzcy0x." + o + ".AAAAAAAAAAAAAAAAAAAAAA", false},
		{"the public note without a reference", "The conversation before this summary is archived verbatim by compactd", false},
		{"none", strings.Repeat("cref1.", 1000), false},
	}
	for _, c := range cases {
		conv, got, ok := k.FindRef("default", c.text)
		if ok != c.ok || ok && (conv != "sess-1" || got != o) {
			t.Errorf("%s: FindRef = %q, %q, %v; want ok=%v", c.name, conv, got, ok, c.ok)
		}
	}
}

func TestSetWith(t *testing.T) {
	s := Set(nil).With("a").With("b").With("a")
	if len(s) != 2 {
		t.Fatalf("Set = %v", s)
	}
}
