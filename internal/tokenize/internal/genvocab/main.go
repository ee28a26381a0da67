// Command genvocab writes the files internal/tokenize generates from tiktoken-go (run by go
// generate there; TestGeneratedMatchLibrary fails when a committed file is stale): o200k.bin, the
// vocabulary table it embeds, and split_gen.go, the compiled matcher of the split pattern.
package main

import (
	"flag"
	"go/format"
	"log"
	"os"

	"github.com/compactd/compactd/internal/tokenize/internal/vocabblob"
)

func main() {
	blob := flag.String("blob", "o200k.bin", "vocabulary table output")
	split := flag.String("split", "split_gen.go", "split matcher output")
	flag.Parse()
	b, err := vocabblob.Build()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*blob, b, 0o644); err != nil {
		log.Fatal(err)
	}
	src, err := vocabblob.Regexp("tokenize")
	if err != nil {
		log.Fatal(err)
	}
	if src, err = format.Source(src); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*split, src, 0o644); err != nil {
		log.Fatal(err)
	}
}
