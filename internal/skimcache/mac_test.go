package skimcache

import (
	"bytes"
	"testing"

	"github.com/compactd/compactd/internal/polyval"
)

// TestWithGMAC runs the cache's tests of what a hit proves with the fallback MAC, the one a CPU
// without VPCLMULQDQ uses (the other tests use whichever this CPU runs).
func TestWithGMAC(t *testing.T) {
	if !polyval.Accelerated() {
		t.Skip("this CPU has no VPCLMULQDQ: every test already uses GMAC")
	}
	gmacInTests = true
	t.Cleanup(func() { gmacInTests = false })
	for name, f := range map[string]func(*testing.T){
		"FindAfterStore": TestFindAfterStore, "TurnHashesItsBodyOnce": TestTurnHashesItsBodyOnce,
		"BodyMACForAnotherBuffer": TestBodyMACForAnotherBuffer, "WrongFromNeverHits": TestWrongFromNeverHits,
		"KeyPerCache": TestKeyPerCache,
	} {
		t.Run(name, f)
	}
	if _, ok := newTest(1 << 20).segMAC.(*gmac); !ok {
		t.Fatal("forceGMAC did not give GMAC")
	}
}

// TestSegmentMAC: for both MACs, a tag depends on every byte of the segment, on its length
// (trailing zeros included) and on the chain before it, and on nothing else.
func TestSegmentMAC(t *testing.T) {
	macs := map[string]segmentMAC{"gmac": newGMAC()}
	if polyval.Accelerated() {
		macs["polyval"] = newPolyvalMAC()
	}
	body := conversation(3, 5000)
	for name, m := range macs {
		base := m.sum([16]byte{}, body)
		if again := m.sum([16]byte{}, bytes.Clone(body)); again != base {
			t.Errorf("%s: the same bytes gave two tags", name)
		}
		for _, i := range []int{0, 15, 16, 17, 2047, 4095, 4999} {
			b := bytes.Clone(body)
			b[i] ^= 0x80
			if m.sum([16]byte{}, b) == base {
				t.Errorf("%s: flipping byte %d left the tag as it was", name, i)
			}
		}
		for _, other := range [][]byte{body[:4999], append(bytes.Clone(body), 0), append(bytes.Clone(body), make([]byte, 16)...), nil} {
			if m.sum([16]byte{}, other) == base {
				t.Errorf("%s: a %d-byte segment has the tag of the %d-byte one", name, len(other), len(body))
			}
		}
		if m.sum([16]byte{1}, body) == base {
			t.Errorf("%s: the chain before the segment does not change its tag", name)
		}
		if m.sum([16]byte{}, nil) == m.sum([16]byte{}, make([]byte, 16)) {
			t.Errorf("%s: the empty segment and a zero block share a tag", name)
		}
	}
}

// TestMACName: the name the startup log gives is the MAC a Cache uses.
func TestMACName(t *testing.T) {
	got := MAC()
	if _, ok := newMAC(false).(*polyvalMAC); ok {
		if want := "polyval-" + polyval.Implementation(); got != want || polyval.Implementation() == "generic" {
			t.Fatalf("MAC() = %q with POLYVAL in use (%s)", got, polyval.Implementation())
		}
		return
	}
	if got != "gmac" {
		t.Fatalf("MAC() = %q with GMAC in use", got)
	}
}
