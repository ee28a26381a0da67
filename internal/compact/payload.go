package compact

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/klauspost/compress/zstd"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/jsonx"
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
	// Tail is how many items just before the compaction item were kept verbatim after the
	// summary (a speculative compaction summarised the prefix before them).
	Tail int `json:"tail,omitempty"`
}

// ArchiveRef points at the archived originals a compaction replaced.
type ArchiveRef struct {
	ID   string `json:"id"`
	Hash string `json:"hash"`
	// Conversation is the archive conversation the segment belongs to; later compactions of the
	// same conversation inherit it through the lineage when the client names none.
	Conversation string `json:"conversation,omitempty"`
	// Owner is the owner digest (internal/owner) the segment was archived under: whoever carries
	// this compaction back may read it, as it may read the summary ("" in items sealed before
	// owners existed, whose segments have owner "" too).
	Owner string `json:"owner,omitempty"`
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
		// keep the frame checksum (xxhash, ~2 µs at 16 KB): the AEAD authenticates the bytes,
		// but a checksum also catches our own bugs between compress and seal
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
	js := p.appendJSON(make([]byte, 0, len(p.Summary)+len(p.Ledger)+256))
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
	p, err := parsePayload(js)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPayload, err)
	}
	if p.V != PayloadVersion {
		return nil, fmt.Errorf("%w: unsupported version %d", ErrPayload, p.V)
	}
	return p, nil
}

// appendJSON writes the payload as JSON with the struct tags' names. It is hand-written because
// encoding/json runs at ~100 MB/s on string-heavy values, which alone would spend most of the
// 50 µs seal budget on a 16 KB summary; this runs at memory speed.
func (p *Payload) appendJSON(b []byte) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(p.V), 10)
	b = append(b, `,"summary":`...)
	b = api.AppendString(b, p.Summary)
	if p.Model != "" {
		b = append(b, `,"model":`...)
		b = api.AppendString(b, p.Model)
	}
	b = append(b, `,"created_at":`...)
	b = strconv.AppendInt(b, p.CreatedAt, 10)
	b = append(b, `,"tokens_before":`...)
	b = strconv.AppendInt(b, int64(p.TokensBefore), 10)
	b = append(b, `,"tokens_after":`...)
	b = strconv.AppendInt(b, int64(p.TokensAfter), 10)
	b = append(b, `,"items_replaced":`...)
	b = strconv.AppendInt(b, int64(p.ItemsReplaced), 10)
	if p.Previous != "" {
		b = append(b, `,"previous":`...)
		b = api.AppendString(b, p.Previous)
	}
	if p.Archive != nil {
		b = append(b, `,"archive":{"id":`...)
		b = api.AppendString(b, p.Archive.ID)
		b = append(b, `,"hash":`...)
		b = api.AppendString(b, p.Archive.Hash)
		if p.Archive.Conversation != "" {
			b = append(b, `,"conversation":`...)
			b = api.AppendString(b, p.Archive.Conversation)
		}
		if p.Archive.Owner != "" {
			b = append(b, `,"owner":`...)
			b = api.AppendString(b, p.Archive.Owner)
		}
		b = append(b, '}')
	}
	if p.Ledger != "" {
		b = append(b, `,"ledger":`...)
		b = api.AppendString(b, p.Ledger)
	}
	if p.Tail > 0 {
		b = append(b, `,"tail":`...)
		b = strconv.AppendInt(b, int64(p.Tail), 10)
	}
	return append(b, '}')
}

// parsePayload reads the JSON appendJSON writes (and any equivalent JSON: field order, unknown
// fields and whitespace do not matter) with gjson, several times faster than encoding/json.
func parsePayload(js []byte) (*Payload, error) {
	// The payload was sealed by compactd, but bound its depth anyway: gjson recurses, and a
	// key leak must not turn into a process crash.
	if err := jsonx.Valid(js); err != nil {
		return nil, fmt.Errorf("malformed JSON: %w", err)
	}
	v := gjson.ParseBytes(js)
	if !v.IsObject() {
		return nil, errors.New("not an object")
	}
	var p Payload
	var err error
	str := func(name string, r gjson.Result, dst *string) {
		if r.Type != gjson.String && r.Type != gjson.Null {
			err = fmt.Errorf("%s: not a string", name)
		}
		*dst = r.Str
	}
	num := func(name string, r gjson.Result) int64 {
		n, e := strconv.ParseInt(r.Raw, 10, 64)
		if r.Type != gjson.Number || e != nil {
			err = fmt.Errorf("%s: not an integer", name)
		}
		return n
	}
	v.ForEach(func(k, r gjson.Result) bool {
		switch k.Str {
		case "v":
			p.V = int(num(k.Str, r))
		case "summary":
			str(k.Str, r, &p.Summary)
		case "model":
			str(k.Str, r, &p.Model)
		case "created_at":
			p.CreatedAt = num(k.Str, r)
		case "tokens_before":
			p.TokensBefore = int(num(k.Str, r))
		case "tokens_after":
			p.TokensAfter = int(num(k.Str, r))
		case "items_replaced":
			p.ItemsReplaced = int(num(k.Str, r))
		case "previous":
			str(k.Str, r, &p.Previous)
		case "ledger":
			str(k.Str, r, &p.Ledger)
		case "tail":
			p.Tail = int(num(k.Str, r))
		case "archive":
			if r.IsObject() {
				p.Archive = &ArchiveRef{}
				str("archive.id", r.Get("id"), &p.Archive.ID)
				str("archive.hash", r.Get("hash"), &p.Archive.Hash)
				if c := r.Get("conversation"); c.Exists() {
					str("archive.conversation", c, &p.Archive.Conversation)
				}
				if o := r.Get("owner"); o.Exists() {
					str("archive.owner", o, &p.Archive.Owner)
				}
			} else if r.Type != gjson.Null {
				err = errors.New("archive: not an object")
			}
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return &p, nil
}
