package crypto

import (
	crand "crypto/rand"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// maxKeyIDLen bounds key ids so they fit the envelope's one-byte length and stay cheap
// to carry in every blob.
const maxKeyIDLen = 32

// Key is one 256-bit master key with a short id that is written into every envelope.
// The id is public (it travels in clear); the secret never leaves the process except
// through String, the deliberate text form used by keygen and key files.
type Key struct {
	ID     string // 1..32 chars of [A-Za-z0-9._-]
	Secret [32]byte
}

// keyIDEncoding gives ids that are short, lowercase and unambiguous to read aloud.
var keyIDEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// GenerateKey returns a fresh random key whose id is "k" followed by 12 lowercase
// base32 characters (60 random bits: collisions between a deployment's keys are not
// a practical concern, and NewKeyring rejects them anyway).
func GenerateKey() (Key, error) {
	var k Key
	if _, err := crand.Read(k.Secret[:]); err != nil {
		return Key{}, fmt.Errorf("crypto: generate key: %w", err)
	}
	var idBytes [8]byte
	if _, err := crand.Read(idBytes[:]); err != nil {
		return Key{}, fmt.Errorf("crypto: generate key id: %w", err)
	}
	k.ID = "k" + keyIDEncoding.EncodeToString(idBytes[:])[:12]
	return k, nil
}

// String returns the text form "ID:base64url-no-padding(secret)". It contains the
// secret: it exists for keygen output and key files, never for logs.
func (k Key) String() string {
	return k.ID + ":" + base64.RawURLEncoding.EncodeToString(k.Secret[:])
}

// GoString redacts the secret so that %#v in a debug print does not leak it.
func (k Key) GoString() string {
	return fmt.Sprintf("crypto.Key{ID:%q, Secret:<redacted>}", k.ID)
}

// LogValue makes slog print only the key id.
func (k Key) LogValue() slog.Value {
	return slog.GroupValue(slog.String("id", k.ID))
}

// ParseKey parses the String form. The secret may also be standard base64 (with or
// without padding) because that is what `openssl rand -base64 32` prints.
// Error messages never echo the input, which may contain a secret.
func ParseKey(s string) (Key, error) {
	s = strings.TrimSpace(s)
	id, enc, ok := strings.Cut(s, ":")
	if !ok {
		return Key{}, errors.New("crypto: key must look like ID:base64(secret)")
	}
	id = strings.TrimSpace(id)
	if err := validKeyID(id); err != nil {
		return Key{}, err
	}
	secret, err := decodeSecret(strings.TrimSpace(enc))
	if err != nil {
		return Key{}, fmt.Errorf("crypto: key %q: %w", id, err)
	}
	k := Key{ID: id}
	copy(k.Secret[:], secret)
	clear(secret)
	return k, nil
}

// decodeSecret accepts base64url or standard base64, padded or not, and insists on
// exactly 32 bytes.
func decodeSecret(enc string) ([]byte, error) {
	for _, e := range []*base64.Encoding{
		base64.RawURLEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.StdEncoding,
	} {
		b, err := e.Strict().DecodeString(enc)
		if err != nil {
			continue
		}
		if len(b) != 32 {
			clear(b)
			return nil, fmt.Errorf("secret must be 32 bytes, got %d", len(b))
		}
		return b, nil
	}
	return nil, errors.New("secret is not valid base64")
}

// validKeyID reports whether id can be written into an envelope and a keyring file.
func validKeyID(id string) error {
	if id == "" || len(id) > maxKeyIDLen {
		return fmt.Errorf("crypto: key id must be 1..%d characters", maxKeyIDLen)
	}
	if !isKeyID([]byte(id)) {
		// Not echoed: a malformed id may be a secret pasted into the wrong place.
		return errors.New("crypto: key id may only contain A-Z a-z 0-9 . _ -")
	}
	return nil
}

func isKeyID(id []byte) bool {
	if len(id) == 0 || len(id) > maxKeyIDLen {
		return false
	}
	for _, c := range id {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// sameSecret compares two secrets in constant time.
func sameSecret(a, b *[32]byte) bool {
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
