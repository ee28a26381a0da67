// Package owner names who a conversation's stored state belongs to, and signs the references
// compactd hands a client so that it can come back to that state.
//
// compactd stores three kinds of state per conversation: the archive (the raw history its
// compactions replaced), the memo (which compaction replaced which prefix) and speculative
// summaries. Clients name conversations themselves — a session header, a prompt_cache_key — and
// a name a client chose proves nothing: anyone can send any header. So every stored row carries
// its owner, a keyed digest of the tenant and the credential of the request that wrote it, and
// every read is scoped to the owners the request can prove:
//
//   - its own: the digest of its tenant and credential (Keyer.Of);
//   - the owner vouched for by something compactd itself issued and the request carries: a
//     sealed compaction item or block opened on this request (its payload names the owner), or
//     a signed reference in a summary compactd wrote (Keyer.Ref, Keyer.Verify).
//
// The digest is HMAC-SHA256 under a server key derived from the keyring, so it is the same on
// every replica, reveals nothing about the credential, and cannot be computed by a client. A
// conversation name is only a label inside an owner's namespace: two credentials that use the
// same session id have two separate archives under it, and neither reads or writes the other's.
package owner

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
)

// Len is the length of a digest's hex form (16 bytes).
const Len = 32

// KeyPurpose is the keyring derivation purpose of the owner key (crypto.Keyring.Derive). It is
// derived from the same key as the archive's blind index (--archive-index-key), so pinning that
// key keeps owners stable across key rotation, as it keeps the index searchable.
const KeyPurpose = "compactd/v1 conversation owner"

// Keyer computes owner digests and signs references. It is safe for concurrent use.
type Keyer struct{ key []byte }

// New returns a Keyer over key (at least 32 bytes).
func New(key []byte) (*Keyer, error) {
	if len(key) < 32 {
		return nil, errors.New("owner: key must be at least 32 bytes")
	}
	return &Keyer{key: append([]byte(nil), key...)}, nil
}

// Ephemeral returns a Keyer with a random key: owners it computes mean nothing to another
// process. For a proxy without a keyring-backed key (tests, embedders with their own Sealer).
func Ephemeral() *Keyer {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return &Keyer{key: k}
}

func (k *Keyer) mac(domain string, fields ...string) []byte {
	m := hmac.New(sha256.New, k.key)
	m.Write([]byte(domain))
	for _, f := range fields {
		// Length-prefixed, so no choice of fields runs into the next.
		var n [4]byte
		l := len(f)
		n[0], n[1], n[2], n[3] = byte(l>>24), byte(l>>16), byte(l>>8), byte(l)
		m.Write(n[:])
		m.Write([]byte(f))
	}
	return m.Sum(nil)
}

// Of is the owner of a request: the digest of its tenant and the credential it presented (with a
// tenants file, the compactd client key; without one, the provider credential the client sends).
// Every request without a credential in a tenant is the same owner: where compactd sees no
// credential, it cannot tell clients apart.
func (k *Keyer) Of(tenant, credential string) string {
	return hex.EncodeToString(k.mac("compactd/v1 owner\x00", tenant, credential)[:Len/2])
}

// A reference names an owner's conversation in text compactd writes for a client (the summary
// it answers an agent's own compaction with), so that the turns after it, which carry no sealed
// item, can prove they continue that conversation:
//
//	cref1.<base64url(conversation)>.<owner>.<base64url(mac[:16])>
//
// The MAC binds the tenant too, so a reference never works in another tenant.
const refPrefix = "cref1."

// maxRef bounds what Verify looks at (a conversation id is at most 128 bytes).
const maxRef = 256

// Ref returns the signed reference to (tenant, conversation, owner).
func (k *Keyer) Ref(tenant, conversation, owner string) string {
	mac := k.mac("compactd/v1 ref\x00", tenant, conversation, owner)[:16]
	return refPrefix + base64.RawURLEncoding.EncodeToString([]byte(conversation)) + "." + owner + "." +
		base64.RawURLEncoding.EncodeToString(mac)
}

// Verify checks a reference for tenant and returns the conversation and owner it names.
func (k *Keyer) Verify(tenant, ref string) (conversation, owner string, ok bool) {
	if len(ref) > maxRef {
		return "", "", false
	}
	rest, found := strings.CutPrefix(ref, refPrefix)
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || len(parts[1]) != Len {
		return "", "", false
	}
	conv, err := base64.RawURLEncoding.Strict().DecodeString(parts[0])
	if err != nil || len(conv) == 0 {
		return "", "", false
	}
	mac, err := base64.RawURLEncoding.Strict().DecodeString(parts[2])
	if err != nil {
		return "", "", false
	}
	want := k.mac("compactd/v1 ref\x00", tenant, string(conv), parts[1])[:16]
	if !hmac.Equal(mac, want) {
		return "", "", false
	}
	return string(conv), parts[1], true
}

// FindRef returns the first well-formed reference in text that verifies for tenant. It scans
// for the prefix only (linear in text), and each candidate is bounded by maxRef.
func (k *Keyer) FindRef(tenant, text string) (conversation, owner string, ok bool) {
	for {
		i := strings.Index(text, refPrefix)
		if i < 0 {
			return "", "", false
		}
		text = text[i:]
		end := strings.IndexFunc(text, func(r rune) bool { return !refChar(r) })
		if end < 0 {
			end = len(text)
		}
		// A reference never ends in '.' (base64url has none), a sentence may.
		if c, o, ok := k.Verify(tenant, strings.TrimRight(text[:end], ".")); ok {
			return c, o, true
		}
		text = text[len(refPrefix):]
	}
}

func refChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
}

// Set is the owners a request may read: its own, and any vouched for by a compactd-issued item
// or reference it carries. The zero Set reads nothing.
type Set []string

// With returns s plus o (once).
func (s Set) With(o string) Set {
	for _, x := range s {
		if x == o {
			return s
		}
	}
	return append(s, o)
}
