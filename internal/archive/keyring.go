package archive

import "github.com/compactd/compactd/internal/crypto"

// keyringSealer adapts compactd's keyring to the store: segments are sealed like compaction items
// (kind "archive", bound to the segment id and tenant), and the blind index is keyed by a subkey
// of one named key.
type keyringSealer struct {
	ring     *crypto.Keyring
	indexKey []byte
}

// KeyringSealer returns the Sealer the proxy and the CLI use. indexKeyID names the key the blind
// index is derived from ("" = the active key). The index key must not change while the archive
// exists — a new one would not find what was indexed under the old — so operators who rotate
// keys pin it to one key id and keep that key in the keyring, retired, for as long as the archive
// is kept. Segment contents themselves follow normal rotation: retired keys still open them.
func KeyringSealer(ring *crypto.Keyring, indexKeyID string) (Sealer, error) {
	k, err := ring.Derive(indexKeyID, "compactd/v1 archive blind index")
	if err != nil {
		return nil, err
	}
	return &keyringSealer{ring: ring, indexKey: k}, nil
}

func (s *keyringSealer) SealArchive(plaintext []byte, segmentID, tenant string) (string, error) {
	return s.ring.Seal(plaintext, crypto.Binding{Kind: "archive", ItemID: segmentID, Tenant: tenant})
}

func (s *keyringSealer) OpenArchive(blob, segmentID, tenant string) ([]byte, error) {
	return s.ring.Open(blob, crypto.Binding{Kind: "archive", ItemID: segmentID, Tenant: tenant})
}

func (s *keyringSealer) IndexKey() []byte { return s.indexKey }
