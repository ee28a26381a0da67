package proxy

import (
	"testing"

	"github.com/compactd/compactd/internal/crypto"
)

// internalRing is a one-key keyring for the package's internal tests.
func internalRing(tb testing.TB) *crypto.Keyring {
	tb.Helper()
	k, err := crypto.GenerateKey()
	if err != nil {
		tb.Fatal(err)
	}
	r, err := crypto.NewKeyring(k)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}
