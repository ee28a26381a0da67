package tokenize

import (
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// splitPattern is o200k_base's pre-tokenisation pattern, tiktoken-go's (codec/o200k_base.go);
// split_gen.go registers its compiled matcher with regexp2 and TestGeneratedMatchLibrary checks
// both against the library. regexp2 stays at the version tiktoken-go requires (v2.5.1, its
// go.mod): its matchers are generated for that version, and on v2.13.0 this encoder and the
// library split invalid UTF-8 differently (the differential tests fail; seen 2026-12-03).
const splitPattern = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// Encoder is compactd's o200k_base BPE: tiktoken-go's algorithm and split pattern over the
// embedded, pointer-free vocabulary table. It gives the library's Count and Encode results (the
// differential tests hold it to that), including its treatment of text: no special tokens (an
// "<|endoftext|>" in the text is ordinary text) and each invalid UTF-8 byte read as U+FFFD, as
// the library's regexp2 match strings make it. It holds no per-call state; one serves all
// goroutines.
type Encoder struct {
	t     *table
	split *regexp2.Regexp
}

// Codec returns the shared Encoder, built on first use (indexing the embedded vocabulary takes a
// few milliseconds and 2 MiB of pointer-free heap).
var Codec = sync.OnceValue(func() *Encoder {
	return &Encoder{t: newTable(blob), split: regexp2.MustCompile(splitPattern, regexp2.None)}
})

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// Count returns the number of o200k_base tokens in s. It fails only if the split regexp fails
// (a match timeout; none is set, so in practice never), with the library's error text.
func (e *Encoder) Count(s string) (int, error) {
	n := 0
	err := e.tokens(s, func(uint32, string) { n++ })
	return n, err
}

// Encode returns the token ids of s and the text of each token. For valid UTF-8 the texts are
// substrings of s and add up to it.
func (e *Encoder) Encode(s string) ([]uint, []string, error) {
	var ids []uint
	var toks []string
	err := e.tokens(s, func(id uint32, tok string) {
		ids = append(ids, uint(id))
		toks = append(toks, tok)
	})
	return ids, toks, err
}

// tokens splits s with the pattern and yields the BPE tokens of each piece.
func (e *Encoder) tokens(s string, yield func(uint32, string)) error {
	if !utf8.ValidString(s) {
		// regexp2 reads s as runes, and the library tokenises the match strings made of them,
		// in which every invalid byte has become U+FFFD; converting first gives the same
		// pieces as substrings.
		s = string([]rune(s))
	}
	m, err := e.split.FindStringMatch(s)
	if err != nil {
		return fmt.Errorf("error matching: %v", err)
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	// Matches come in increasing rune order; walk a byte cursor along with them instead of
	// asking the match for byte ranges (which builds an int per byte of s for non-ASCII text).
	runeAt, byteAt := 0, 0
	for m != nil {
		for runeAt < m.RuneIndex {
			_, n := utf8.DecodeRuneInString(s[byteAt:])
			byteAt += n
			runeAt++
		}
		start := byteAt
		for runeAt < m.RuneIndex+m.RuneLength {
			_, n := utf8.DecodeRuneInString(s[byteAt:])
			byteAt += n
			runeAt++
		}
		piece := s[start:byteAt]
		if r, ok := e.t.rank(piece); ok {
			yield(r, piece)
		} else {
			b := e.t.merge(piece, sc)
			for i := range len(b) - 1 {
				tok := piece[b[i]:b[i+1]]
				r, _ := e.t.rank(tok)
				yield(r, tok)
			}
		}
		if m, err = e.split.FindNextMatch(m); err != nil {
			return fmt.Errorf("error matching: %v", err)
		}
	}
	return nil
}
