package crypto

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
)

// maxSignatureLen bounds what Verify will decode: a real signature is at most
// 2 + 32 + 32 raw bytes.
const maxSignatureLen = 128

// Sign returns a signature over msg bound to b, made with the active key:
// base64url(version | len(keyID) | keyID | HMAC-SHA256(signKey, AD || msg)).
// The key id travels in the signature so a retired key can still verify it.
// Anthropic on-demand compaction blocks carry this and must return it byte-exact.
func (r *Keyring) Sign(msg []byte, b Binding) string {
	e := r.active
	raw := make([]byte, 0, 2+len(e.id)+sha256.Size)
	raw = append(raw, envelopeV1, byte(len(e.id)))
	raw = append(raw, e.id...)
	raw = e.mac(raw, msg, b)
	return encodeString(raw)
}

// Verify checks a signature made by Sign with the same msg and binding, using the key
// the signature names (retired keys verify too). The comparison is constant-time.
// Failures wrap exactly one of ErrMalformed, ErrUnknownKey or ErrTampered.
func (r *Keyring) Verify(sig string, msg []byte, b Binding) error {
	raw, err := decodeEnvelope(sig, 2+1+sha256.Size, maxSignatureLen)
	if err != nil {
		return err
	}
	id, got, err := splitHeader(raw)
	if err != nil {
		return err
	}
	e := r.lookup(id)
	if e == nil {
		return fmt.Errorf("%w %q", ErrUnknownKey, id)
	}
	if len(got) != sha256.Size {
		return fmt.Errorf("%w: bad signature length", ErrMalformed)
	}
	var buf [sha256.Size]byte
	if !hmac.Equal(e.mac(buf[:0], msg, b), got) {
		return ErrTampered
	}
	return nil
}

// mac appends HMAC-SHA256(signKey, AD || msg). AD is self-delimiting (length-prefixed
// fields), so the boundary between it and msg is unambiguous.
func (e *keyEntry) mac(dst, msg []byte, b Binding) []byte {
	m := e.sigPool.get()
	m.scratch = appendAD(m.scratch[:0], signDomain, e.id, b)
	m.h.Write(m.scratch)
	m.h.Write(msg)
	dst = m.h.Sum(dst)
	e.sigPool.put(m)
	return dst
}
