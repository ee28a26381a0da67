package eval

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"strings"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/english"
)

// SeriesColors are the chart colours of the configurations, in Variants order (and "external"
// takes the first). Tests look for these pixels in a screenshot of the HTML report.
var SeriesColors = []string{"#d62728", "#ff7f0e", "#2ca02c", "#1f77b4"}

// GrepColor is the colour of the grep line (the upper bound) in the charts.
const GrepColor = "#7f7f7f"

// grepLabel names the grep row in every report.
const grepLabel = "grep (raw log)"

func (r *Report) describe() string {
	up := "upstream " + r.Config.Upstream
	if r.Upstream == "fake" {
		up = fmt.Sprintf("built-in fake upstream (lossy summariser: keep %.2f, at most %d detail lines)", r.Config.Lossy.Keep, r.Config.Lossy.MaxLines)
	}
	if r.Config.Compactd != "" {
		up = "compactd at " + r.Config.Compactd
	}
	route := r.Route
	if route == "" {
		route = "/v1/responses"
	}
	steps, threshold := r.Config.Steps, fmt.Sprintf("threshold %d", r.Config.Threshold)
	retain := fmt.Sprintf("retain %d tokens", r.Config.Retain)
	switch r.Config.API {
	case dialect.Messages:
		route += " (Anthropic Messages, compact_20260112)"
		steps, threshold = r.Config.MessagesSteps(), fmt.Sprintf("trigger %d input tokens", r.Config.messagesTrigger())
		retain = "nothing retained verbatim" // a Messages compaction summarises the whole conversation
	case dialect.Chat:
		route += " (Chat Completions, transparent)"
		threshold = fmt.Sprintf("policy threshold chat=%d on every turn", r.Config.Threshold)
	}
	seeds := fmt.Sprintf("seed %d", r.Config.Seed)
	if r.multi() {
		seeds = "seeds " + joinSeeds(r.Config.Seeds)
	}
	turns := ""
	if r.Config.Turns != 3 {
		turns = ", " + english.Count(r.Config.Turns, "turn") + " per round"
	}
	return fmt.Sprintf("route %s; %s (%s), %s, %s and %s per round%s, %s, %s; %s",
		route, english.Count(r.Config.Sessions, "session"), strings.Join(r.Config.Shapes, ", "), seeds,
		english.Count(steps, "step"), english.Count(r.Config.Facts, "fact"), turns, threshold, retain, up)
}

