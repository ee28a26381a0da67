package eval

// pool merges the single-seed reports of one setting into rows: counts summed (every seed asks
// as many facts, so the pooled recall is the seeds' mean), each point's spread over the seeds,
// the lowest per-kind score, and the summariser's cost and the compaction ratio over every
// compaction of every seed. The answers stay in the single-seed reports.
func pool(runs []*Report) []Row {
	if len(runs) == 0 {
		return nil
	}
	out := make([]Row, len(runs[0].Rows))
	for i := range out {
		row := Row{Variant: runs[0].Rows[i].Variant}
		var costs []Cost
		var sizes ratioSum
		for _, r := range runs {
			src := r.Rows[i]
			if src.NA != "" {
				row.NA = src.NA
			}
			costs = append(costs, src.Cost)
			sizes.add(src.Ratio)
			row.ExtraCompactions += src.ExtraCompactions
			row.QuestionCompactions += src.QuestionCompactions
		}
		row.Cost, row.Ratio = poolCost(costs), sizes.ratio()
		if row.NA == "" {
			row.Points = poolPoints(runs, i)
		}
		out[i] = row
	}
	return out
}

func poolPoints(runs []*Report, row int) []Point {
	n := len(runs[0].Rows[row].Points)
	pts := make([]Point, n)
	for j := range pts {
		p := Point{Compactions: runs[0].Rows[row].Points[j].Compactions, ByKind: map[string]int{}, KindFacts: map[string]int{},
			GrepByKind: map[string]int{}, MinByKind: map[string]Score{}, Spread: &Spread{Seeds: len(runs), Min: 1}}
		for _, r := range runs {
			q := r.Rows[row].Points[j]
			p.Facts += q.Facts
			p.Correct += q.Correct
			p.Grep += q.Grep
			p.Spread.Min, p.Spread.Max = min(p.Spread.Min, q.Recall), max(p.Spread.Max, q.Recall)
			for k, v := range q.KindFacts {
				p.KindFacts[k] += v
				got := Score{Correct: q.ByKind[k], Facts: v}
				if lo, ok := p.MinByKind[k]; !ok || got.Correct*lo.Facts < lo.Correct*got.Facts {
					p.MinByKind[k] = got
				}
			}
			for k, v := range q.ByKind {
				p.ByKind[k] += v
			}
			for k, v := range q.GrepByKind {
				p.GrepByKind[k] += v
			}
		}
		p.score()
		pts[j] = p
	}
	return pts
}

// poolCost averages per-compaction costs over all the runs' compactions.
func poolCost(cs []Cost) Cost {
	out := Cost{Known: len(cs) > 0}
	var calls, in, outT, lat float64
	for _, c := range cs {
		out.Known = out.Known && c.Known
		n := float64(c.Compactions)
		out.Compactions += c.Compactions
		calls += c.Calls * n
		in += c.InputTokens * n
		outT += c.OutputTokens * n
		lat += c.LatencyMS * n
	}
	if !out.Known {
		return Cost{}
	}
	if n := float64(out.Compactions); n > 0 {
		out.Calls, out.InputTokens, out.OutputTokens, out.LatencyMS = calls/n, in/n, outT/n, lat/n
	}
	return out
}

// ratioSum pools Ratios: the mean and the sizes weighted by compactions, the extremes of all.
// One unknown Ratio (an external compactd) makes the pool unknown.
type ratioSum struct {
	r                   Ratio
	mean, before, after float64
	unknown             bool
}

func (s *ratioSum) add(r Ratio) {
	if !r.Known {
		s.unknown = true
		return
	}
	if r.Compactions == 0 {
		return
	}
	if s.r.Compactions == 0 {
		s.r.Min, s.r.Max = r.Min, r.Max
	}
	n := float64(r.Compactions)
	s.r.Compactions += r.Compactions
	s.mean += r.Mean * n
	s.before += r.TokensBefore * n
	s.after += r.TokensAfter * n
	s.r.Min, s.r.Max = min(s.r.Min, r.Min), max(s.r.Max, r.Max)
}

func (s *ratioSum) ratio() Ratio {
	if s.unknown {
		return Ratio{}
	}
	out := s.r
	out.Known = true
	if n := float64(out.Compactions); n > 0 {
		out.Mean, out.TokensBefore, out.TokensAfter = s.mean/n, s.before/n, s.after/n
	}
	return out
}
