package archive

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// Benchmarks run against SQLite populated with synthetic segments: 12 items each, words drawn
// from a Zipf distribution over a 20k vocabulary with identifiers and paths mixed in, so the
// index has realistic skew (a few very common words, a long tail).

var (
	benchOnce  sync.Mutex
	benchDir   string
	benchFiles = map[int]string{}
)

// TestMain checks that no test leaves a goroutine behind (database/sql's connection opener ends
// with Store.Close, RunRetention with its context) and removes the benchmarks' databases.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if benchDir != "" {
			os.RemoveAll(benchDir)
		}
		os.Exit(code)
	}))
}

type segGen struct {
	r     *rand.Rand
	zipf  *rand.Zipf
	vocab []string
}

func newSegGen(seed uint64) *segGen {
	r := rand.New(rand.NewPCG(seed, 1))
	g := &segGen{r: r, zipf: rand.NewZipf(r, 1.1, 2, 19_999)}
	for i := range 20_000 {
		switch i % 10 {
		case 7:
			g.vocab = append(g.vocab, fmt.Sprintf("handle%dRequest", i))
		case 8:
			g.vocab = append(g.vocab, fmt.Sprintf("pkg/mod%d/file.go", i))
		default:
			g.vocab = append(g.vocab, fmt.Sprintf("w%d", i))
		}
	}
	return g
}

func (g *segGen) text(words int) string {
	var b strings.Builder
	for i := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(g.vocab[g.zipf.Uint64()])
	}
	return b.String()
}

func (g *segGen) segment(i int) Segment {
	items := make([]json.RawMessage, 12)
	for j := range items {
		role := "user"
		if j%2 == 1 {
			role = "assistant"
		}
		items[j] = msg(role, g.text(40+g.r.IntN(80)))
	}
	return Segment{Conversation: fmt.Sprintf("conv-%d", i%200), Items: items}
}

// benchStore returns a store over a private copy of a database holding n segments; each size is
// populated once per test binary run.
func benchStore(b *testing.B, n int) Store {
	b.Helper()
	ctx := context.Background()
	benchOnce.Lock()
	src, ok := benchFiles[n]
	if !ok {
		if benchDir == "" {
			d, err := os.MkdirTemp("", "archive-bench-")
			if err != nil {
				b.Fatal(err)
			}
			benchDir = d
		}
		src = filepath.Join(benchDir, fmt.Sprintf("n%d.db", n))
		st, err := Open(ctx, src, newTestSealer())
		if err != nil {
			b.Fatal(err)
		}
		g := newSegGen(42)
		for i := range n {
			if _, err := st.Put(ctx, g.segment(i)); err != nil {
				b.Fatal(err)
			}
		}
		st.Close() // checkpoints the WAL into the main file
		benchFiles[n] = src
	}
	benchOnce.Unlock()
	dst := filepath.Join(b.TempDir(), "archive.db")
	copyFile(b, src, dst)
	st, err := Open(ctx, dst, newTestSealer())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

func copyFile(b *testing.B, src, dst string) {
	in, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkPut(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("segments=%d", n), func(b *testing.B) {
			st := benchStore(b, n)
			g := newSegGen(7)
			segs := make([]Segment, 64)
			bytes := 0
			for i := range segs {
				segs[i] = g.segment(i)
				for _, it := range segs[i].Items {
					bytes += len(it)
				}
			}
			b.SetBytes(int64(bytes / len(segs)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := st.Put(context.Background(), segs[i%len(segs)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkSearch(b *testing.B) {
	queries := []struct{ name, text string }{
		{"rare", "w19991"},  // in a handful of segments
		{"common", "w2 w3"}, // in nearly every segment
		{"identifier", "handle17Request"},
		{"mixed-or", "w5 nosuchword"}, // AND finds nothing, falls back to OR
	}
	for _, n := range []int{1_000, 10_000} {
		for _, q := range queries {
			b.Run(fmt.Sprintf("segments=%d/%s", n, q.name), func(b *testing.B) {
				st := benchStore(b, n)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := st.Search(context.Background(), Query{Text: q.text}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkDocument(b *testing.B) {
	ix := newBlindIndex(testKey)
	seg := newSegGen(1).segment(0)
	n := 0
	for _, it := range seg.Items {
		n += len(it)
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		ix.document("default", seg.Items)
	}
}
