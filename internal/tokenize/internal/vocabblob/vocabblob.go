// Package vocabblob turns tiktoken-go's o200k_base vocabulary into the binary table that
// internal/tokenize embeds. It is used only by the generator and by tests: importing it builds the
// library's 7 MB vocabulary map, which is exactly what the runtime tokenizer avoids.
package vocabblob

import (
	"encoding/binary"
	"fmt"

	"github.com/tiktoken-go/tokenizer/codec"
)

// Magic opens the blob; its last byte is the format version.
const Magic = "O2K\x01"

// Build returns the blob for the library's o200k_base vocabulary:
//
//	Magic | n uint32 | offsets [n+1]uint32 | token bytes concatenated in rank order
//
// all little-endian. Token id == rank == index; o200k's ids are dense, which Build checks, so
// no id is stored. The library exposes its vocabulary only through Decode, so each id is decoded
// alone (Decode returns the raw bytes in the default error mode).
func Build() ([]byte, error) {
	c := codec.NewO200kBase()
	var toks []string
	for id := uint(0); ; id++ {
		s, err := c.Decode([]uint{id})
		if err != nil {
			break
		}
		toks = append(toks, s)
	}
	if len(toks) < 199_000 {
		return nil, fmt.Errorf("vocabblob: only %d tokens decode", len(toks))
	}
	// Check density: no id past the first gap may decode (the special tokens are not in the
	// vocabulary map and do not decode either).
	for id := uint(len(toks)); id < uint(len(toks))+1024; id++ {
		if _, err := c.Decode([]uint{id}); err == nil {
			return nil, fmt.Errorf("vocabblob: id %d decodes after a gap at %d", id, len(toks))
		}
	}
	size := 0
	for _, t := range toks {
		size += len(t)
	}
	out := make([]byte, 0, len(Magic)+4+4*(len(toks)+1)+size)
	out = append(out, Magic...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(toks)))
	off := uint32(0)
	for _, t := range toks {
		out = binary.LittleEndian.AppendUint32(out, off)
		off += uint32(len(t))
	}
	out = binary.LittleEndian.AppendUint32(out, off)
	for _, t := range toks {
		out = append(out, t...)
	}
	return out, nil
}
