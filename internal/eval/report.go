package eval

import (
	"encoding/json"
	"fmt"
	"github.com/compactd/compactd/internal/english"
	"html"
	"io"
	"strings"
)

// SeriesColors are the chart colours of the configurations, in Variants order (and "external"
// takes the first). Tests look for these pixels in a screenshot of the HTML report.
var SeriesColors = []string{"#d62728", "#ff7f0e", "#2ca02c", "#1f77b4"}

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
	if r.Config.API == APIMessages {
		route += " (Anthropic Messages, compact_20260112)"
		steps, threshold = r.Config.MessagesSteps(), fmt.Sprintf("trigger %d input tokens", r.Config.messagesTrigger())
		retain = "nothing retained verbatim" // a Messages compaction summarises the whole conversation
	}
	return fmt.Sprintf("route %s; %s (%s), seed %d, %s and %s per round, %s, %s; %s",
		route, english.Count(r.Config.Sessions, "session"), strings.Join(r.Config.Shapes, ", "), r.Config.Seed,
		english.Count(steps, "step"), english.Count(r.Config.Facts, "fact"), threshold, retain, up)
}

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

// WriteText writes the readable table: recall per configuration and checkpoint, the summariser's
// cost per compaction, and recall by fact kind at the last checkpoint.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "compactd eval: %s\n\n", r.describe())
	fmt.Fprintf(&b, "%-18s", "recall after")
	for _, k := range r.Config.Checkpoints {
		fmt.Fprintf(&b, " %14s", fmt.Sprintf("%d compaction%s", k, plural(k)))
	}
	fmt.Fprintf(&b, "   %s\n", "summariser per compaction (calls, tokens in/out, latency)")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "%-18s", row.Variant.title())
		if row.NA != "" {
			for range r.Config.Checkpoints {
				fmt.Fprintf(&b, " %14s", "n/a")
			}
			fmt.Fprintf(&b, "   n/a (%s)\n", row.NA)
			continue
		}
		for _, p := range row.Points {
			fmt.Fprintf(&b, " %14s", pct(p))
		}
		if c := row.Cost; c.Known {
			fmt.Fprintf(&b, "   %.1f calls, %.0f in / %.0f out, %.1f ms\n", c.Calls, c.InputTokens, c.OutputTokens, c.LatencyMS)
		} else {
			b.WriteString("   n/a (external compactd)\n")
		}
	}
	if len(r.Rows) > 0 && len(r.Config.Checkpoints) > 0 {
		last := len(r.Config.Checkpoints) - 1
		fmt.Fprintf(&b, "\nby fact kind after %s:\n%-18s", english.Count(r.Config.Checkpoints[last], "compaction"), "")
		for _, k := range Kinds {
			fmt.Fprintf(&b, " %17s", k)
		}
		b.WriteByte('\n')
		for _, row := range r.Rows {
			fmt.Fprintf(&b, "%-18s", row.Variant.title())
			for _, k := range Kinds {
				if row.NA != "" {
					fmt.Fprintf(&b, " %17s", "n/a")
					continue
				}
				p := row.Points[last]
				cell := "-"
				if n := p.KindFacts[k]; n > 0 {
					cell = fmt.Sprintf("%d/%d", p.ByKind[k], n)
				}
				fmt.Fprintf(&b, " %17s", cell)
			}
			b.WriteByte('\n')
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
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

// SVG renders recall against compaction count, one line per configuration, as a standalone
// inline <svg> element (no external assets, no script).
func (r *Report) SVG() string {
	var b strings.Builder
	pw, ph := chartW-padLeft-padRight, chartH-padTop-padBottom
	n := len(r.Config.Checkpoints)
	x := func(i int) float64 {
		if n == 1 {
			return padLeft + float64(pw)/2
		}
		return padLeft + float64(i)*float64(pw)/float64(n-1)
	}
	y := func(v float64) float64 { return padTop + (1-v)*float64(ph) }
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" id="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="recall against compaction count" font-family="sans-serif" font-size="13">`, chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`, chartW, chartH)
	for t := 0; t <= 100; t += 25 {
		yy := y(float64(t) / 100)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#dddddd"/>`, padLeft, yy, padLeft+pw, yy)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#444">%d%%</text>`, padLeft-8, yy+4, t)
	}
	for i, k := range r.Config.Checkpoints {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%d</text>`, x(i), padTop+ph+20, k)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#222">compactions</text>`, padLeft+float64(pw)/2, chartH-10)
	fmt.Fprintf(&b, `<text x="16" y="%.1f" text-anchor="middle" fill="#222" transform="rotate(-90 16 %.1f)">facts answered</text>`, y(0.5), y(0.5))
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`, padLeft, padTop+ph, padLeft+pw, padTop+ph)
	for ri, row := range r.Rows {
		color := SeriesColors[ri%len(SeriesColors)]
		// Earlier series are drawn wider, so one that coincides with a later one still shows
		// as a border around it instead of vanishing.
		width := 3 + 2.5*float64(len(r.Rows)-1-ri)
		ly := padTop + 12 + ri*26
		if row.NA != "" { // no line: a legend entry that says why
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="22" height="10" fill="none" stroke="%s"/><text x="%d" y="%d" fill="#222">%s: n/a</text>`, padLeft+pw+20, ly-9, color, padLeft+pw+48, ly, html.EscapeString(row.Variant.title()))
			continue
		}
		var pts []string
		for i, p := range row.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(p.Recall)))
		}
		fmt.Fprintf(&b, `<polyline class="series" data-config="%s" fill="none" stroke="%s" stroke-width="%.1f" stroke-linejoin="round" points="%s"/>`, html.EscapeString(row.Variant.Name), color, width, strings.Join(pts, " "))
		for i, p := range row.Points {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"><title>%s: %s after %d</title></circle>`, x(i), y(p.Recall), 3+width, color, html.EscapeString(row.Variant.title()), pct(p), p.Compactions)
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="22" height="10" fill="%s"/><text x="%d" y="%d" fill="#222">%s</text>`, padLeft+pw+20, ly-9, color, padLeft+pw+48, ly, html.EscapeString(row.Variant.title()))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// WriteHTML writes a self-contained report page: the chart, the table and the run's settings.
func (r *Report) WriteHTML(w io.Writer) error {
	var text strings.Builder
	_ = r.WriteText(&text)
	var b strings.Builder
	b.WriteString("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>compactd eval</title>\n")
	b.WriteString(`<style>body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}h1{font-size:22px}` +
		`table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}` +
		`th:first-child,td:first-child{text-align:left}p.note{color:#555;font-size:13px}pre{overflow-x:auto;font-size:12px}</style></head><body>` + "\n")
	b.WriteString("<h1>compactd eval: what survives compaction</h1>\n")
	fmt.Fprintf(&b, "<p class=\"note\">%s</p>\n", html.EscapeString(r.describe()))
	b.WriteString(r.SVG())
	b.WriteString("\n<table><tr><th>configuration</th>")
	for _, k := range r.Config.Checkpoints {
		fmt.Fprintf(&b, "<th>after %d</th>", k)
	}
	b.WriteString("<th>summariser calls</th><th>tokens in / out</th><th>latency</th></tr>\n")
	for ri, row := range r.Rows {
		fmt.Fprintf(&b, "<tr><td><span style=\"color:%s\">&#9632;</span> %s</td>", SeriesColors[ri%len(SeriesColors)], html.EscapeString(row.Variant.title()))
		if row.NA != "" {
			for range r.Config.Checkpoints {
				fmt.Fprintf(&b, "<td title=\"%s\">n/a</td>", html.EscapeString(row.NA))
			}
			fmt.Fprintf(&b, "<td colspan=\"3\">n/a: %s</td></tr>\n", html.EscapeString(row.NA))
			continue
		}
		for _, p := range row.Points {
			fmt.Fprintf(&b, "<td>%s</td>", html.EscapeString(pct(p)))
		}
		if c := row.Cost; c.Known {
			fmt.Fprintf(&b, "<td>%.1f</td><td>%.0f / %.0f</td><td>%.1f ms</td></tr>\n", c.Calls, c.InputTokens, c.OutputTokens, c.LatencyMS)
		} else {
			b.WriteString("<td>n/a</td><td>n/a</td><td>n/a</td></tr>\n")
		}
	}
	b.WriteString("</table>\n<p class=\"note\">Recall is the share of planted facts (return types, line numbers, config values, exact error messages, rejected approaches, user corrections) " +
		"answered exactly when asked through compactd as ordinary turns. Summariser figures are per compaction, gap-check passes included.</p>\n")
	fmt.Fprintf(&b, "<pre>%s</pre>\n</body></html>\n", html.EscapeString(text.String()))
	_, err := io.WriteString(w, b.String())
	return err
}
