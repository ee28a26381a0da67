package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	for _, tc := range []struct {
		samples []time.Duration
		q       float64
		want    time.Duration
	}{
		{nil, 0.5, 0},
		{[]time.Duration{7}, 0.99, 7},
		{[]time.Duration{5, 1, 4, 2, 3}, 0.5, 3},
		{[]time.Duration{5, 1, 4, 2, 3}, 0, 1},
		{[]time.Duration{5, 1, 4, 2, 3}, 1, 5},
		{[]time.Duration{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 0.9, 9},
		{[]time.Duration{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 0.99, 10},
	} {
		var l Latencies
		for _, s := range tc.samples {
			l.add(s)
		}
		if got := l.Quantile(tc.q); got != tc.want {
			t.Errorf("Quantile(%v) of %v = %v, want %v", tc.q, tc.samples, got, tc.want)
		}
	}
}

func TestBudgets(t *testing.T) {
	w := Workload{Size: 2 << 10, Stream: true, Conc: 8}
	ms := time.Millisecond
	rep := &Report{Cells: []Cell{
		{Workload: w, Target: Direct, P50: 10 * ms, TTFB50: 5 * ms, Throughput: 100},
		{Workload: w, Target: Bare, P50: 11 * ms, TTFB50: 5 * ms, Throughput: 90},
		{Workload: w, Target: PassThrough, P50: 11*ms + 200*time.Microsecond, TTFB50: 5*ms + 500*time.Microsecond, Throughput: 85},
		{Workload: w, Target: BelowThresh, P50: 13 * ms, TTFB50: 5 * ms, Throughput: 85},
	}}
	got := rep.Budgets()
	if len(got) != 2 {
		t.Fatalf("%d budgets, want 2", len(got))
	}
	if got[0].Met != "yes" || got[0].P50Ratio < 1.19 || got[0].P50Ratio > 1.21 || got[0].AddedTTFB != 500*time.Microsecond {
		t.Errorf("pass-through: %+v", got[0])
	}
	if got[1].Met == "yes" || got[1].P50Ratio < 2.9 {
		t.Errorf("below-threshold at 3x the bare proxy's added latency passed: %+v", got[1])
	}
	rep.Cells[1].P50 = 9 * ms // the bare proxy "faster" than direct: noise, no ratio
	if b := rep.Budgets(); b[0].Met != "n/a" {
		t.Errorf("negative bare added p50 gave %q", b[0].Met)
	}
}

// TestRunQuick runs a very small end-to-end run and checks that every mode produced results and
// the Markdown has its tables with consistent column counts. No timing is asserted.
func TestRunQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run")
	}
	o := Quick()
	o.Duration, o.Sizes, o.Rates, o.WarmSize, o.Streams, o.StreamFor = 80*time.Millisecond, []int{2 << 10}, []float64{100}, 64<<10, 5, 50*time.Millisecond
	rep, err := Run(t.Context(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (2*2 - len(rep.Skipped)) * len(Targets); len(rep.Cells) != want { // json+sse, closed+open
		t.Fatalf("%d cells, want %d (skipped: %v)", len(rep.Cells), want, rep.Skipped)
	}
	for _, c := range append(rep.Cells, rep.Warm...) {
		if c.Requests == 0 || c.Errors != 0 {
			t.Errorf("%s %s: %d requests, %d errors", c.Workload, c.Target, c.Requests, c.Errors)
		}
		// Not a timing assertion: an open loop completes at most what it schedules, and its elapsed
		// time is at least the schedule, so its throughput cannot exceed the rate (plus one
		// request's rounding per round).
		if c.Workload.Open {
			if limit := c.Workload.Rate + float64(rounds)/o.Duration.Seconds(); c.Throughput > limit {
				t.Errorf("%s %s: open loop reports %.0f req/s at a %.0f req/s schedule", c.Workload, c.Target, c.Throughput, c.Workload.Rate)
			}
		}
	}
	if len(rep.Warm) != 2 || len(rep.Streams) != 2 {
		t.Fatalf("warm %d, streams %d", len(rep.Warm), len(rep.Streams))
	}
	for _, s := range rep.Streams {
		if s.Errors != 0 || s.RSSPeak == 0 {
			t.Errorf("streams %s: %+v", s.Target, s)
		}
	}
	var buf bytes.Buffer
	rep.Markdown(&buf)
	CheckTables(t, buf.String(), 4)
}

// CheckTables checks that md holds at least n Markdown tables whose rows all have the header's
// column count.
func CheckTables(t testing.TB, md string, n int) {
	t.Helper()
	tables, cols := 0, 0
	for line := range strings.Lines(md) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			cols = 0
			continue
		}
		c := strings.Count(line, "|")
		if cols == 0 {
			tables++
			cols = c
		} else if c != cols {
			t.Errorf("row has %d pipes, header %d: %s", c, cols, line)
		}
	}
	if tables < n {
		t.Errorf("%d tables, want %d:\n%s", tables, n, md)
	}
}
