package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Targets of issue 18 that the side-by-side run checks.
const (
	TargetSmallRPSRatio  = 1.0 // 2 KB and GET: compactd req/s / bare, at least
	TargetSmallCPURatio  = 1.0 // 2 KB and GET: compactd CPU per request / bare, at most
	TargetLargeAddedP50  = 3 * time.Millisecond
	TargetLargeCPURatio  = 1.5       // 2 MB: compactd CPU per request / bare, at most
	TargetHugeRSSHeadway = 100 << 20 // peak RSS over the budget, at most
)

// Markdown writes the side-by-side report as tables for BENCHMARKS.md.
func (r *SideReport) Markdown(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "Machine: %d CPUs (GOMAXPROCS %d), %s, %s %s/%s; 1-min load average %.1f at start, %.1f at end.\n",
		m.NumCPU, m.GOMAXPROCS, m.CPUModel, m.GoVersion, m.OS, m.Arch, m.LoadStart, m.LoadEnd)
	fmt.Fprintf(w, "Run: three processes (fake upstream, bare proxy, compactd serve with metrics and access log on), load from a fourth; %d interleaved rounds of %v per target and row, medians; CPU per request from /proc/PID/stat of the proxy process; in-flight body budget %s.\n\n",
		r.Options.Rounds, r.Options.Duration, fmtBytes(r.Options.InflightBudget))
	fmt.Fprintln(w, "| path | conns | req/s direct | req/s bare | req/s compactd | compactd / bare | p50 direct | added p50 bare | added p50 compactd | p99 bare | p99 compactd | CPU/req bare | CPU/req compactd | compactd / bare | errors |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, row := range r.Rows {
		d, b, c := row.Cells[0], row.Cells[1], row.Cells[2]
		p50 := func(x SideCell) time.Duration {
			if strings.Contains(row.Name, "first byte") {
				return x.TTFB50
			}
			return x.P50
		}
		fmt.Fprintf(w, "| %s | %d | %.0f | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d/%d/%d |\n",
			row.Name, row.Conc, d.RPS, b.RPS, c.RPS, ratio(c.RPS, b.RPS),
			fmtDur(p50(d)), fmtDelta(p50(b)-p50(d)), fmtDelta(p50(c)-p50(d)), fmtDur(b.P99), fmtDur(c.P99),
			fmtDur(b.CPUPerReq), fmtDur(c.CPUPerReq), ratio(float64(c.CPUPerReq), float64(b.CPUPerReq)),
			d.Errors, b.Errors, c.Errors)
	}
	if len(r.Huge) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| concurrent bodies | target | RSS before | peak RSS | served | refused 503 (in dialect) | other |")
		fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|")
		for _, h := range r.Huge {
			fmt.Fprintf(w, "| %d × %s | %s | %s | %s | %d | %d | %d |\n", h.Conc, sizeName(h.Size), h.Target,
				fmtBytes(h.RSSBefore), fmtBytes(h.RSSPeak), h.Served, h.Refused, h.Bad)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | figure | met |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, v := range r.Verdicts() {
		fmt.Fprintf(w, "| %s | %s | %s |\n", v.Target, v.Figure, yesNo(v.Met))
	}
}

// Verdict is one target checked against the run.
type Verdict struct {
	Target, Figure string
	Met            bool
}

// Verdicts checks the targets against the run.
func (r *SideReport) Verdicts() []Verdict {
	var out []Verdict
	for _, row := range r.Rows {
		d, b, c := row.Cells[0], row.Cells[1], row.Cells[2]
		name := fmt.Sprintf("%s, %d conn", row.Name, row.Conc)
		switch {
		case strings.Contains(row.Name, "first byte"):
			out = append(out, Verdict{name + ": TTFB no worse than bare's + 1 ms",
				fmt.Sprintf("added TTFB %s vs bare %s", fmtDelta(c.TTFB50-d.TTFB50), fmtDelta(b.TTFB50-d.TTFB50)),
				c.TTFB50 <= b.TTFB50+time.Millisecond})
		case row.Name == "GET /v1/models" || strings.HasPrefix(row.Name, "Responses ") || strings.HasPrefix(row.Name, "Messages "):
			rr, cr := c.RPS/b.RPS, float64(c.CPUPerReq)/float64(b.CPUPerReq)
			out = append(out, Verdict{name + ": req/s ≥ 1.0× bare, CPU/req ≤ bare's",
				fmt.Sprintf("%.2f× req/s, %.2f× CPU/req", rr, cr), rr >= TargetSmallRPSRatio && cr <= TargetSmallCPURatio})
		case row.Conc == 1:
			added, cr := c.P50-d.P50, float64(c.CPUPerReq)/float64(b.CPUPerReq)
			out = append(out, Verdict{name + ": added p50 ≤ 3 ms, CPU/req ≤ 1.5× bare",
				fmt.Sprintf("%s, %.2f× CPU/req", fmtDelta(added), cr), added <= TargetLargeAddedP50 && cr <= TargetLargeCPURatio})
		default:
			cr := float64(c.CPUPerReq) / float64(b.CPUPerReq)
			out = append(out, Verdict{name + ": CPU/req ≤ 1.5× bare", fmt.Sprintf("%.2f× CPU/req, %.2f× req/s", cr, c.RPS/b.RPS), cr <= TargetLargeCPURatio})
		}
	}
	for _, h := range r.Huge {
		if h.Target != SideCompactd {
			continue
		}
		limit := r.Options.InflightBudget + TargetHugeRSSHeadway
		out = append(out, Verdict{fmt.Sprintf("%d × %s: peak RSS ≤ budget + 100 MiB, every request served or refused in dialect", h.Conc, sizeName(h.Size)),
			fmt.Sprintf("peak %s (limit %s), %d served, %d refused, %d other", fmtBytes(h.RSSPeak), fmtBytes(limit), h.Served, h.Refused, h.Bad),
			r.Options.InflightBudget > 0 && h.RSSPeak <= limit && h.Bad == 0})
	}
	return out
}
