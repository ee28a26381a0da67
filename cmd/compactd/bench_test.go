package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestBenchQuick runs `compactd bench --quick` (shortened further) and checks the output is the
// Markdown report: machine line and tables with consistent columns. It asserts no timings.
func TestBenchQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run")
	}
	var out, progress bytes.Buffer
	err := runBench([]string{"--quick", "--duration", "80ms", "--sizes", "2KB", "--rates", "100", "--warm-size", "64KB", "--streams", "4", "--stream-for", "50ms"}, &out, &progress)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, progress.String())
	}
	md := out.String()
	for _, want := range []string{"Machine: ", "go1", "| workload | target | req/s |", "### Budgets", "below-threshold turn, prefix seen before", "concurrent long streams"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	tables, cols := 0, 0
	for line := range strings.Lines(md) {
		if !strings.HasPrefix(line, "|") {
			cols = 0
			continue
		}
		if c := strings.Count(line, "|"); cols == 0 {
			tables, cols = tables+1, c
		} else if c != cols {
			t.Errorf("ragged row (%d pipes, header %d): %s", c, cols, line)
		}
	}
	if tables != 4 {
		t.Errorf("%d tables, want 4", tables)
	}
}

func TestParseSizes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"2KB,200KB,2MB", []int{2 << 10, 200 << 10, 2 << 20}, false},
		{" 512 , 1mb", []int{512, 1 << 20}, false},
		{"0", []int{0}, false},
		{"2GB", nil, true},
		{"-1KB", nil, true},
	} {
		got, err := parseSizes(tc.in)
		if (err != nil) != tc.wantErr || (!tc.wantErr && !slicesEqual(got, tc.want)) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v (err %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
	for _, sizes := range [][]int{{2 << 10, 200 << 10, 2 << 20}, {0}, {512, 1 << 20}, {1536}} {
		// The flag defaults are formatSizes of bench.Defaults(): they must read back the same.
		if got, err := parseSizes(formatSizes(sizes...)); err != nil || !slicesEqual(got, sizes) {
			t.Errorf("parseSizes(formatSizes(%v)) = %v, %v", sizes, got, err)
		}
	}
	if _, err := parseFloats("10,x"); err == nil {
		t.Error("parseFloats accepted x")
	}
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBenchSideBySideQuick runs `compactd bench side-by-side --quick` (shortened further) with the
// built binary, so that all three processes are spawned for real, and checks the report's shape:
// every row of the table, the peak-RSS rows with every request served or refused in
// dialect, and the verdicts. It asserts no timings.
func TestBenchSideBySideQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run")
	}
	var out, progress bytes.Buffer
	err := runBench([]string{"side-by-side", "--quick", "--duration", "40ms", "--rounds", "1", "--binary", builtBinary(t)}, &out, &progress)
	if err != nil {
		t.Fatalf("bench side-by-side: %v\n%s", err, progress.String())
	}
	md := out.String()
	for _, want := range []string{"Machine: ", "load average", "| path | conns | req/s direct |",
		"| Responses 2KB | 32 |", "| Responses 2KB | 1 |", "| Messages 2KB | 32 |", "| GET /v1/models | 32 |",
		"agent history | 4 |", "with a compaction item (handoff) | 1 |", "time to first byte | 1 |",
		"| compactd |", "| target | figure | met |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	for line := range strings.Lines(md) {
		// The peak-RSS rows: each request is served or refused in the route's dialect, none fails
		// otherwise (the last column).
		if strings.Contains(line, " × ") && (strings.Contains(line, "| compactd |") || strings.Contains(line, "| bare proxy |")) && !strings.HasSuffix(strings.TrimSpace(line), "| 0 |") {
			t.Errorf("a huge-body request neither served nor refused in dialect: %s", line)
		}
	}
}
