package crypto

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"strings"
	"sync"

	"golang.org/x/crypto/hkdf"
)

// HKDF info strings: one per purpose, so the seal, tenant-tag and signing keys are
// independent even though they come from one master secret. Changing any of these
// invalidates every blob and signature ever issued.
const (
	infoSeal      = "compactd/v1 seal aes-256-gcm"
	infoTenantTag = "compactd/v1 tenant-tag hmac-sha256"
	infoSign      = "compactd/v1 sign hmac-sha256"
)

// Keyring holds one active key, which seals and signs, and any number of retired keys,
// which still open and verify. It is immutable after construction and safe for
// concurrent use. The per-key AEAD and derived subkeys are built once here, not per
// call.
type Keyring struct {
	active *keyEntry
	order  []*keyEntry // active first, then retired in the order given
	byID   map[string]*keyEntry
}

// keyEntry is a Key plus everything derived from it.
type keyEntry struct {
	id      string
	secret  [32]byte // kept only for String (keygen / files) and duplicate detection
	aead    cipher.AEAD
	tagPool hmacPool // HMAC-SHA256(tenantTagKey, ·)
	sigPool hmacPool // HMAC-SHA256(signKey, ·)
}

// hmacPool reuses keyed HMAC states: building one costs two SHA-256 blocks and a few
// allocations, which would otherwise be paid on every Seal/Open/Sign.
type hmacPool struct{ p sync.Pool }

// macState is a keyed HMAC plus scratch space, so that feeding it a string and
// reading the sum do not allocate either.
type macState struct {
	h       hash.Hash
	scratch []byte
}

func newHMACPool(key []byte) hmacPool {
	k := append([]byte(nil), key...)
	return hmacPool{p: sync.Pool{New: func() any {
		return &macState{h: hmac.New(sha256.New, k), scratch: make([]byte, 0, 64)}
	}}}
}

func (p *hmacPool) get() *macState { return p.p.Get().(*macState) }

func (p *hmacPool) put(m *macState) {
	m.h.Reset()
	if cap(m.scratch) > 1<<10 { // do not pin a buffer grown by one huge input
		m.scratch = make([]byte, 0, 64)
	}
	p.p.Put(m)
}

func newKeyEntry(k Key) (*keyEntry, error) {
	if err := validKeyID(k.ID); err != nil {
		return nil, err
	}
	sealKey := derive(&k.Secret, infoSeal)
	block, err := aes.NewCipher(sealKey[:])
	clear(sealKey[:])
	if err != nil {
		return nil, fmt.Errorf("crypto: key %q: %w", k.ID, err)
	}
	// The random-nonce GCM generates the 96-bit nonce itself and lays it out as
	// nonce||ciphertext||tag, which is exactly the tail of our envelope.
	aead, err := cipher.NewGCMWithRandomNonce(block)
	if err != nil {
		return nil, fmt.Errorf("crypto: key %q: %w", k.ID, err)
	}
	tagKey := derive(&k.Secret, infoTenantTag)
	sigKey := derive(&k.Secret, infoSign)
	e := &keyEntry{
		id:      k.ID,
		secret:  k.Secret,
		aead:    aead,
		tagPool: newHMACPool(tagKey[:]),
		sigPool: newHMACPool(sigKey[:]),
	}
	clear(tagKey[:])
	clear(sigKey[:])
	return e, nil
}

// derive expands the master secret into a 32-byte subkey for one purpose. The master
// secret is already uniformly random, so no salt is needed (RFC 5869 §3.1).
func derive(secret *[32]byte, info string) [32]byte {
	var out [32]byte
	r := hkdf.New(sha256.New, secret[:], nil, []byte(info))
	if _, err := io.ReadFull(r, out[:]); err != nil {
		// Unreachable: HKDF-SHA256 can produce up to 8160 bytes.
		panic("crypto: hkdf: " + err.Error())
	}
	return out
}

