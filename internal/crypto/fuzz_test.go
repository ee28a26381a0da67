package crypto

import (
	"bytes"
	"testing"
)

// Golden vectors, sealed once with fuzzKeyring's keys. They pin the wire format:
// compaction items sit in clients' conversation histories for a long time, so a
// change that stops these from opening breaks every client holding one. They also
// seed FuzzOpen (testdata/fuzz/FuzzOpen) as the only inputs allowed to open.
var (
	goldenBlobs = map[string][]byte{
		// active key "fuzz-key"
		"AQhmdXp6LWtled1QeyA-a1sXx61Ez2DfVp_YxEZOp1fQKOBl593PCWEhz71GSuLPbtB0gGvseR2ZyS5SLX06G02e": []byte("a compaction summary"),
		"AQhmdXp6LWtled1QeyA-a1sXfIpHrNdDtC01_tuHLHRCJxgTzu6MseFVU-j6hQ":                           {},
		// retired key "fuzz-old"
		"AQhmdXp6LW9sZBS3l68_ENzHo9KSW5H86mlYymCLNKXw74Vetus9W8YoT3SuAPnIYiviMHOH-M1sl9d9Xj31IepQP4frnuuI": []byte("sealed before the rotation"),
	}
	goldenSig    = "AQhmdXp6LWtledo2M7z_-L8MQmj4Roa1XeqwS7ea9DZltQeZ5Jtl9Yau"
	goldenSigMsg = []byte("a compaction summary")
	fuzzBinding  = Binding{Kind: "openai.compaction", ItemID: "cmp_fuzz", Tenant: "default"}
)

func fuzzKeyring(t testing.TB) *Keyring {
	return mustKeyring(t, testKey("fuzz-key", 7), testKey("fuzz-old", 9))
}

func TestGoldenVectors(t *testing.T) {
	r := fuzzKeyring(t)
	for blob, want := range goldenBlobs {
		got, err := r.Open(blob, fuzzBinding)
		if err != nil {
			t.Fatalf("golden blob %.24q… no longer opens: %v", blob, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("golden blob %.24q… opens to %q, want %q", blob, got, want)
		}
	}
	if err := r.Verify(goldenSig, goldenSigMsg, fuzzBinding); err != nil {
		t.Fatalf("golden signature no longer verifies: %v", err)
	}
	if got := r.Sign(goldenSigMsg, fuzzBinding); got != goldenSig {
		t.Fatalf("Sign = %q, want golden %q", got, goldenSig)
	}
}

// FuzzOpen asserts that Open never panics, always fails with one of the four classes,
// and never succeeds on anything but an unmodified blob that Seal produced.
func FuzzOpen(f *testing.F) {
	r := fuzzKeyring(f)
	// Only the golden blobs may open. Freshly sealed seeds would not work: fuzz
	// workers are separate processes and would not know each other's blobs.
	valid := goldenBlobs
	f.Fuzz(func(t *testing.T, blob string) {
		pt, err := r.Open(blob, fuzzBinding)
		if err == nil {
			want, ok := valid[blob]
			if !ok {
				t.Fatalf("Open accepted a blob Seal never produced: %q", blob)
			}
			if !bytes.Equal(pt, want) {
				t.Fatalf("Open returned %q, want %q", pt, want)
			}
			return
		}
		if pt != nil {
			t.Fatal("Open returned data with an error")
		}
		switch Reason(err) {
		case "malformed", "unknown_key", "wrong_tenant", "tampered":
		default:
			t.Fatalf("Open error %q has no failure class", err)
		}
	})
}

// FuzzVerify is FuzzOpen for signatures.
func FuzzVerify(f *testing.F) {
	r := fuzzKeyring(f)
	f.Add(goldenSig, goldenSigMsg)
	f.Add(goldenSig[:len(goldenSig)-1]+"A", goldenSigMsg)
	f.Add("", []byte(nil))
	f.Fuzz(func(t *testing.T, sig string, msg []byte) {
		err := r.Verify(sig, msg, fuzzBinding)
		if err == nil {
			if sig != goldenSig || !bytes.Equal(msg, goldenSigMsg) {
				t.Fatalf("Verify accepted a forged signature %q for %q", sig, msg)
			}
			return
		}
		switch Reason(err) {
		case "malformed", "unknown_key", "tampered":
		default:
			t.Fatalf("Verify error %q has no failure class", err)
		}
	})
}
