package tokenize

import (
	"bytes"
	"go/format"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/tokenize/internal/vocabblob"
)

// TestGeneratedMatchLibrary fails when a generated file differs from what the tiktoken-go in
// go.mod gives (run `go generate ./internal/tokenize/` after updating it), or when the split
// pattern compactd uses is no longer the library's.
func TestGeneratedMatchLibrary(t *testing.T) {
	want, err := vocabblob.Build()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal([]byte(blob), want) {
		t.Errorf("o200k.bin (%d bytes) differs from the library's vocabulary (%d bytes): run go generate", len(blob), len(want))
	}

	src, err := vocabblob.Regexp("tokenize")
	if err != nil {
		t.Fatal(err)
	}
	if src, err = format.Source(src); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile("split_gen.go"); err != nil || !bytes.Equal(got, src) {
		t.Errorf("split_gen.go differs from the library's compiled matcher (err %v): run go generate", err)
	}

	if splitPattern != vocabblob.Pattern {
		t.Error("splitPattern differs from vocabblob.Pattern")
	}
	dir, err := vocabblob.LibraryDir()
	if err != nil {
		t.Fatal(err)
	}
	lib, err := os.ReadFile(filepath.Join(dir, "codec", "o200k_base.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(lib), "`"+splitPattern+"`") {
		t.Error("the library's o200k_base.go no longer has compactd's split pattern")
	}
}

// TestTableIndexesEveryToken checks the index round-trips every rank and rejects near misses.
func TestTableIndexesEveryToken(t *testing.T) {
	tb := Codec().t
	n := len(tb.offs)/4 - 1
	if n != 199_998 {
		t.Fatalf("%d tokens, o200k_base has 199,998", n)
	}
	for r := range uint32(n) {
		tok := tb.token(r)
		if got, ok := tb.rank(tok); !ok || got != r {
			t.Fatalf("rank(token(%d) = %q) = %d, %v", r, tok, got, ok)
		}
	}
	for _, s := range []string{"", "\x00\x00\x00\x00zz", strings.Repeat("a", 200), "hello\xff"} {
		if r, ok := tb.rank(s); ok {
			t.Errorf("rank(%q) = %d, want no token", s, r)
		}
	}
}
