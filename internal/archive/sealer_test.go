package archive

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
)

// testSealer stands in for the keyring adapter: AES-256-GCM under a fixed key, with the segment id
// and tenant as associated data, so a blob only opens for the row it was sealed for.
type testSealer struct{ aead cipher.AEAD }

var testKey = []byte("compactd-archive-test-key-32byte")

func newTestSealer() *testSealer {
	block, err := aes.NewCipher(testKey)
	if err != nil {
		panic(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return &testSealer{aead: aead}
}

func ad(segmentID, tenant string) []byte {
	return []byte("archive\x00" + segmentID + "\x00" + tenant)
}

func (s *testSealer) SealArchive(plaintext []byte, segmentID, tenant string) (string, error) {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plaintext)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plaintext, ad(segmentID, tenant))), nil
}

func (s *testSealer) OpenArchive(blob, segmentID, tenant string) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(blob)
	if err != nil {
		return nil, err
	}
	if len(b) < s.aead.NonceSize() {
		return nil, errors.New("short blob")
	}
	return s.aead.Open(nil, b[:s.aead.NonceSize()], b[s.aead.NonceSize():], ad(segmentID, tenant))
}

func (s *testSealer) IndexKey() []byte {
	return []byte("compactd-archive-index-key-32byt")
}
