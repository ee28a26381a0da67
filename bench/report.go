package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Budgets of issue 9 that the end-to-end run can check.
const (
	BudgetAddedP50Ratio   = 1.25                 // compactd added p50 / bare proxy added p50, at most
	BudgetThroughputRatio = 0.8                  // compactd throughput / bare proxy throughput, at least
	BudgetAddedTTFB       = time.Millisecond     // compactd added TTFB p50, under
	BudgetWarmAddedP50    = 3 * time.Millisecond // warm 2 MB turn added p50, at most
	BudgetWarmAllocBodies = 2.0                  // warm 2 MB turn allocation per request, in body sizes
)

// Markdown writes the report as tables ready to paste into BENCHMARKS.md.
func (r *Report) Markdown(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "Machine: %d CPUs (GOMAXPROCS %d), %s, %s %s/%s; 1-min load average %.1f at start, %.1f at end.\n",
		m.NumCPU, m.GOMAXPROCS, m.CPUModel, m.GoVersion, m.OS, m.Arch, m.LoadStart, m.LoadEnd)
	rates := make([]string, len(r.Options.Rates))
	for i, v := range r.Options.Rates {
		rates[i] = fmt.Sprintf("%g", v)
	}
	sizes := make([]string, len(r.Options.Sizes))
	for i, v := range r.Options.Sizes {
		sizes[i] = sizeName(v)
	}
	fmt.Fprintf(w, "Run: %v per cell, closed loop c=%d, open loop at %s req/s, bodies %s.\n\n",
		r.Options.Duration, r.Options.Concurrency, strings.Join(rates, ", "), strings.Join(sizes, ", "))

	fmt.Fprintln(w, "### Latency, throughput, CPU and memory, relative to going direct")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| workload | target | req/s | p50 | p99 | added p50 | added p99 | added TTFB p50 | throughput vs direct | CPU/req | added CPU/req | peak RSS | errors/missed |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var direct Cell
	for _, c := range r.Cells {
		if c.Target == Direct {
			direct = c
		}
		ttfb := "—"
		if c.Workload.Stream {
			ttfb = fmtDelta(c.TTFB50 - direct.TTFB50)
		}
		fmt.Fprintf(w, "| %s | %s | %.1f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d/%d |\n",
			c.Workload, c.Target, c.Throughput, fmtDur(c.P50), fmtDur(c.P99),
			fmtDelta(c.P50-direct.P50), fmtDelta(c.P99-direct.P99), ttfb,
			ratio(c.Throughput, direct.Throughput), fmtDur(c.CPUPerReq), fmtDelta(c.CPUPerReq-direct.CPUPerReq),
			fmtBytes(c.PeakRSS), c.Errors, c.Missed)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "\nSkipped %s.", s)
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintln(w)
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "### Budgets: compactd against the bare reverse proxy")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| workload | target | added p50: compactd / bare (≤ %.2f) | throughput: compactd / bare (≥ %.1f) | added TTFB p50 (< %v) | met |\n",
		BudgetAddedP50Ratio, BudgetThroughputRatio, BudgetAddedTTFB)
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---|")
	for _, b := range r.Budgets() {
		ttfb := "—"
		if b.Workload.Stream {
			ttfb = fmtDelta(b.AddedTTFB)
		}
		r := "n/a"
		if b.BareAddedP50 > 0 {
			r = ratioF(b.P50Ratio)
		}
		fmt.Fprintf(w, "| %s | %s | %s (%s / %s) | %.2f | %s | %s |\n", b.Workload, b.Target,
			r, fmtDelta(b.AddedP50), fmtDelta(b.BareAddedP50), b.ThroughputRatio, ttfb, b.Met)
	}

	if len(r.Warm) == 2 {
		d, c := r.Warm[0], r.Warm[1]
		body := float64(r.Options.WarmSize)
		alloc := c.AllocPerReq - d.AllocPerReq
		fmt.Fprintln(w)
		fmt.Fprintf(w, "### %s below-threshold turn, prefix seen before (one new tool call and output per request, c=1)\n\n", sizeName(r.Options.WarmSize))
		fmt.Fprintf(w, "| requests | direct p50 | compactd p50 | added p50 (≤ %v) | added CPU/req | allocated/req (compactd − direct) | in body sizes (≤ %.0f) | met |\n", BudgetWarmAddedP50, BudgetWarmAllocBodies)
		fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---|")
		met := c.Errors == 0 && c.P50-d.P50 <= BudgetWarmAddedP50 && alloc/body <= BudgetWarmAllocBodies
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %.2f | %s |\n", c.Requests, fmtDur(d.P50), fmtDur(c.P50),
			fmtDelta(c.P50-d.P50), fmtDelta(c.CPUPerReq-d.CPUPerReq), fmtBytes(int64(alloc)), alloc/body, yesNo(met))
	}

	if len(r.Streams) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "### %d concurrent long streams (%v each)\n\n", r.Options.Streams, r.Options.StreamFor)
		fmt.Fprintln(w, "| target | RSS start | RSS all open | RSS at 9/10 | RSS peak | RSS end | peak − start per stream | 9/10 − all open | errors | ramp | wall |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, s := range r.Streams {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %d | %s | %s |\n", s.Target,
				fmtBytes(s.RSSStart), fmtBytes(s.RSSEarly), fmtBytes(s.RSSLate), fmtBytes(s.RSSPeak), fmtBytes(s.RSSEnd),
				fmtBytes((s.RSSPeak-s.RSSStart)/int64(max(s.Streams, 1))), fmtSignedBytes(s.RSSLate-s.RSSEarly), s.Errors, fmtDur(s.Ramp), fmtDur(s.Elapsed))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "All parts run in one process on loopback. CPU/req is process CPU (getrusage) over the cell / requests; "+
		"\"added\" subtracts the direct cell, leaving the proxy's share. Open-loop latency counts from each request's scheduled send time.")
}

