package tokenize

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// benchText is ~1 MB of mixed code, prose and JSON-ish text, the same for both tokenizers.
var benchText = func() string {
	var b strings.Builder
	r := rand.New(rand.NewPCG(7, 7))
	for b.Len() < 1<<20 {
		b.WriteString(genText(r, 200))
		b.WriteString("\nfunc (c *Counter) Text(s string) int {\n\tif len(s) < textCacheMin {\n\t\treturn c.bpe(s)\n\t}\n}\n")
		b.WriteString("The quick brown fox jumps over the lazy dog, and the summary keeps the latest ask. ")
	}
	return b.String()
}()

// BenchmarkCount: Count throughput, tiktoken-go's map vs the embedded table, on the same text.
func BenchmarkCount(b *testing.B) {
	for _, tc := range []struct {
		name  string
		count func(string) (int, error)
	}{
		{"library", func(s string) (int, error) { return library().Count(s) }},
		{"table", func(s string) (int, error) { return Codec().Count(s) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tc.count("warm up")
			b.SetBytes(int64(len(benchText)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tc.count(benchText); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// heapReport is what a child process measured after building one vocabulary.
type heapReport struct {
	HeapAlloc, HeapInuse uint64
	GCNanos              int64 // mean wall time of one forced runtime.GC()
}

// childEnv selects TestHeapChild's vocabulary ("library" or "table") in a child process.
const childEnv = "TOKENIZE_HEAP_CHILD"

// TestHeapChild is the child of BenchmarkHeapAfterInit: only with childEnv set does it build one
// vocabulary, force collections and print what it measured; otherwise it does nothing.
func TestHeapChild(t *testing.T) {
	which := os.Getenv(childEnv)
	if which == "" {
		t.Skip("runs only as BenchmarkHeapAfterInit's child")
	}
	switch which {
	case "library":
		library().Count("x")
	case "table":
		Codec().Count("x")
	}
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	const n = 50
	start := time.Now()
	for range n {
		runtime.GC()
	}
	rep := heapReport{HeapAlloc: ms.HeapAlloc, HeapInuse: ms.HeapInuse, GCNanos: time.Since(start).Nanoseconds() / n}
	out, _ := json.Marshal(rep)
	fmt.Printf("HEAPREPORT %s\n", out)
}

// BenchmarkHeapAfterInit runs a fresh test process per vocabulary (the library's map, once built,
// stays live for the life of a process) and reports its heap after init and the time of a forced
// GC with that vocabulary live. "none" is the baseline: the test binary with neither built.
func BenchmarkHeapAfterInit(b *testing.B) {
	for _, which := range []string{"none", "library", "table"} {
		b.Run(which, func(b *testing.B) {
			var rep heapReport
			for b.Loop() {
				cmd := exec.Command(os.Args[0], "-test.run=^TestHeapChild$", "-test.count=1")
				cmd.Env = append(os.Environ(), childEnv+"="+which)
				out, err := cmd.CombinedOutput()
				if err != nil {
					b.Fatalf("%v: %s", err, out)
				}
				_, js, ok := strings.Cut(string(out), "HEAPREPORT ")
				js, _, _ = strings.Cut(js, "\n")
				if !ok || json.Unmarshal([]byte(js), &rep) != nil {
					b.Fatalf("no report in %s", out)
				}
			}
			b.ReportMetric(float64(rep.HeapAlloc)/(1<<20), "HeapAlloc-MiB")
			b.ReportMetric(float64(rep.HeapInuse)/(1<<20), "HeapInuse-MiB")
			b.ReportMetric(float64(rep.GCNanos)/1e3, "GC-µs")
			b.ReportMetric(0, "ns/op")
		})
	}
}
