package console

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Charts are inline SVG rendered by the templates from numbers computed here: rectangles,
// polylines and a few labels, no chart library. Everything in them is a number or one of
// compactd's own words, and html/template escapes even those.

type chart struct {
	W, H   int
	Bars   []bar
	Lines  []line
	Labels []label
	Legend []legendItem
	Title  string // the SVG's accessible title
}

type bar struct {
	X, Y, W, H float64
	Class      string
	Tip        string
}

type line struct {
	Points string
	Class  string
}

type label struct {
	X, Y  float64
	Text  string
	Class string
}

type legendItem struct{ Class, Text string }

const (
	chartW, chartH = 560, 160
	padL, padR     = 56, 8
	padT, padB     = 10, 22
)

func plotW() float64 { return chartW - padL - padR }
func plotH() float64 { return chartH - padT - padB }

// axis adds the y-axis labels (0 and top) and the base line.
func (c *chart) axis(top float64, unit func(float64) string) {
	c.Labels = append(c.Labels,
		label{X: padL - 6, Y: padT + 4, Text: unit(top), Class: "axis"},
		label{X: padL - 6, Y: padT + plotH() + 4, Text: unit(0), Class: "axis"})
	c.Lines = append(c.Lines, line{Points: fmt.Sprintf("%d,%.1f %d,%.1f", padL, padT+plotH(), chartW-padR, padT+plotH()), Class: "base"})
}

// niceTop is the smallest of 1, 2 or 5 times a power of ten at or above v (1 when v <= 0).
func niceTop(v float64) float64 {
	if v <= 0 {
		return 1
	}
	m := math.Pow(10, math.Floor(math.Log10(v)))
	for _, f := range []float64{1, 2, 5, 10} {
		if f*m >= v {
			return f * m
		}
	}
	return 10 * m
}

func tokens(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// tokenChart is a conversation's compactions, each a pair of bars: tokens before and after.
func tokenChart(before, after []float64) *chart {
	c := &chart{W: chartW, H: chartH, Title: "Tokens before and after each compaction",
		Legend: []legendItem{{"before", "tokens before"}, {"after", "tokens after"}}}
	top := niceTop(slices.Max(before))
	c.axis(top, tokens)
	n := float64(len(before))
	slot := plotW() / n
	bw := min(28, slot*0.35)
	for i := range before {
		x := padL + slot*float64(i) + slot/2
		for j, v := range []float64{before[i], after[i]} {
			h := plotH() * v / top
			cls := "before"
			if j == 1 {
				cls = "after"
			}
			c.Bars = append(c.Bars, bar{X: x - bw + float64(j)*bw, Y: padT + plotH() - h, W: bw - 1, H: h, Class: cls,
				Tip: fmt.Sprintf("compaction %d: %s tokens %s", i+1, tokens(v), cls)})
		}
		c.Labels = append(c.Labels, label{X: x, Y: chartH - 6, Text: fmt.Sprintf("#%d", i+1), Class: "x"})
	}
	return c
}

// latencyChart is the recent summarisations, one bar each, failed ones marked.
func latencyChart(s []LatencySample) *chart {
	c := &chart{W: chartW, H: chartH, Title: "Recent summarisations: latency",
		Legend: []legendItem{{"ok", "summarisation"}, {"bad", "failed"}}}
	var top float64
	for _, x := range s {
		top = max(top, x.Took.Seconds())
	}
	top = niceTop(top)
	c.axis(top, func(v float64) string { return fmt.Sprintf("%gs", v) })
	if len(s) == 0 {
		c.Labels = append(c.Labels, label{X: chartW / 2, Y: chartH / 2, Text: "no summarisation yet", Class: "empty"})
		return c
	}
	slot := plotW() / float64(max(len(s), 16))
	for i, x := range s {
		h := max(1, plotH()*x.Took.Seconds()/top)
		cls := "ok"
		if x.Failed {
			cls = "bad"
		}
		c.Bars = append(c.Bars, bar{X: padL + slot*float64(i) + 1, Y: padT + plotH() - h, W: max(1, slot-2), H: h, Class: cls,
			Tip: fmt.Sprintf("%s at %s", x.Took.Round(time.Millisecond), x.At.UTC().Format("15:04:05"))})
	}
	return c
}

// historyCharts are the in-flight compactions and the body budget in use over the last minutes.
func historyCharts(l Live) (compacting, budget *chart) {
	compacting = &chart{W: chartW, H: chartH, Title: "Compactions in flight", Legend: []legendItem{{"series", "in flight"}}}
	budget = &chart{W: chartW, H: chartH, Title: "Body budget in use", Legend: []legendItem{{"series2", "bytes in flight"}}}
	pts := l.History
	var topC, topB float64
	for _, p := range pts {
		topC, topB = max(topC, float64(p.Compacting)), max(topB, float64(p.BodyBytes))
	}
	topC = niceTop(max(topC, 1))
	if l.BodyLimit > 0 {
		topB = float64(l.BodyLimit)
	} else {
		topB = niceTop(topB)
	}
	compacting.axis(topC, func(v float64) string { return fmt.Sprintf("%.0f", v) })
	budget.axis(topB, func(v float64) string { return bytesShort(v) })
	if len(pts) < 2 {
		for _, c := range []*chart{compacting, budget} {
			c.Labels = append(c.Labels, label{X: chartW / 2, Y: chartH / 2, Text: "collecting…", Class: "empty"})
		}
		return
	}
	t0, t1 := pts[0].At, pts[len(pts)-1].At
	span := max(t1.Sub(t0).Seconds(), 1)
	var pc, pb strings.Builder
	for _, p := range pts {
		x := padL + plotW()*p.At.Sub(t0).Seconds()/span
		fmt.Fprintf(&pc, "%.1f,%.1f ", x, padT+plotH()*(1-float64(p.Compacting)/topC))
		fmt.Fprintf(&pb, "%.1f,%.1f ", x, padT+plotH()*(1-float64(p.BodyBytes)/topB))
	}
	compacting.Lines = append(compacting.Lines, line{Points: strings.TrimSpace(pc.String()), Class: "series"})
	budget.Lines = append(budget.Lines, line{Points: strings.TrimSpace(pb.String()), Class: "series2"})
	ago := fmt.Sprintf("last %s", t1.Sub(t0).Round(time.Second))
	compacting.Labels = append(compacting.Labels, label{X: chartW - padR, Y: chartH - 6, Text: ago, Class: "xr"})
	budget.Labels = append(budget.Labels, label{X: chartW - padR, Y: chartH - 6, Text: ago, Class: "xr"})
	return
}

func bytesShort(v float64) string {
	switch {
	case v >= 1<<30:
		return fmt.Sprintf("%.1fG", v/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%.0fM", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.0fK", v/(1<<10))
	}
	return fmt.Sprintf("%.0f", v)
}

// percentiles of the samples' latencies: p50, p95, max.
func percentiles(s []LatencySample) (p50, p95, top time.Duration) {
	if len(s) == 0 {
		return 0, 0, 0
	}
	d := make([]time.Duration, len(s))
	for i, x := range s {
		d[i] = x.Took
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return at(0.5), at(0.95), d[len(d)-1]
}