// Budget is one workload's check of compactd against the bare proxy.
type Budget struct {
	Workload                          Workload
	Target                            string
	AddedP50, BareAddedP50, AddedTTFB time.Duration
	P50Ratio, ThroughputRatio         float64
	// Met is "yes", "no", or "n/a" when the bare proxy's added p50 was not positive (within the
	// noise of going direct), which leaves the latency ratio undefined.
	Met string
}

// Budgets compares each compactd cell with the bare-proxy cell of the same workload.
func (r *Report) Budgets() []Budget {
	var out []Budget
	var direct, bare Cell
	for _, c := range r.Cells {
		switch c.Target {
		case Direct:
			direct = c
			continue
		case Bare:
			bare = c
			continue
		}
		b := Budget{Workload: c.Workload, Target: c.Target,
			AddedP50: c.P50 - direct.P50, BareAddedP50: bare.P50 - direct.P50}
		b.P50Ratio = float64(b.AddedP50) / float64(max(b.BareAddedP50, time.Microsecond))
		if bare.Throughput > 0 {
			b.ThroughputRatio = c.Throughput / bare.Throughput
		}
		met := c.Errors == 0 && b.P50Ratio <= BudgetAddedP50Ratio && b.ThroughputRatio >= BudgetThroughputRatio
		if c.Workload.Stream {
			b.AddedTTFB = c.TTFB50 - direct.TTFB50
			met = met && b.AddedTTFB < BudgetAddedTTFB
		}
		switch {
		case b.BareAddedP50 <= 0:
			b.Met = "n/a"
		case met:
			b.Met = "yes"
		default:
			b.Met = "**no**"
		}
		out = append(out, b)
	}
	return out
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

func ratio(a, b float64) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func ratioF(v float64) string { return fmt.Sprintf("%.2f", v) }

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0fµs", float64(d)/1e3)
}

func fmtDelta(d time.Duration) string {
	if d < 0 {
		return "−" + fmtDur(-d)
	}
	return "+" + fmtDur(d)
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<20 || n <= -(1<<20):
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10 || n <= -(1<<10):
		return fmt.Sprintf("%.1f KB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func fmtSignedBytes(n int64) string {
	if n >= 0 {
		return "+" + fmtBytes(n)
	}
	return "−" + fmtBytes(-n)
}
