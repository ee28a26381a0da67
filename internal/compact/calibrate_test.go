package compact

import (
	"encoding/json"
	"fmt"
	"go/build"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// calibrationCorpus is realistic agent traffic found in every Go installation: English prose
// (design docs), source code (Go, JavaScript, Python) and JSON tool output (go test -json
// streams, configs, lock files), each cut into ~4 KiB chunks at line boundaries.
var calibrationCorpus = map[string][]string{
	"prose": {
		"doc/godebug.md",
		"src/runtime/HACKING.md",
		"src/cmd/compile/README.md",
		"src/cmd/compile/abi-internal.md",
		"src/cmd/compile/internal/ssa/README.md",
	},
	"code": {
		"src/net/http/server.go",
		"src/go/parser/parser.go",
		"src/encoding/json/decode.go",
		"src/cmd/vendor/github.com/google/pprof/internal/driver/html/common.js",
		"src/runtime/runtime-gdb.py",
	},
	"json": {
		"src/cmd/internal/test2json/testdata/framebig.json",
		"src/crypto/tls/bogo_config.json",
		"src/cmd/vendor/golang.org/x/telemetry/package-lock.json",
		"src/crypto/hpke/testdata/rfc9180.json",
	},
}

type chunk struct {
	class string
	text  string
}

func loadCorpus(t testing.TB) []chunk {
	t.Helper()
	root := build.Default.GOROOT // the toolchain running the test
	var out []chunk
	for class, files := range calibrationCorpus {
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(root, f))
			if err != nil {
				continue
			}
			s := string(b)
			for len(s) > 0 {
				n := min(4096, len(s))
				if i := strings.LastIndexByte(s[:n], '\n'); i > 1024 && n < len(s) {
					n = i + 1
				}
				out = append(out, chunk{class, s[:n]})
				s = s[n:]
			}
		}
	}
	if len(out) < 100 {
		t.Skipf("calibration corpus not found under GOROOT %s", root)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].class != out[j].class {
			return out[i].class < out[j].class
		}
		return out[i].text < out[j].text
	})
	return out
}

func outputItem(text string) []byte {
	b, _ := json.Marshal(map[string]string{"type": "function_call_output", "call_id": "call_1", "output": text})
	return b
}

// TestEstimateCalibration measures Estimate against the exact count on the corpus and holds it to
// the documented bounds. With COMPACT_CALIBRATE=1 it refits estimateWeights and prints them.
func TestEstimateCalibration(t *testing.T) {
	chunks := loadCorpus(t)
	if os.Getenv("COMPACT_CALIBRATE") != "" {
		fitWeights(t, chunks)
	}
	c := NewCounter(CounterOptions{})
	type agg struct {
		est, exact int
		errs       []float64
	}
	byClass := map[string]*agg{}
	for _, ch := range chunks {
		raw := outputItem(ch.text)
		e, x := c.Estimate(raw), c.Item(raw)
		a := byClass[ch.class]
		if a == nil {
			a = &agg{}
			byClass[ch.class] = a
		}
		a.est += e
		a.exact += x
		a.errs = append(a.errs, math.Abs(float64(e-x))/float64(x))
	}
	for class, a := range byClass {
		sort.Float64s(a.errs)
		total := float64(a.est-a.exact) / float64(a.exact)
		p95 := a.errs[len(a.errs)*95/100]
		t.Logf("%-5s chunks=%4d exact=%7d total error %+.1f%%  per-chunk median %.1f%% p95 %.1f%% max %.1f%%",
			class, len(a.errs), a.exact, 100*total, 100*a.errs[len(a.errs)/2], 100*p95, 100*a.errs[len(a.errs)-1])
		if math.Abs(total) > 0.06 {
			t.Errorf("%s: total estimate error %.1f%% exceeds the documented 6%%", class, 100*total)
		}
		if p95 > 0.22 {
			t.Errorf("%s: p95 per-chunk error %.1f%% exceeds the documented 22%%", class, 100*p95)
		}
	}
}

// fitWeights solves the least-squares problem minimising the relative error (rows scaled by
// 1/exact) and prints the weights to paste into estimateWeights.
func fitWeights(t *testing.T, chunks []chunk) {
	var ata [numFeatures][numFeatures]float64
	var atb [numFeatures]float64
	for _, ch := range chunks {
		lit, _ := json.Marshal(ch.text)
		var sc scanner
		sc.scanLiteral(string(lit))
		y := float64(bpeCount(ch.text))
		if y == 0 {
			continue
		}
		w := 1 / y
		for i := range numFeatures {
			for j := range numFeatures {
				ata[i][j] += w * w * float64(sc.f[i]) * float64(sc.f[j])
			}
			atb[i] += w * w * float64(sc.f[i]) * y
		}
	}
	for i := range numFeatures {
		ata[i][i] += 1e-9 // features absent from the corpus stay solvable
	}
	// non-negative least squares by elimination: a feature whose fitted cost comes out negative
	// is a proxy for some other feature's error, not a token cost; drop it and refit.
	var x [numFeatures]float64
	for dropped := [numFeatures]bool{}; ; {
		a, b := ata, atb
		for i := range numFeatures {
			if dropped[i] {
				for j := range numFeatures {
					a[i][j], a[j][i] = 0, 0
				}
				a[i][i], b[i] = 1, 0
			}
		}
		x = solve(a, b)
		neg := -1
		for i, v := range x {
			if v < 0 && (neg < 0 || v < x[neg]) {
				neg = i
			}
		}
		if neg < 0 {
			break
		}
		dropped[neg] = true
	}
	var b strings.Builder
	for i, v := range x {
		fmt.Fprintf(&b, "feature %d: %.4f\n", i, v)
	}
	t.Logf("fitted weights:\n%s", b.String())
}

func solve(a [numFeatures][numFeatures]float64, b [numFeatures]float64) [numFeatures]float64 {
	n := numFeatures
	for col := range n {
		piv := col
		for r := col + 1; r < n; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[piv][col]) {
				piv = r
			}
		}
		a[col], a[piv] = a[piv], a[col]
		b[col], b[piv] = b[piv], b[col]
		for r := range n {
			if r == col || a[col][col] == 0 {
				continue
			}
			f := a[r][col] / a[col][col]
			for k := col; k < n; k++ {
				a[r][k] -= f * a[col][k]
			}
			b[r] -= f * b[col]
		}
	}
	var x [numFeatures]float64
	for i := range n {
		if a[i][i] != 0 {
			x[i] = b[i] / a[i][i]
		}
	}
	return x
}
