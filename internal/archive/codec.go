package archive

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// The canonical plaintext of a segment is a length-prefixed binary frame, not JSON: encoding/json
// compacts json.RawMessage on output, which would break the byte-exact round trip of items, and a
// frame is cheaper to write and to parse. The header repeats the columns that matter for
// integrity (id, tenant, conversation, kind, previous, owner, created_at) so Get can detect a row
// whose clear-text columns were altered, and so Ref.Hash pins the lineage link as well as the items.
//
//	"CDA1" | uvarint-len string ×6 (id, tenant, conversation, kind, previous, owner) |
//	varint created_at (unix µs) | uvarint n | n × (uvarint-len item bytes)
//
// The sixth string was reserved (always empty) before segments had owners; a segment written then
// reads as owner "", which is what its column holds after the migration.
const plainMagic = "CDA1"

type header struct {
	ID, Tenant, Conversation, Kind, Previous, Owner string
	CreatedUS                                       int64
}

func encodePlain(h header, items []json.RawMessage) []byte {
	n := len(plainMagic) + 6*binary.MaxVarintLen64 + len(h.ID) + len(h.Tenant) + len(h.Conversation) +
		len(h.Kind) + len(h.Previous) + len(h.Owner) + 2*binary.MaxVarintLen64
	for _, it := range items {
		n += binary.MaxVarintLen64 + len(it)
	}
	b := make([]byte, 0, n)
	b = append(b, plainMagic...)
	for _, s := range [...]string{h.ID, h.Tenant, h.Conversation, h.Kind, h.Previous, h.Owner} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendVarint(b, h.CreatedUS)
	b = binary.AppendUvarint(b, uint64(len(items)))
	for _, it := range items {
		b = binary.AppendUvarint(b, uint64(len(it)))
		b = append(b, it...)
	}
	return b
}

var errFrame = errors.New("malformed segment frame")

// decodePlain parses a frame; items alias b.
func decodePlain(b []byte) (header, []json.RawMessage, error) {
	var h header
	if len(b) < len(plainMagic) || string(b[:len(plainMagic)]) != plainMagic {
		return h, nil, errFrame
	}
	b = b[len(plainMagic):]
	next := func() ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		v := b[k : k+int(n)]
		b = b[k+int(n):]
		return v, true
	}
	var fields [6]string
	for i := range fields {
		v, ok := next()
		if !ok {
			return h, nil, errFrame
		}
		fields[i] = string(v)
	}
	h.ID, h.Tenant, h.Conversation, h.Kind, h.Previous, h.Owner = fields[0], fields[1], fields[2], fields[3], fields[4], fields[5]
	t, k := binary.Varint(b)
	if k <= 0 {
		return h, nil, errFrame
	}
	h.CreatedUS = t
	b = b[k:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) { // every item costs at least one byte
		return h, nil, errFrame
	}
	b = b[k:]
	items := make([]json.RawMessage, 0, n)
	for range n {
		v, ok := next()
		if !ok {
			return h, nil, errFrame
		}
		items = append(items, json.RawMessage(v))
	}
	if len(b) != 0 {
		return h, nil, errFrame
	}
	return h, items, nil
}

func hashPlain(p []byte) string {
	sum := sha256.Sum256(p)
	return hex.EncodeToString(sum[:])
}

// Before sealing, plaintext is zstd-compressed when that helps: raw agent history is JSON with
// long repeated tool output and compresses several-fold, and the sealed size is what retention
// budgets count. The first byte says which.
const (
	packRaw  = 0
	packZstd = 1
	// minCompress: below this, zstd's frame overhead rarely pays.
	minCompress = 256
	// maxPlain bounds decompression of an (authenticated) blob.
	maxPlain = 1 << 30
)

var (
	zstdOnce sync.Once
	zstdEnc  *zstd.Encoder
	zstdDec  *zstd.Decoder
)

func zstdInit() {
	zstdOnce.Do(func() {
		// EncodeAll/DecodeAll are safe for concurrent use on a shared coder.
		zstdEnc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
		zstdDec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxPlain))
	})
}

func pack(p []byte) []byte {
	if len(p) >= minCompress {
		zstdInit()
		out := make([]byte, 1, len(p)/2+16)
		out[0] = packZstd
		out = zstdEnc.EncodeAll(p, out)
		if len(out) < len(p)+1 {
			return out
		}
	}
	out := make([]byte, 0, len(p)+1)
	out = append(out, packRaw)
	return append(out, p...)
}

func unpack(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, errFrame
	}
	switch b[0] {
	case packRaw:
		return b[1:], nil
	case packZstd:
		zstdInit()
		return zstdDec.DecodeAll(b[1:], nil)
	}
	return nil, fmt.Errorf("unknown packing %d", b[0])
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newSegmentID returns "seg_" + 26 lowercase base32 characters (128 random bits).
func newSegmentID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	s := idEncoding.EncodeToString(b[:])
	out := make([]byte, 0, 4+len(s))
	out = append(out, "seg_"...)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out = append(out, c)
	}
	return string(out)
}
