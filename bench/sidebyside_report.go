package bench

import (
	"fmt"
	"io"
	"slices"
	"strconv"
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
	TargetNginxCPURatio  = 2.0       // stretch, 2 KB pass-through: compactd CPU per request / nginx, at most
	// Issue 27's, on growing conversations (bodies around 2 MB, each the last plus new items).
	TargetGrowCPURatio    = 1.25                 // compactd CPU per request / bare, at most
	TargetGrowAddedP50    = 1 * time.Millisecond // compactd p50 over bare's, at most
	TargetHandoffCPURatio = 1.5                  // the handoff turn: compactd CPU per request / bare, at most
)

// storeForwardTable puts compactd's CPU per request beside the store-and-forward reference's
// (--store-forward): the bare proxy streams a body, the reference holds it whole as compactd
// does and does nothing else with it, so the two ratios split compactd's cost over the bare
// proxy into what holding a body whole costs and what compactd's own work on it costs.
func (r *SideReport) storeForwardTable(w io.Writer) {
	tableHead(w, "Store-and-forward reference: compactd's body read (pooled buffer, receive low-water mark) and upstream write (one write, compactd's client), with no parse, MAC, metrics or log (proxy.StoreAndForward).",
		"| path | conns | CPU/req bare | CPU/req store-and-forward | store-and-forward / bare | CPU/req compactd | compactd / store-and-forward | compactd / bare | errors store-and-forward |",
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, row := range r.Rows {
		b, _ := row.Cell(SideBare)
		c, _ := row.Cell(SideCompactd)
		f, ok := row.Cell(SideStoreForward)
		if !ok {
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s | %d |\n", row.Name, row.Conc, fmtDur(b.CPUPerReq), fmtDur(f.CPUPerReq),
			ratio(float64(f.CPUPerReq), float64(b.CPUPerReq)), fmtDur(c.CPUPerReq), ratio(float64(c.CPUPerReq), float64(f.CPUPerReq)),
			ratio(float64(c.CPUPerReq), float64(b.CPUPerReq)), f.Errors)
	}
}

// tableHead begins a table after the ones before it: a blank line, the sentence that says what
// it holds, a blank line, its header and alignment rows.
func tableHead(w io.Writer, intro, header, align string) {
	fmt.Fprintf(w, "\n%s\n\n%s\n%s\n", intro, header, align)
}

// notRun fills the cells of a target that did not run.
const notRun = "not run"

// Markdown writes the side-by-side report as tables for BENCHMARKS.md.
func (r *SideReport) Markdown(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "Machine: %d CPUs (GOMAXPROCS %d), %s, %s %s/%s; load average (1, 5, 15 min, as uptime prints it) %s at start, %s at end.\n",
		m.NumCPU, m.GOMAXPROCS, m.CPUModel, m.GoVersion, m.OS, m.Arch, r.LoadStart, r.LoadEnd)
	procs := "fake upstream, bare proxy (httputil.ReverseProxy), compactd serve with metrics and access log on and the archive off"
	if r.RecallCheck != "" {
		procs += ", a second compactd serve with a SQLite archive for the recall row alone"
	}
	if r.NginxRan() {
		procs += ", nginx (master and workers)"
	}
	if slices.Contains(r.Targets, SideStoreForward) {
		procs += ", the store-and-forward reference (`compactd bench store-forward-proxy`)"
	}
	fmt.Fprintf(w, "Run: each target its own process (%s), load from the bench process; %d interleaved rounds of %v per target and row, medians; CPU per request from the proxy processes' threads (/proc/PID/task/*/schedstat); in-flight body budget %s.\n\n",
		procs, r.Options.Rounds, r.Options.Duration, fmtBytes(r.Budget))
	fmt.Fprintf(w, "nginx: %s.\n\n", r.Nginx)
	if r.RecallCheck != "" {
		fmt.Fprintf(w, "Recall row, checked before measuring: %s.\n\n", r.RecallCheck)
	}
	if len(r.Rows) > 0 {
		r.latencyTable(w)
		if slices.Contains(r.Targets, SideStoreForward) {
			r.storeForwardTable(w)
		}
	}
	if len(r.Huge) > 0 {
		tableHead(w, "Peak-RSS rows: each row a fresh process of its own (the bare proxy, or compactd serve with its default memory settings), its peak the kernel's high-water mark (VmHWM in /proc/PID/status) once every request was answered.",
			"| concurrent bodies | route | target | budget | RSS at start | peak RSS | limit (budget + 100 MiB) | served 200 | refused 503 + Retry-After (in dialect) | other |",
			"|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, h := range r.Huge {
			budget, limit, other := "—", "—", strconv.Itoa(h.Bad)
			if h.Target == SideCompactd {
				budget, limit = fmtBytes(h.Budget), fmtBytes(h.Budget+TargetHugeRSSHeadway)
			}
			if h.Bad > 0 {
				other += fmt.Sprintf(" %v", h.Other)
			}
			fmt.Fprintf(w, "| %d × %s | %s | %s | %s | %s | %s | %s | %d | %d | %s |\n", h.Conc, sizeName(h.Size), h.Route, h.Target,
				budget, fmtBytes(h.RSSBefore), fmtBytes(h.RSSPeak), limit, h.Served, h.Refused, other)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | figure | met |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, v := range r.Verdicts() {
		met := yesNo(v.Met)
		if v.NotRun {
			met = notRun
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", v.Target, v.Figure, met)
	}
}

// Verdict is one target checked against the run.
type Verdict struct {
	Target, Figure string
	Met            bool
	NotRun         bool // the run could not check it (nginx absent): neither met nor missed
}

// isSmall reports whether a row is a 2 KB pass-through row or GET.
func isSmall(name string) bool {
	return name == "GET /v1/models" || strings.HasPrefix(name, "Responses ") || strings.HasPrefix(name, "Messages ")
}

// Verdicts checks the targets against the run.
func (r *SideReport) Verdicts() []Verdict {
	var out []Verdict
	for _, row := range r.Rows {
		d, _ := row.Cell(SideDirect)
		b, _ := row.Cell(SideBare)
		c, _ := row.Cell(SideCompactd)
		name := fmt.Sprintf("%s, %d conn", row.Name, row.Conc)
		switch {
		case strings.Contains(row.Name, "first byte"):
			fig := fmt.Sprintf("added TTFB %s vs bare %s", fmtDelta(c.TTFB50-d.TTFB50), fmtDelta(b.TTFB50-d.TTFB50))
			met := c.TTFB50 <= b.TTFB50+time.Millisecond
			if c.Paired {
				fig += fmt.Sprintf("; %s over bare's request by request", fmtDelta(c.PairedAdded))
				met = c.PairedAdded <= time.Millisecond
			}
			out = append(out, Verdict{Target: name + ": TTFB no worse than bare's + 1 ms", Figure: fig, Met: met})
		case strings.HasPrefix(row.Name, "growing") && strings.Contains(row.Name, "handoff"):
			cr := float64(c.CPUPerReq) / float64(b.CPUPerReq)
			out = append(out, Verdict{Target: name + ": CPU/req ≤ 1.5× bare", Figure: fmt.Sprintf("%.2f× CPU/req (p50 %s over bare's)", cr, fmtDelta(c.P50-b.P50)), Met: cr <= TargetHandoffCPURatio})
		case strings.HasPrefix(row.Name, "growing") && row.Conc == 1:
			cr := float64(c.CPUPerReq) / float64(b.CPUPerReq)
			added, fig := c.P50-b.P50, fmt.Sprintf("%.2f× CPU/req, p50 %s over bare's", cr, fmtDelta(c.P50-b.P50))
			if c.Paired {
				// The same bodies request by request: the upstream's own variation cancels out.
				added = c.PairedAdded
				fig = fmt.Sprintf("%.2f× CPU/req, %s over bare's request by request (p50s: %s)", cr, fmtDelta(c.PairedAdded), fmtDelta(c.P50-b.P50))
			}
			out = append(out, Verdict{Target: name + ": CPU/req ≤ 1.25× bare, p50 ≤ bare's + 1 ms",
				Figure: fig, Met: cr <= TargetGrowCPURatio && added <= TargetGrowAddedP50})
		case strings.HasPrefix(row.Name, "growing"):
			cr := float64(c.CPUPerReq) / float64(b.CPUPerReq)
			out = append(out, Verdict{Target: name + ": CPU/req ≤ 1.25× bare", Figure: fmt.Sprintf("%.2f× CPU/req, %.2f× req/s", cr, c.RPS/b.RPS), Met: cr <= TargetGrowCPURatio})
		case isSmall(row.Name):
			rr, cr := c.RPS/b.RPS, float64(c.CPUPerReq)/float64(b.CPUPerReq)
			out = append(out, Verdict{Target: name + ": req/s ≥ 1.0× bare, CPU/req ≤ bare's",
				Figure: fmt.Sprintf("%.2f× req/s, %.2f× CPU/req", rr, cr), Met: rr >= TargetSmallRPSRatio && cr <= TargetSmallCPURatio})
		case row.Conc == 1:
			added, cr := c.P50-d.P50, float64(c.CPUPerReq)/float64(b.CPUPerReq)
			out = append(out, Verdict{Target: name + ": added p50 ≤ 3 ms, CPU/req ≤ 1.5× bare",
				Figure: fmt.Sprintf("%s, %.2f× CPU/req", fmtDelta(added), cr), Met: added <= TargetLargeAddedP50 && cr <= TargetLargeCPURatio})
		default:
			cr := float64(c.CPUPerReq) / float64(b.CPUPerReq)
			out = append(out, Verdict{Target: name + ": CPU/req ≤ 1.5× bare", Figure: fmt.Sprintf("%.2f× CPU/req, %.2f× req/s", cr, c.RPS/b.RPS), Met: cr <= TargetLargeCPURatio})
		}
	}
	// The stretch target: the 2 KB pass-through rows (not GET, which has no body to skim).
	for _, row := range r.Rows {
		if !strings.HasPrefix(row.Name, "Responses ") && !strings.HasPrefix(row.Name, "Messages ") {
			continue
		}
		v := Verdict{Target: fmt.Sprintf("%s, %d conn (stretch): CPU/req ≤ 2× nginx's", row.Name, row.Conc)}
		c, _ := row.Cell(SideCompactd)
		if n, ok := row.Cell(SideNginx); !ok {
			v.Figure, v.NotRun = "nginx "+notRun, true
		} else {
			cr := float64(c.CPUPerReq) / float64(n.CPUPerReq)
			v.Figure = fmt.Sprintf("%.2f× nginx's CPU/req (%s vs %s)", cr, fmtDur(c.CPUPerReq), fmtDur(n.CPUPerReq))
			v.Met = n.CPUPerReq > 0 && cr <= TargetNginxCPURatio
		}
		out = append(out, v)
	}
	for _, h := range r.Huge {
		if h.Target != SideCompactd {
			continue
		}
		limit := h.Budget + TargetHugeRSSHeadway
		out = append(out, Verdict{Target: fmt.Sprintf("%d × %s on %s: peak RSS ≤ budget + 100 MiB, every request served or refused in dialect", h.Conc, sizeName(h.Size), h.Route),
			Figure: fmt.Sprintf("peak %s (limit %s), %d served, %d refused, %d other", fmtBytes(h.RSSPeak), fmtBytes(limit), h.Served, h.Refused, h.Bad),
			Met:    h.Budget > 0 && h.RSSPeak <= limit && h.Bad == 0})
	}
	return out
}

// latencyTable is the table: one row per path and connection count.
func (r *SideReport) latencyTable(w io.Writer) {
	fmt.Fprintln(w, "| path | conns | req/s direct | req/s bare | req/s nginx | req/s compactd | compactd / bare | p50 direct | added p50 bare | added p50 nginx | added p50 compactd | p99 bare | p99 nginx | p99 compactd | CPU/req bare | CPU/req nginx | CPU/req compactd | compactd / bare CPU | compactd / nginx CPU | errors direct/bare/nginx/compactd | 1-min load start→end |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, row := range r.Rows {
		d, _ := row.Cell(SideDirect)
		b, _ := row.Cell(SideBare)
		c, _ := row.Cell(SideCompactd)
		n, nok := row.Cell(SideNginx)
		ttfb := strings.Contains(row.Name, "first byte")
		p50 := func(x SideCell) time.Duration {
			if ttfb {
				return x.TTFB50
			}
			return x.P50
		}
		ng := func(f func() string) string {
			if !nok {
				return notRun
			}
			return f()
		}
		fmt.Fprintf(w, "| %s | %d | %.0f | %.0f | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d/%d/%s/%d | %.2f→%.2f |\n",
			row.Name, row.Conc, d.RPS, b.RPS, ng(func() string { return fmt.Sprintf("%.0f", n.RPS) }), c.RPS, ratio(c.RPS, b.RPS),
			fmtDur(p50(d)), fmtDelta(p50(b)-p50(d)), ng(func() string { return fmtDelta(p50(n) - p50(d)) }), fmtDelta(p50(c)-p50(d)),
			fmtDur(b.P99), ng(func() string { return fmtDur(n.P99) }), fmtDur(c.P99),
			fmtDur(b.CPUPerReq), ng(func() string { return fmtDur(n.CPUPerReq) }), fmtDur(c.CPUPerReq),
			ratio(float64(c.CPUPerReq), float64(b.CPUPerReq)), ng(func() string { return ratio(float64(c.CPUPerReq), float64(n.CPUPerReq)) }),
			d.Errors, b.Errors, ng(func() string { return fmt.Sprint(n.Errors) }), c.Errors, row.LoadStart, row.LoadEnd)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "p50 is time to first byte on the SSE row (p99 is still to the last byte); direct is the fake upstream without a proxy, so \"added\" is what a proxy adds; the recall row's compactd is the second serve process (archive on), its other columns the same history without the item, as on the handoff row.")
}
