package crypto

import (
	"errors"
	"fmt"
)

// ErrNoSuchKey is returned by Derive for a key id the keyring does not hold.
var ErrNoSuchKey = errors.New("crypto: no key with that id in the keyring")

// Derive returns a 32-byte subkey for purpose, derived with HKDF-SHA256 from the key named keyID
// ("" = the active key). Purposes must be distinct, fixed strings (e.g. "compactd/v1 archive
// index"); they never collide with the subkeys this package uses itself. It is for keys that must
// outlive a rotation, such as a blind index: name the key explicitly and keep it in the keyring
// (retired) for as long as what it keys exists.
func (r *Keyring) Derive(keyID, purpose string) ([]byte, error) {
	if purpose == "" {
		return nil, errors.New("crypto: Derive needs a purpose")
	}
	e := r.active
	if keyID != "" {
		if e = r.byID[keyID]; e == nil {
			return nil, fmt.Errorf("%w: %q", ErrNoSuchKey, keyID)
		}
	}
	k := derive(&e.secret, "compactd/v1 derive "+purpose)
	return k[:], nil
}
