package compact

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/klauspost/compress/zstd"
)

// PayloadVersion is the only payload layout this build writes and reads.
const PayloadVersion = 1

// Payload is what is sealed inside a compaction item's encrypted_content.
type Payload struct {
	V             int         `json:"v"`
	Summary       string      `json:"summary"`
	Model         string      `json:"model,omitempty"`
	CreatedAt     int64       `json:"created_at"` // unix seconds
	TokensBefore  int         `json:"tokens_before"`
	TokensAfter   int         `json:"tokens_after"`
	ItemsReplaced int         `json:"items_replaced"`
	Previous      string      `json:"previous,omitempty"` // id of the compaction item this one supersedes
	Archive       *ArchiveRef `json:"archive,omitempty"`  // reserved for the archive
	Ledger        string      `json:"ledger,omitempty"`   // reserved: facts ledger
}

// ArchiveRef points at the archived originals a compaction replaced.
type ArchiveRef struct {
	ID   string `json:"id"`
	Hash string `json:"hash"`
}

// Encoding tags: the first byte of a marshalled payload.
const (
	encRaw  byte = 0
	encZstd byte = 1
)

const (
	// compressMin is the JSON size below which compression saves too little to pay for itself.
	compressMin = 512
	// MaxPayloadSize caps a decompressed payload, so a crafted blob (which would have to get past
	// the AEAD first, but keys leak) cannot balloon into gigabytes.
	MaxPayloadSize = 32 << 20
)

// ErrPayload reports a payload that cannot be decoded.
var ErrPayload = errors.New("compact: invalid payload")

// One encoder and decoder serve all goroutines: EncodeAll/DecodeAll are safe for concurrent use
// and reuse their internal state, which keeps a 16 KB seal free of per-call setup.
var (
	zenc, _ = zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderCRC(false), // the AEAD already authenticates the bytes
		zstd.WithLowerEncoderMem(true),
		zstd.WithZeroFrames(true))
	zdec, _ = zstd.NewReader(nil,
		zstd.WithDecoderMaxMemory(MaxPayloadSize),
		zstd.WithDecoderMaxWindow(MaxPayloadSize),
		zstd.WithDecoderConcurrency(0))
)

// Marshal encodes the payload as JSON behind a one-byte tag: 0 for raw JSON, 1 for zstd (fastest
// level) when the JSON is at least 512 bytes and compression makes it smaller. V defaults to
// PayloadVersion.
func (p *Payload) Marshal() ([]byte, error) {
	if p.V == 0 {
		p.V = PayloadVersion
	}
	js, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	if len(js) >= compressMin {
		out := make([]byte, 1, 1+len(js)/2)
		out[0] = encZstd
		out = zenc.EncodeAll(js, out)
		if len(out) < 1+len(js) {
			return out, nil
		}
	}
	out := make([]byte, 1+len(js))
	out[0] = encRaw
	copy(out[1:], js)
	return out, nil
}

// UnmarshalPayload decodes what Marshal produced. It rejects unknown encodings and versions,
// malformed JSON, and anything that would decompress past MaxPayloadSize.
func UnmarshalPayload(b []byte) (*Payload, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: too short", ErrPayload)
	}
	js := b[1:]
	switch b[0] {
	case encRaw:
	case encZstd:
		// WithDecoderMaxMemory bounds DecodeAll's output (declared frame sizes included)
		var err error
		js, err = zdec.DecodeAll(js, make([]byte, 0, min(4*len(js)+4096, MaxPayloadSize)))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrPayload, err)
		}
	default:
		return nil, fmt.Errorf("%w: unknown encoding %d", ErrPayload, b[0])
	}
	if len(js) > MaxPayloadSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrPayload, MaxPayloadSize)
	}
	var p Payload
	if err := json.Unmarshal(js, &p); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPayload, err)
	}
	if p.V != PayloadVersion {
		return nil, fmt.Errorf("%w: unsupported version %d", ErrPayload, p.V)
	}
	return &p, nil
}
