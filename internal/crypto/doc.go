// Package crypto seals everything compactd hands to a client and later takes back:
// compaction items, archives and Anthropic compaction-block signatures.
//
// The design follows oauth2-proxy's pkg/encryption: the rest of compactd sees a tiny
// interface (Sealer, plus Sign/Verify on *Keyring) and never touches a cipher.
//
// Keys. A Keyring holds one active Key, which seals and signs, and any number of
// retired keys, which still open and verify. Rotation is therefore "add a new key as
// active, keep the old one as retired until every blob sealed with it has aged out".
// Each Key's 256-bit master secret is never used directly: HKDF-SHA256 derives one
// subkey per purpose (sealing, tenant tags, signing), so a weakness in one use cannot
// leak into another.
//
// Envelope. A sealed blob is base64url (no padding) of
//
//	version(1)=1 | len(keyID)(1) | keyID | tenantTag(8) | nonce(12) | ciphertext+tag(16)
//
// sealed with AES-256-GCM under a fresh random nonce. The key id travels in clear so
// Open can pick the right key after a rotation. The tenant tag is a keyed hash of the
// tenant, checked before decryption so metrics can tell a cross-tenant replay apart
// from tampering. The Binding (kind, item id, tenant) is in the AEAD associated data,
// length-prefixed, so a blob moved to another item or kind fails authentication.
//
// Errors. Every Open/Verify failure wraps exactly one of ErrMalformed, ErrUnknownKey,
// ErrWrongTenant or ErrTampered, and Reason turns it into a bounded metric label.
// No error message and no String() other than the Key/Keyring text forms ever
// contains secret material.
//
// Compression is deliberately not done here: the payload layer compresses before
// sealing, because ciphertext does not compress.
package crypto
