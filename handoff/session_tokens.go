package handoff

import (
	"strconv"
	"strings"
	"sync"

	"github.com/tiktoken-go/tokenizer"
)

// sessionCodec is o200k_base, the encoding of the models that read resume prompts. Building it
// parses a large vocabulary, so it is built once, on first use.
var sessionCodec = sync.OnceValues(func() (tokenizer.Codec, error) {
	return tokenizer.Get(tokenizer.O200kBase)
})

// CountTokens returns the o200k_base token count of s. If the codec cannot be built it falls back
// to the usual four-bytes-per-token estimate rather than failing a handover.
func CountTokens(s string) int {
	c, err := sessionCodec()
	if err == nil {
		if n, err := c.Count(s); err == nil {
			return n
		}
	}
	return (len(s) + 3) / 4
}

// truncateMiddle keeps the first and last budget/2 tokens of s and replaces the middle with a
// marker saying how much was cut. The head of a message states intent and the tail usually holds
// the question or the error, so the middle is the cheapest part to lose.
func truncateMiddle(s string, budget int) string {
	if budget <= 0 || len(s) <= budget { // a token is at least one byte
		return s
	}
	c, err := sessionCodec()
	if err != nil {
		return truncateMiddleBytes(s, budget*4)
	}
	_, toks, err := c.Encode(s)
	if err != nil {
		return truncateMiddleBytes(s, budget*4)
	}
	if len(toks) <= budget {
		return s
	}
	half := max(budget/2, 1)
	head := strings.ToValidUTF8(strings.Join(toks[:half], ""), "")
	tail := strings.ToValidUTF8(strings.Join(toks[len(toks)-half:], ""), "")
	return head + "\n[… " + strconv.Itoa(len(toks)-2*half) + " tokens omitted …]\n" + tail
}

func truncateMiddleBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	half := n / 2
	return strings.ToValidUTF8(s[:half], "") + "\n[… " + strconv.Itoa(len(s)-2*half) +
		" bytes omitted …]\n" + strings.ToValidUTF8(s[len(s)-half:], "")
}
