package memo

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/compactd/compactd/internal/dialect"
)

// BenchmarkPrefixesClaudeCode hashes every prefix of the last captured Claude Code request
// (12 messages, ~50 KB with its system prompt and tools left out): the per-turn cost of asking
// the memo.
func BenchmarkPrefixesClaudeCode(b *testing.B) {
	files, _ := filepath.Glob(filepath.Join(claudeCaptureDir, "*.json"))
	body, err := os.ReadFile(files[len(files)-1])
	if err != nil {
		b.Fatal(err)
	}
	t := &testing.T{}
	its := items(t, body, "messages")
	n := 0
	for _, it := range its {
		n += len(it)
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Prefixes(dialect.Messages, its); err != nil {
			b.Fatal(err)
		}
	}
}