func joinSeeds(seeds []uint64) string {
	s := make([]string, len(seeds))
	for i, x := range seeds {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

// multi reports a report pooled over several seeds.
func (r *Report) multi() bool { return len(r.Config.Seeds) > 1 }

func (v Variant) title() string {
	if v.Name == "external" {
		return v.Label
	}
	return "(" + v.Name + ") " + v.Label
}

func pct(p Point) string {
	if p.Facts == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%d/%d %3.0f%%", p.Correct, p.Facts, 100*p.Recall)
}

// recallCell is a point's recall: "c/f pct" for one seed, "pct [lowest–highest]" pooled.
func recallCell(p Point) string {
	if p.Facts == 0 || p.Spread == nil {
		return pct(p)
	}
	return fmt.Sprintf("%3.0f%% [%.0f–%.0f]", 100*p.Recall, 100*p.Spread.Min, 100*p.Spread.Max)
}

func grepCell(p Point) string {
	if p.Facts == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%d/%d %3.0f%%", p.Grep, p.Facts, 100*p.GrepRecall)
}

// ratioCell is the mean share of the conversation a compaction replaced, with its range when
// spread is set.
func ratioCell(r Ratio, spread bool) string {
	switch {
	case !r.Known:
		return "n/a"
	case r.Compactions == 0:
		return "-"
	case spread:
		return fmt.Sprintf("%3.0f%% [%.0f–%.0f]", 100*r.Mean, 100*r.Min, 100*r.Max)
	}
	return fmt.Sprintf("%3.0f%%", 100*r.Mean)
}

func costCell(c Cost) string {
	if !c.Known {
		return "n/a (external compactd)"
	}
	return fmt.Sprintf("%.1f calls, %.0f in / %.0f out, %.1f ms", c.Calls, c.InputTokens, c.OutputTokens, c.LatencyMS)
}

// grepPoints is the grep row: per checkpoint, the highest grep count of the configurations
// (they search the same raw log; their question turns' contexts differ).
// grepCell is the grep bound's cell for one fact kind: found/asked, "-" when none was asked.
func (p Point) grepCell(kind string) string {
	if n := p.KindFacts[kind]; n > 0 {
		return fmt.Sprintf("%d/%d", p.GrepByKind[kind], n)
	}
	return "-"
}

func grepPoints(rows []Row, checkpoints int) []Point {
	out := make([]Point, checkpoints)
	for _, row := range rows {
		if row.NA != "" {
			continue
		}
		for i, p := range row.Points {
			if i < len(out) && (out[i].Facts == 0 || p.GrepRecall > out[i].GrepRecall) {
				out[i] = p
			}
		}
	}
	return out
}

// WriteText writes the readable tables: recall per configuration and checkpoint beside the
// grep bound, the compaction ratio and the summariser's cost per compaction; recall by fact kind
// at the last checkpoint; the retain sweep when one ran.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "compactd eval: %s\n\n", r.describe())
	width := 14
	if r.multi() {
		width = 16
		fmt.Fprintf(&b, "recall pooled over %s, [lowest–highest] of one seed\n", english.Count(len(r.Config.Seeds), "seed"))
	}
	fmt.Fprintf(&b, "%-18s", "recall after")
	for _, k := range r.Config.Checkpoints {
		fmt.Fprintf(&b, " %*s", width, english.Count(k, "compaction"))
	}
	fmt.Fprintf(&b, "   %8s   %s\n", "replaced", "summariser per compaction (calls, tokens in/out, latency)")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "%-18s", row.Variant.title())
		if row.NA != "" {
			for range r.Config.Checkpoints {
				fmt.Fprintf(&b, " %*s", width, "n/a")
			}
			fmt.Fprintf(&b, "   %8s   n/a (%s)\n", "n/a", row.NA)
			continue
		}
		for _, p := range row.Points {
			fmt.Fprintf(&b, " %*s", width, recallCell(p))
		}
		fmt.Fprintf(&b, "   %8s   %s\n", ratioCell(row.Ratio, false), costCell(row.Cost))
	}
	if len(r.Rows) > 0 {
		fmt.Fprintf(&b, "%-18s", grepLabel)
		for _, p := range grepPoints(r.Rows, len(r.Config.Checkpoints)) {
			fmt.Fprintf(&b, " %*s", width, grepCell(p))
		}
		fmt.Fprintf(&b, "   upper bound: the answer's text is in the %s\n", r.grepScope())
	}
	for _, row := range r.Rows {
		if note := row.note(); note != "" {
			fmt.Fprintf(&b, "note: %s: %s\n", row.Variant.title(), note)
		}
	}
	if len(r.Rows) > 0 && len(r.Config.Checkpoints) > 0 {
		last := len(r.Config.Checkpoints) - 1
		title := "by fact kind after " + english.Count(r.Config.Checkpoints[last], "compaction")
		if r.multi() {
			title += ", the lowest of " + english.Count(len(r.Config.Seeds), "seed")
		}
		fmt.Fprintf(&b, "\n%s:\n", title)
		writeKindText(&b, r.Rows, last, r.multi())
	}
	if len(r.Sweep) > 0 {
		r.writeSweepText(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// kindCell is a configuration's score for one kind at a point: its own count, or pooled over
// seeds the lowest seed's.
func kindCell(p Point, kind string, lowest bool) string {
	if lowest && p.MinByKind != nil {
		if s, ok := p.MinByKind[kind]; ok && s.Facts > 0 {
			return fmt.Sprintf("%d/%d", s.Correct, s.Facts)
		}
		return "-"
	}
	if n := p.KindFacts[kind]; n > 0 {
		return fmt.Sprintf("%d/%d", p.ByKind[kind], n)
	}
	return "-"
}

func writeKindText(b *strings.Builder, rows []Row, at int, lowest bool) {
	fmt.Fprintf(b, "%-18s", "")
	for _, k := range Kinds {
		fmt.Fprintf(b, " %17s", k)
	}
	b.WriteByte('\n')
	for _, row := range rows {
		fmt.Fprintf(b, "%-18s", row.Variant.title())
		for _, k := range Kinds {
			cell := "n/a"
			if row.NA == "" {
				cell = kindCell(row.Points[at], k, lowest)
			}
			fmt.Fprintf(b, " %17s", cell)
		}
		b.WriteByte('\n')
	}
	g := grepPoints(rows, at+1)[at]
	label := grepLabel
	if lowest {
		label = "grep, all seeds"
	}
	fmt.Fprintf(b, "%-18s", label)
	for _, k := range Kinds {
		fmt.Fprintf(b, " %17s", g.grepCell(k))
	}
	b.WriteByte('\n')
}

func (r *Report) writeSweepText(b *strings.Builder) {
	width := 14
	if r.multi() {
		width = 16
	}
	fmt.Fprintf(b, "\nretain sweep: share of the conversation each compaction replaced (1 - tokens after / tokens before, as compactd counted them; mean [lowest–highest]) and recall\n")
	fmt.Fprintf(b, "%13s  %-18s %16s %15s", "retain tokens", "configuration", "replaced", "tokens before")
	for _, k := range r.Config.Checkpoints {
		fmt.Fprintf(b, " %*s", width, english.Count(k, "compaction"))
	}
	b.WriteByte('\n')
	for _, st := range r.Sweep {
		for _, row := range st.Rows {
			fmt.Fprintf(b, "%13d  %-18s", st.Retain, row.Variant.title())
			if row.NA != "" {
				fmt.Fprintf(b, " %16s %15s", "n/a", "n/a")
				for range r.Config.Checkpoints {
					fmt.Fprintf(b, " %*s", width, "n/a")
				}
				b.WriteByte('\n')
				continue
			}
			before := "n/a"
			if row.Ratio.Known && row.Ratio.Compactions > 0 {
				before = fmt.Sprintf("%.0f → %.0f", row.Ratio.TokensBefore, row.Ratio.TokensAfter)
			}
			fmt.Fprintf(b, " %16s %15s", ratioCell(row.Ratio, true), before)
			for _, p := range row.Points {
				fmt.Fprintf(b, " %*s", width, recallCell(p))
			}
			b.WriteByte('\n')
		}
	}
}

// note says what makes a row's checkpoints other than "k compactions, questions uncompacted".
func (row Row) note() string {
	var parts []string
	if row.ExtraCompactions > 0 {
		parts = append(parts, english.Count(row.ExtraCompactions, "compaction")+" past a round's first (checkpoints count rounds)")
	}
	if row.QuestionCompactions > 0 {
		parts = append(parts, english.Count(row.QuestionCompactions, "question turn")+" compacted (the threshold is below what a compacted conversation holds)")
	}
	return strings.Join(parts, "; ")
}

func (r *Report) grepScope() string {
	if r.GrepScope == "" {
		return "raw log or the question turn's context"
	}
	return r.GrepScope
}

// WriteJSON writes the report as indented JSON, every answer included.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH                       = 720, 400
	padLeft, padRight, padTop, padBottom = 64, 180, 24, 56
)

// series is one line of a chart; NaN-free ys, one per x. lo and hi, when set, are error bars.
type series struct {
	name, title, color, class string
	ys, lo, hi                []float64
	tips                      []string
	dashed                    bool
	na                        string // no line: the legend says why
}

// lineChart renders series over categorical xs as an inline <svg> (no external assets, no
// script), y from 0 to 100%.
func lineChart(id, aria, xTitle, yTitle string, xs []string, lines []series) string {
	var b strings.Builder
	pw, ph := chartW-padLeft-padRight, chartH-padTop-padBottom
	n := len(xs)
	x := func(i int) float64 {
		if n == 1 {
			return padLeft + float64(pw)/2
		}
		return padLeft + float64(i)*float64(pw)/float64(n-1)
	}
	y := func(v float64) float64 { return padTop + (1-v)*float64(ph) }
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" id="%s" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s" font-family="sans-serif" font-size="13">`, id, chartW, chartH, chartW, chartH, html.EscapeString(aria))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`, chartW, chartH)
	for t := 0; t <= 100; t += 25 {
		yy := y(float64(t) / 100)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#dddddd"/>`, padLeft, yy, padLeft+pw, yy)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#444">%d%%</text>`, padLeft-8, yy+4, t)
	}
	for i, k := range xs {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%s</text>`, x(i), padTop+ph+20, html.EscapeString(k))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#222">%s</text>`, padLeft+float64(pw)/2, chartH-10, html.EscapeString(xTitle))
	fmt.Fprintf(&b, `<text x="16" y="%.1f" text-anchor="middle" fill="#222" transform="rotate(-90 16 %.1f)">%s</text>`, y(0.5), y(0.5), html.EscapeString(yTitle))
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`, padLeft, padTop+ph, padLeft+pw, padTop+ph)
	solid := 0
	for _, l := range lines {
		if !l.dashed && l.na == "" {
			solid++
		}
	}
	k := 0
	for li, l := range lines {
		ly := padTop + 12 + li*26
		title := html.EscapeString(l.title)
		if l.na != "" {
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="22" height="10" fill="none" stroke="%s"/><text x="%d" y="%d" fill="#222">%s: n/a</text>`, padLeft+pw+20, ly-9, l.color, padLeft+pw+48, ly, title)
			continue
		}
		// Earlier solid series are drawn wider, so one that coincides with a later one still
		// shows as a border around it instead of vanishing.
		width := 2.0
		if !l.dashed {
			width = 3 + 2.5*float64(solid-1-k)
			k++
		}
		var pts []string
		for i, v := range l.ys {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
		}
		dash := ""
		if l.dashed {
			dash = ` stroke-dasharray="8 5"`
		}
		fmt.Fprintf(&b, `<polyline class="%s" data-config="%s" fill="none" stroke="%s" stroke-width="%.1f" stroke-linejoin="round"%s points="%s"/>`, l.class, html.EscapeString(l.name), l.color, width, dash, strings.Join(pts, " "))
		for i, v := range l.ys {
			if l.lo != nil && l.hi[i] > l.lo[i] {
				fmt.Fprintf(&b, `<line class="spread" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`, x(i)+4, y(l.lo[i]), x(i)+4, y(l.hi[i]), l.color)
				for _, e := range []float64{l.lo[i], l.hi[i]} {
					fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`, x(i)-2, y(e), x(i)+10, y(e), l.color)
				}
			}
			tip := ""
			if i < len(l.tips) {
				tip = "<title>" + html.EscapeString(l.tips[i]) + "</title>"
			}
			r := 3 + width
			if l.dashed {
				r = 4
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s">%s</circle>`, x(i), y(v), r, l.color, tip)
		}
		swatch := fmt.Sprintf(`<rect x="%d" y="%d" width="22" height="10" fill="%s"/>`, padLeft+pw+20, ly-9, l.color)
		if l.dashed {
			swatch = fmt.Sprintf(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="8 5"/>`, padLeft+pw+20, ly-4, padLeft+pw+42, ly-4, l.color)
		}
		fmt.Fprintf(&b, `%s<text x="%d" y="%d" fill="#222">%s</text>`, swatch, padLeft+pw+48, ly, title)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// SVG renders recall against compaction count, one line per configuration (with each point's
// spread over the seeds when pooled) and the grep bound dashed, as a standalone inline <svg>.
func (r *Report) SVG() string {
	var xs []string
	for _, k := range r.Config.Checkpoints {
		xs = append(xs, fmt.Sprint(k))
	}
	var lines []series
	for ri, row := range r.Rows {
		l := series{name: row.Variant.Name, title: row.Variant.title(), color: SeriesColors[ri%len(SeriesColors)], class: "series", na: row.NA}
		for _, p := range row.Points {
			l.ys = append(l.ys, p.Recall)
			l.tips = append(l.tips, fmt.Sprintf("%s: %s after %d", row.Variant.title(), recallCell(p), p.Compactions))
			if p.Spread != nil {
				l.lo, l.hi = append(l.lo, p.Spread.Min), append(l.hi, p.Spread.Max)
			}
		}
		lines = append(lines, l)
	}
	if len(r.Rows) > 0 {
		g := series{name: "grep", title: grepLabel, color: GrepColor, class: "bound", dashed: true}
		for _, p := range grepPoints(r.Rows, len(r.Config.Checkpoints)) {
			g.ys = append(g.ys, p.GrepRecall)
			g.tips = append(g.tips, fmt.Sprintf("%s: %s after %d", grepLabel, grepCell(p), p.Compactions))
		}
		lines = append(lines, g)
	}
	return lineChart("chart", "recall against compaction count", "compactions", "facts answered", xs, lines)
}

// SweepSVG renders the sweep: per configuration, recall at the last checkpoint (solid) and the
// share of the conversation a compaction replaced (dashed) against the retain budget.
func (r *Report) SweepSVG() string {
	if len(r.Sweep) == 0 || len(r.Config.Checkpoints) == 0 {
		return ""
	}
	last := len(r.Config.Checkpoints) - 1
	var xs []string
	for _, st := range r.Sweep {
		xs = append(xs, fmt.Sprint(st.Retain))
	}
	var recall, ratio []series
	for ri, v := range r.Sweep[0].Rows {
		color := SeriesColors[ri%len(SeriesColors)]
		l := series{name: v.Variant.Name, title: "(" + v.Variant.Name + ") recall", color: color, class: "sweep-series"}
		q := series{name: v.Variant.Name, title: "(" + v.Variant.Name + ") replaced", color: color, class: "sweep-ratio", dashed: true}
		for _, st := range r.Sweep {
			row := st.Rows[ri]
			if row.NA != "" {
				l.na, q.na = row.NA, row.NA
				break
			}
			p := row.Points[last]
			l.ys = append(l.ys, p.Recall)
			l.tips = append(l.tips, fmt.Sprintf("%s, retain %d: %s after %d", v.Variant.title(), st.Retain, recallCell(p), p.Compactions))
			q.ys = append(q.ys, row.Ratio.Mean)
			q.tips = append(q.tips, fmt.Sprintf("%s, retain %d: a compaction replaced %s", v.Variant.title(), st.Retain, ratioCell(row.Ratio, true)))
		}
		recall, ratio = append(recall, l), append(ratio, q)
	}
	return lineChart("sweep-chart", "recall and compaction ratio against the retain budget", "retain tokens",
		"recall after "+english.Count(r.Config.Checkpoints[last], "compaction")+" / share replaced", xs, append(recall, ratio...))
}

// WriteHTML writes a self-contained report page: the charts, the tables (recall with the grep
// bound, by fact kind at every checkpoint, the sweep) and the run's settings.
func (r *Report) WriteHTML(w io.Writer) error {
	var text strings.Builder
	_ = r.WriteText(&text)
	var b strings.Builder
	b.WriteString("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>compactd eval</title>\n")
	b.WriteString(`<style>body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}h1{font-size:22px}h2{font-size:17px;margin-top:28px}` +
		`table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}` +
		`th:first-child,td:first-child{text-align:left}tr.bound td{color:#555;font-style:italic}p.note{color:#555;font-size:13px}pre{overflow-x:auto;font-size:12px}</style></head><body>` + "\n")
	b.WriteString("<h1>compactd eval: what survives compaction</h1>\n")
	fmt.Fprintf(&b, "<p class=\"note\">%s</p>\n", html.EscapeString(r.describe()))
	b.WriteString(r.SVG())
	b.WriteString("\n<table id=\"recall\"><tr><th>configuration</th>")
	for _, k := range r.Config.Checkpoints {
		fmt.Fprintf(&b, "<th>after %d</th>", k)
	}
	b.WriteString("<th>replaced per compaction</th><th>summariser calls</th><th>tokens in / out</th><th>latency</th></tr>\n")
	for ri, row := range r.Rows {
		fmt.Fprintf(&b, "<tr><td><span style=\"color:%s\">&#9632;</span> %s</td>", SeriesColors[ri%len(SeriesColors)], html.EscapeString(row.Variant.title()))
		if row.NA != "" {
			for range r.Config.Checkpoints {
				fmt.Fprintf(&b, "<td title=\"%s\">n/a</td>", html.EscapeString(row.NA))
			}
			fmt.Fprintf(&b, "<td>n/a</td><td colspan=\"3\">n/a: %s</td></tr>\n", html.EscapeString(row.NA))
			continue
		}
		for _, p := range row.Points {
			fmt.Fprintf(&b, "<td>%s</td>", html.EscapeString(recallCell(p)))
		}
		fmt.Fprintf(&b, "<td>%s</td>", html.EscapeString(ratioCell(row.Ratio, true)))
		if c := row.Cost; c.Known {
			fmt.Fprintf(&b, "<td>%.1f</td><td>%.0f / %.0f</td><td>%.1f ms</td></tr>\n", c.Calls, c.InputTokens, c.OutputTokens, c.LatencyMS)
		} else {
			b.WriteString("<td>n/a</td><td>n/a</td><td>n/a</td></tr>\n")
		}
	}
	if len(r.Rows) > 0 {
		fmt.Fprintf(&b, "<tr class=\"bound\"><td><span style=\"color:%s\">&#9482;</span> %s</td>", GrepColor, grepLabel)
		for _, p := range grepPoints(r.Rows, len(r.Config.Checkpoints)) {
			fmt.Fprintf(&b, "<td>%s</td>", html.EscapeString(grepCell(p)))
		}
		fmt.Fprintf(&b, "<td colspan=\"4\">upper bound: the answer's text is in the %s</td></tr>\n", html.EscapeString(r.grepScope()))
	}
	b.WriteString("</table>\n")
	for _, row := range r.Rows {
		if note := row.note(); note != "" {
			fmt.Fprintf(&b, "<p class=\"note\">%s: %s</p>\n", html.EscapeString(row.Variant.title()), html.EscapeString(note))
		}
	}
	spread := ""
	if r.multi() {
		spread = fmt.Sprintf(" Pooled over %s (%s): each cell is the pooled share and, in brackets, the lowest and highest share of one seed; by fact kind, (min c/f) is the lowest seed's score.",
			english.Count(len(r.Config.Seeds), "seed"), joinSeeds(r.Config.Seeds))
	}
	b.WriteString("<p class=\"note\">Recall is the share of planted facts (return types, line numbers, config values, exact error messages, rejected approaches, user corrections) " +
		"answered exactly when asked through compactd as ordinary turns. " + grepLabel + " is the upper bound: the share whose exact answer text is in the raw log the client sent " +
		"or in what the model was given on the question turn. Replaced is 1 - tokens after / tokens before per compaction, as compactd counted them. " +
		"Summariser figures are per compaction, gap-check passes included." + html.EscapeString(spread) + "</p>\n")
	for i, k := range r.Config.Checkpoints {
		fmt.Fprintf(&b, "<h2>By fact kind after %s</h2>\n", html.EscapeString(english.Count(k, "compaction")))
		r.writeKindHTML(&b, i)
	}
	if len(r.Sweep) > 0 {
		r.writeSweepHTML(&b)
	}
	fmt.Fprintf(&b, "<h2>As text</h2>\n<pre>%s</pre>\n</body></html>\n", html.EscapeString(text.String()))
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) writeKindHTML(b *strings.Builder, at int) {
	b.WriteString("<table class=\"kinds\"><tr><th>configuration</th>")
	for _, k := range Kinds {
		fmt.Fprintf(b, "<th>%s</th>", html.EscapeString(k))
	}
	b.WriteString("</tr>\n")
	for ri, row := range r.Rows {
		fmt.Fprintf(b, "<tr><td><span style=\"color:%s\">&#9632;</span> %s</td>", SeriesColors[ri%len(SeriesColors)], html.EscapeString(row.Variant.title()))
		for _, k := range Kinds {
			cell := "n/a"
			if row.NA == "" {
				cell = kindCell(row.Points[at], k, false)
				if lo := kindCell(row.Points[at], k, true); r.multi() && lo != "-" {
					cell += " (min " + lo + ")"
				}
			}
			fmt.Fprintf(b, "<td>%s</td>", html.EscapeString(cell))
		}
		b.WriteString("</tr>\n")
	}
	g := grepPoints(r.Rows, len(r.Config.Checkpoints))[at]
	fmt.Fprintf(b, "<tr class=\"bound\"><td>%s</td>", grepLabel)
	for _, k := range Kinds {
		fmt.Fprintf(b, "<td>%s</td>", g.grepCell(k))
	}
	b.WriteString("</tr></table>\n")
}

func (r *Report) writeSweepHTML(b *strings.Builder) {
	b.WriteString("<h2>Retain sweep: compaction ratio and recall</h2>\n")
	b.WriteString(r.SweepSVG())
	b.WriteString("\n<table id=\"sweep\"><tr><th>retain tokens</th><th>configuration</th><th>replaced per compaction</th><th>tokens before → after</th>")
	for _, k := range r.Config.Checkpoints {
		fmt.Fprintf(b, "<th>after %d</th>", k)
	}
	b.WriteString("</tr>\n")
	for _, st := range r.Sweep {
		for ri, row := range st.Rows {
			fmt.Fprintf(b, "<tr><td>%d</td><td><span style=\"color:%s\">&#9632;</span> %s</td>", st.Retain, SeriesColors[ri%len(SeriesColors)], html.EscapeString(row.Variant.title()))
			if row.NA != "" {
				fmt.Fprintf(b, "<td colspan=\"%d\">n/a: %s</td></tr>\n", 2+len(r.Config.Checkpoints), html.EscapeString(row.NA))
				continue
			}
			before := "n/a"
			if row.Ratio.Known && row.Ratio.Compactions > 0 {
				before = fmt.Sprintf("%.0f → %.0f", row.Ratio.TokensBefore, row.Ratio.TokensAfter)
			}
			fmt.Fprintf(b, "<td>%s</td><td>%s</td>", html.EscapeString(ratioCell(row.Ratio, true)), html.EscapeString(before))
			for _, p := range row.Points {
				fmt.Fprintf(b, "<td>%s</td>", html.EscapeString(recallCell(p)))
			}
			b.WriteString("</tr>\n")
		}
	}
	b.WriteString("</table>\n<p class=\"note\">The retain budget is the newest user-message tokens compactd keeps verbatim past a compaction. " +
		"Solid lines: recall at the last checkpoint; dashed: the share of the conversation a compaction replaced.</p>\n")
}
