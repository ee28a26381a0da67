package tokenize

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tiktoken-go/tokenizer"
)

// library is tiktoken-go's o200k_base, the reference the Encoder must agree with. Only tests
// build it.
var library = sync.OnceValue(func() tokenizer.Codec {
	c, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		panic(err)
	}
	return c
})

// sameAsLibrary reports how the Encoder's Count and Encode of s differ from the library's.
func sameAsLibrary(t testing.TB, name, s string) {
	t.Helper()
	wantIDs, wantToks, wantErr := library().Encode(s)
	gotIDs, gotToks, gotErr := Codec().Encode(s)
	if (wantErr != nil) != (gotErr != nil) {
		t.Fatalf("%s: Encode error %v, library %v", name, gotErr, wantErr)
	}
	if !slices.Equal(gotIDs, wantIDs) || !slices.Equal(gotToks, wantToks) {
		i := 0
		for i < min(len(gotIDs), len(wantIDs)) && gotIDs[i] == wantIDs[i] && gotToks[i] == wantToks[i] {
			i++
		}
		t.Fatalf("%s (%d bytes): Encode differs from the library at token %d of %d/%d: got %v, library %v",
			name, len(s), i, len(gotIDs), len(wantIDs), head(gotToks[i:]), head(wantToks[i:]))
	}
	n, err := Codec().Count(s)
	if m, _ := library().Count(s); err != nil || n != m {
		t.Fatalf("%s: Count = %d (%v), library %d", name, n, err, m)
	}
}

func head(s []string) []string { return s[:min(len(s), 4)] }

// TestMatchesLibraryOnFixtures compares on real request bodies (the shared Codex fixtures, whole
// and by JSON string) and on this repository's Go source.
func TestMatchesLibraryOnFixtures(t *testing.T) {
	var files []string
	if fx, _ := filepath.Glob("/work/shared/fixtures/*/*.json"); len(fx) > 0 {
		files = append(files, fx...)
	} else {
		t.Log("no /work/shared/fixtures; comparing on source files only")
	}
	src, _ := filepath.Glob("../*/*.go")
	if len(src) < 20 {
		t.Fatalf("only %d source files found", len(src))
	}
	files = append(files, src...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sameAsLibrary(t, f, string(b))
		var v any
		if strings.HasSuffix(f, ".json") && json.Unmarshal(b, &v) == nil {
			for i, s := range jsonStrings(v, nil) {
				sameAsLibrary(t, f+" string "+string(rune('0'+i%10)), s)
			}
		}
	}
}

func jsonStrings(v any, out []string) []string {
	switch v := v.(type) {
	case string:
		out = append(out, v)
	case []any:
		for _, e := range v {
			out = jsonStrings(e, out)
		}
	case map[string]any:
		for k, e := range v {
			out = jsonStrings(e, append(out, k))
		}
	}
	return out
}

// TestMatchesLibraryOnGeneratedText compares on text built to reach every branch: each split
// alternative, contractions, pieces long enough for the heap merge, CJK, emoji sequences,
// combining marks, long space and digit runs, CRLF, invalid UTF-8 and special-token text.
func TestMatchesLibraryOnGeneratedText(t *testing.T) {
	fixed := []string{
		"", " ", "  ", "\n", "\r\n\r\n", "a", "<|endoftext|>", "<|endofprompt|> hi <|endoftext|>",
		"Don't WE'LL they'RE I'm you'd it's SHE'S o'Neil",
		"func main() {\n\tfmt.Println(\"hi\")\n}\n",
		"日本語のテキストと中文文本，还有한국어 텍스트。",
		"👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 e\u0301 n\u0303 \u0301\u0301\u0301",
		strings.Repeat(" ", 5000) + "x", strings.Repeat("\t ", 700), strings.Repeat("1234567890", 300),
		strings.Repeat("ab", 500), strings.Repeat("z", 97), strings.Repeat("é", 80),
		"\xff", "a\xffb", "\xe2\x82", "\xc3(", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ok \xff\xfe words \x80",
		"\ufffd\xff", strings.Repeat("\xff", 300),
		"https://example.com/a/b?c=d&e=f#g //comment /* x */ <div class=\"y\">&amp;</div>",
		"x := []byte{0x00, 0xff}; // 3.14159e-10 1,000,000 12:30:45",
	}
	for i, s := range fixed {
		sameAsLibrary(t, "fixed "+string(rune('a'+i%26)), s)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 150 {
		sameAsLibrary(t, "generated", genText(r, 1+i*4))
	}
}

// genText returns about n fragments of mixed kinds of text.
func genText(r *rand.Rand, n int) string {
	words := []string{"the", "The", "THE", "compaction", "handoff", "Über", "naïve", "straße", "don't", "WE'VE",
		"func", "return", "err", "nil", "{", "}", "(", ")", ":=", "==", "!=", "//", "/*", "*/", "\"", "'",
		"日本", "語", "中文", "한국", "Привет", "مرحبا", "שלום", "नमस्ते", "ไทย", "🙂", "👍🏽", "👨‍💻", "∑", "→",
		"0", "42", "3.14", "1e9", "0xFF", "\t", "\n", "\r\n", "  ", "   ", "\u00a0", "\u200b", "\u3000"}
	var b strings.Builder
	for range n {
		switch k := r.IntN(20); {
		case k < 12:
			b.WriteString(words[r.IntN(len(words))])
			if r.IntN(3) > 0 {
				b.WriteByte(' ')
			}
		case k < 13:
			b.WriteString(strings.Repeat(" ", r.IntN(300)))
		case k < 14:
			for range r.IntN(40) {
				b.WriteByte(byte('0' + r.IntN(10)))
			}
		case k < 15:
			for range r.IntN(200) {
				b.WriteByte(byte('a' + r.IntN(26)))
			}
		case k < 16:
			for range r.IntN(8) {
				b.WriteByte(byte(r.IntN(256)))
			}
		case k < 17:
			for range r.IntN(30) {
				b.WriteRune(rune(0x4e00 + r.IntN(0x5000)))
			}
		case k < 18:
			for range r.IntN(10) {
				b.WriteRune(rune(0x1f300 + r.IntN(0x300)))
				if r.IntN(3) == 0 {
					b.WriteRune(0x200d)
				}
			}
		default:
			for range r.IntN(60) {
				b.WriteRune(rune(r.IntN(0x3000)))
			}
		}
	}
	return b.String()
}

// FuzzCountMatchesLibrary holds Count and Encode to the library's on arbitrary bytes.
func FuzzCountMatchesLibrary(f *testing.F) {
	for _, s := range []string{"", "hello world", "Don't WE'LL", "日本語 👍🏽", "\xff\xfe a", strings.Repeat(" ", 40) + "x",
		"12345678", "func f() {\n\treturn nil\n}\n", strings.Repeat("ab", 60), "<|endoftext|>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1<<16 {
			return
		}
		sameAsLibrary(t, "fuzz", s)
	})
}
