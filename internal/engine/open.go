package engine

import (
	"errors"
	"strings"
	"time"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/crypto"
)

// Opened is a compaction item or block the engine has opened and checked.
type Opened struct {
	ID      string
	Payload *compact.Payload
	// Summary is the summary in force: the sealed one, or a Messages client's edit when edited
	// summaries are allowed (the adapter sets it).
	Summary string
}

// ErrExpired is a compaction older than Config.ItemMaxAge.
var ErrExpired = errors.New("compaction expired")

// encryptedContent is the opaque string a client holds: the item id, then the sealed payload.
// The id travels inside the string because clients may drop the item's id field on the way back
// (it is optional on input, and Anthropic blocks have none); the id is bound into the seal's
// associated data, so a blob cannot be re-labelled or moved to another item.
func encryptedContent(itemID, sealed string) string { return itemID + "." + sealed }

// SplitEncryptedContent splits encrypted_content into the item id and the sealed payload; ok is
// false when s is not in compactd's format ("cmp_<id>.<sealed>").
func SplitEncryptedContent(s string) (itemID, sealed string, ok bool) {
	itemID, sealed, ok = strings.Cut(s, ".")
	return itemID, sealed, ok && strings.HasPrefix(itemID, "cmp_")
}

// Open opens encrypted_content sealed under kind for tenant. givenID, when not "", is the id the
// client sent beside it, which must match the sealed one. A signature, when sig is not "", must
// verify first. Errors are the crypto package's (crypto.Reason names them) or ErrExpired.
func (e *Engine) Open(ec, givenID, kind, tenant, sig string) (*Opened, error) {
	id, sealed, ok := SplitEncryptedContent(ec)
	b := crypto.Binding{Kind: kind, ItemID: id, Tenant: tenant}
	if sig != "" {
		sg, isSigner := e.cfg.Sealer.(Signer)
		if !ok || !isSigner {
			return nil, &SignatureError{Err: crypto.ErrMalformed}
		}
		if err := sg.Verify(sig, []byte(ec), b); err != nil {
			return nil, &SignatureError{Err: err}
		}
	}
	if !ok {
		return nil, crypto.ErrMalformed
	}
	if givenID != "" && givenID != id {
		return nil, crypto.ErrTampered
	}
	plain, err := e.cfg.Sealer.Open(sealed, b)
	if err != nil {
		return nil, err
	}
	p, err := compact.UnmarshalPayload(plain)
	if err != nil {
		return nil, crypto.ErrMalformed
	}
	if e.cfg.ItemMaxAge > 0 && p.CreatedAt > 0 && time.Since(time.Unix(p.CreatedAt, 0)) > e.cfg.ItemMaxAge {
		return nil, ErrExpired
	}
	return &Opened{ID: id, Payload: p, Summary: p.Summary}, nil
}

// SignatureError is a signed compaction whose signature does not verify.
type SignatureError struct{ Err error }

func (e *SignatureError) Error() string { return "compaction signature: " + e.Err.Error() }
func (e *SignatureError) Unwrap() error { return e.Err }

// Reason names why Open failed, for logs, metrics and messages: "expired", or crypto.Reason's
// names ("malformed" for ""), of the signature's failure too (errors.As a *SignatureError tells
// that one apart).
func Reason(err error) string {
	if errors.Is(err, ErrExpired) {
		return "expired"
	}
	if r := crypto.Reason(err); r != "" {
		return r
	}
	return "malformed"
}