// NewKeyring builds a keyring. Duplicate ids, or the same secret under two ids, are
// rejected: either is almost certainly a copy-paste mistake during rotation.
func NewKeyring(active Key, retired ...Key) (*Keyring, error) {
	r := &Keyring{byID: make(map[string]*keyEntry, 1+len(retired))}
	for i, k := range append([]Key{active}, retired...) {
		if prev, ok := r.byID[k.ID]; ok {
			return nil, fmt.Errorf("crypto: duplicate key id %q", prev.id)
		}
		for _, prev := range r.order {
			if sameSecret(&prev.secret, &k.Secret) {
				return nil, fmt.Errorf("crypto: keys %q and %q have the same secret", prev.id, k.ID)
			}
		}
		e, err := newKeyEntry(k)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			r.active = e
		}
		r.order = append(r.order, e)
		r.byID[e.id] = e
	}
	return r, nil
}

// ParseKeyring parses the keyring text form used by COMPACTD_KEYS, key files and
// `compactd keygen`:
//
//   - entries are separated by newlines or commas (commas keep an env var on one line);
//   - '#' starts a comment that runs to the end of the line; blank entries are ignored;
//   - an entry is "ID:secret" (see ParseKey), optionally prefixed by "active " or
//     "retired ";
//   - exactly one key is active: the one marked "active", or else the first entry not
//     marked "retired". Every other entry is retired.
//
// Errors name entries by position and key id, never by content.
func ParseKeyring(text string) (*Keyring, error) {
	type parsed struct {
		key    Key
		marked string // "", "active" or "retired"
	}
	var entries []parsed
	n := 0
	for line := range strings.Lines(text) {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		for field := range strings.SplitSeq(line, ",") {
			field = strings.TrimSpace(field)
			if field == "" {
				continue
			}
			n++
			var p parsed
			if i := strings.IndexAny(field, " \t"); i > 0 {
				if word := field[:i]; word == "active" || word == "retired" {
					p.marked, field = word, field[i+1:]
				}
			}
			k, err := ParseKey(field)
			if err != nil {
				return nil, fmt.Errorf("crypto: keyring entry %d: %w", n, err)
			}
			p.key = k
			entries = append(entries, p)
		}
	}
	if len(entries) == 0 {
		return nil, errors.New("crypto: keyring has no keys")
	}
	activeIdx := -1
	for i, p := range entries {
		if p.marked != "active" {
			continue
		}
		if activeIdx >= 0 {
			return nil, fmt.Errorf("crypto: keyring marks both %q and %q active; exactly one may be",
				entries[activeIdx].key.ID, p.key.ID)
		}
		activeIdx = i
	}
	if activeIdx < 0 {
		for i, p := range entries {
			if p.marked == "" {
				activeIdx = i
				break
			}
		}
	}
	if activeIdx < 0 {
		return nil, errors.New("crypto: keyring has no active key (every entry is marked retired)")
	}
	retired := make([]Key, 0, len(entries)-1)
	for i, p := range entries {
		if i != activeIdx {
			retired = append(retired, p.key)
		}
	}
	r, err := NewKeyring(entries[activeIdx].key, retired...)
	for i := range entries {
		clear(entries[i].key.Secret[:])
	}
	return r, err
}

// ActiveID is the id of the key that seals and signs.
func (r *Keyring) ActiveID() string { return r.active.id }

// IDs lists every key id, active first, then retired keys in configuration order.
func (r *Keyring) IDs() []string {
	ids := make([]string, len(r.order))
	for i, e := range r.order {
		ids[i] = e.id
	}
	return ids
}

// String returns the ParseKeyring text form, one explicitly marked entry per line.
// It contains every secret: it exists for `compactd keygen` and keyring files.
func (r *Keyring) String() string {
	var b strings.Builder
	for i, e := range r.order {
		if i == 0 {
			b.WriteString("active ")
		} else {
			b.WriteString("retired ")
		}
		b.WriteString(Key{ID: e.id, Secret: e.secret}.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// GoString redacts secrets so that %#v in a debug print does not leak them.
func (r *Keyring) GoString() string {
	return fmt.Sprintf("crypto.Keyring{active:%q, ids:%q}", r.ActiveID(), r.IDs())
}

// LogValue makes slog print only key ids.
func (r *Keyring) LogValue() slog.Value {
	return slog.GroupValue(slog.String("active", r.ActiveID()), slog.Any("ids", r.IDs()))
}

// lookup finds a key by the id bytes read from an envelope without allocating.
func (r *Keyring) lookup(id []byte) *keyEntry { return r.byID[string(id)] }
