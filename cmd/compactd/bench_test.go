package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
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
// built binary, so that every process is spawned for real, and checks the report's shape: every
// row of the table (the recall row too, with its check), the peak-RSS rows with every
// request served or refused in dialect, and the verdicts. It runs without nginx (a --nginx that
// does not exist: the column says "not run" and nothing fails) and, where one is installed, with
// nginx from PATH. It asserts no timings.
func TestBenchSideBySideQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run")
	}
	_, lookErr := exec.LookPath("nginx")
	for _, tc := range []struct {
		name        string
		nginx       []string // the --nginx flag, if any
		needsNginx  bool
		want, avoid []string
	}{
		{"nginx absent, with the store-and-forward reference", []string{"--nginx", filepath.Join(t.TempDir(), "no-such-nginx"), "--store-forward"}, false,
			[]string{"nginx: not run: ", "| not run |", "(stretch): CPU/req ≤ 2× nginx's | nginx not run | not run |",
				"| path | conns | CPU/req bare | CPU/req store-and-forward | store-and-forward / bare |"}, nil},
		{"nginx in PATH", nil, true,
			[]string{"nginx: nginx/", "master_process on, worker_processes auto", "× nginx's CPU/req ("}, []string{"not run", "store-and-forward"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needsNginx && lookErr != nil {
				t.Skip("no nginx in PATH")
			}
			var out, progress bytes.Buffer
			args := append([]string{"side-by-side", "--quick", "--duration", "40ms", "--rounds", "1", "--binary", builtBinary(t)}, tc.nginx...)
			if err := runBench(args, &out, &progress); err != nil {
				t.Fatalf("bench side-by-side: %v\n%s", err, progress.String())
			}
			md := out.String()
			for _, want := range append([]string{"Machine: ", "load average (1, 5, 15 min", " at start, ", "| path | conns | req/s direct |",
				"| Responses 2KB | 32 |", "| Responses 2KB | 1 |", "| Messages 2KB | 32 |", "| GET /v1/models | 32 |",
				"agent history | 4 |", "with a compaction item (handoff) | 1 |", "handoff + recall tool | 1 |", "time to first byte | 1 |",
				`Recall row, checked before measuring: the upstream got the handoff and the "compactd_recall" tool, no compaction item`,
				"| compactd / nginx CPU |", "| compactd |", "| target | figure | met |",
				"| growing 128KB Responses conversations | 1 |", "| growing 128KB Responses conversations | 4 |",
				"| growing 128KB Messages conversations | 1 |", "| growing 128KB Chat conversations | 1 |",
				"| growing 128KB Responses conversations after a compaction (handoff) | 1 |",
				"| growing 128KB Responses conversations, SSE time to first byte | 1 |", "CPU/req ≤ 1.25× bare"}, tc.want...) {
				if !strings.Contains(md, want) {
					t.Errorf("report lacks %q:\n%s", want, md)
				}
			}
			for _, avoid := range tc.avoid {
				if strings.Contains(md, avoid) {
					t.Errorf("report has %q:\n%s", avoid, md)
				}
			}
			// A peak-RSS row of compactd for every route it parses, each under its budget plus
			// 100 MiB (8 bodies of 1 MiB against a 4 MiB budget).
			for _, route := range []string{"/v1/responses", "/v1/responses/compact", "/v1/messages", "/v1/messages/count_tokens", "/v1/chat/completions"} {
				if !strings.Contains(md, " | "+route+" | compactd | ") {
					t.Errorf("no peak-RSS row for %s:\n%s", route, md)
				}
				if !strings.Contains(md, " on "+route+": peak RSS ≤ budget + 100 MiB") {
					t.Errorf("no peak-RSS verdict for %s", route)
				}
			}
			sfRows, latencyRows := 0, 0
			for line := range strings.Lines(md) {
				if strings.Contains(line, ": peak RSS ≤ budget + 100 MiB") && !strings.HasSuffix(strings.TrimSpace(line), "| yes |") {
					t.Errorf("a peak-RSS row over its bound: %s", line)
				}
				// The peak-RSS rows: each request is served or refused in the route's dialect, none
				// fails otherwise (the last column).
				if strings.Contains(line, " × ") && (strings.Contains(line, "| compactd |") || strings.Contains(line, "| bare proxy |")) && !strings.HasSuffix(strings.TrimSpace(line), "| 0 |") {
					t.Errorf("a huge-body request neither served nor refused in dialect: %s", line)
				}
				// The recall row: no request failed on any target (it would mean compactd forwarded
				// the item, or the recall round broke).
				if strings.Contains(line, "handoff + recall tool | 1 |") && strings.Count(line, "|") > 12 && !strings.Contains(line, "| 0/0/0/0 |") && !strings.Contains(line, "| 0/0/not run/0 |") {
					t.Errorf("errors on the recall row: %s", line)
				}
				// The growing rows: every target answered every request (a refusal would mean a
				// conversation the real API refuses, or compactd forwarding a compaction item on
				// the handoff row).
				if strings.HasPrefix(line, "| growing ") && strings.Count(line, "|") > 12 && !strings.Contains(line, " conn: ") && !strings.Contains(line, "| 0/0/0/0 |") && !strings.Contains(line, "| 0/0/not run/0 |") {
					t.Errorf("errors on a growing row: %s", line)
				}
				if strings.Count(line, "|") == 22 && !strings.HasPrefix(line, "| path ") && !strings.HasPrefix(line, "|---") {
					latencyRows++
				}
				// The store-and-forward table (the only one whose rows have 9 cells): every request
				// answered (its last cell).
				if strings.Count(line, "|") == 10 && !strings.HasPrefix(line, "| path ") && !strings.HasPrefix(line, "|---") {
					sfRows++
					if !strings.HasSuffix(strings.TrimSpace(line), "| 0 |") {
						t.Errorf("errors on the store-and-forward reference: %s", line)
					}
				}
			}
			// Every latency row has its store-and-forward row when the reference ran, none otherwise.
			if wantSF := slices.Contains(tc.nginx, "--store-forward"); (wantSF && (sfRows != latencyRows || sfRows == 0)) || (!wantSF && sfRows > 0) {
				t.Errorf("%d store-and-forward rows for %d latency rows (reference asked for: %v)", sfRows, latencyRows, wantSF)
			}
		})
	}
}
