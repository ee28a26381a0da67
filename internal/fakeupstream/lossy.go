package fakeupstream

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
)

// LossySummaryPrefix starts every lossy summary.
const LossySummaryPrefix = "FAKE-SUMMARY (lossy): "

// gapCheckLead is how compactd's gap check pass opens its transcript (internal/engine/engine.go): the
// summary and ledger so far, then the replaced entries.
const gapCheckLead = "[summary and ledger so far]"

// Lossy configures LossySummaries.
type Lossy struct {
	Seed uint64
	// Keep is the chance that a detail line of the transcript makes it into a summary (0..1).
	Keep float64
	// MaxLines caps a summary's detail lines (default 40): a summary is short whatever the
	// transcript, so long sessions lose more, as they do with real summarisers.
	MaxLines int
	// GapKeep is the chance that the gap check pass reports a detail line the summary and the
	// ledger both lack (default 0.9); GapMaxLines caps its list (default 48).
	GapKeep     float64
	GapMaxLines int
}

// LossySummaries returns an Options.Summaries that summarises the way a cheap model does:
// it keeps the first sentence of every user message and only some of the details (lines of
// code, output, values), chosen by a seeded hash of the line and the transcript, so the same
// input always loses the same details and a chain of summaries erodes old facts step by step.
//
// It also plays compactd's gap check pass (a transcript opening with "[summary and ledger so
// far]"): it lists, as "- " bullets copied verbatim, detail lines of the replaced entries that the
// summary and ledger do not contain, again keeping a seeded share of them.
func LossySummaries(o Lossy) func(transcript string) string {
	if o.MaxLines <= 0 {
		o.MaxLines = 40
	}
	if o.GapKeep == 0 {
		o.GapKeep = 0.9
	}
	if o.GapMaxLines <= 0 {
		o.GapMaxLines = 48
	}
	return func(transcript string) string {
		if strings.HasPrefix(transcript, gapCheckLead) {
			return o.gapCheck(transcript)
		}
		return o.summary(transcript)
	}
}

// entry is one "[role] text" entry of a rendered transcript.
type entry struct{ role, text string }

func entries(transcript string) []entry {
	locs := entryMarker.FindAllStringSubmatchIndex(transcript, -1)
	out := make([]entry, 0, len(locs))
	for i, loc := range locs {
		end := len(transcript)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		out = append(out, entry{role: transcript[loc[2]:loc[3]], text: strings.TrimSpace(transcript[loc[1]:end])})
	}
	return out
}

// score is the line's seeded draw in [0,1): the same line in the same transcript always draws the
// same number, a different transcript (the next compaction) draws again.
func (o Lossy) score(salt string, n int, line string) float64 {
	h := sha256.New()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], o.Seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(n))
	h.Write(b[:])
	h.Write([]byte(salt))
	h.Write([]byte(line))
	return float64(binary.LittleEndian.Uint64(h.Sum(nil)[:8])>>11) / (1 << 53)
}

// detailLines returns the distinct trimmed lines of text that carry a detail: a digit, code
// punctuation or a colon. Prose without any is what a summary paraphrases anyway.
func detailLines(text string, seen map[string]bool, out []string) []string {
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "- "))
		if len(l) < 8 || len(l) > 240 || seen[l] || !strings.ContainsAny(l, "0123456789():=_") {
			continue
		}
		seen[l] = true
		out = append(out, l)
	}
	return out
}

// pick keeps the lines whose draw is below keep, at most max of them (the lowest draws), in
// their original order.
func (o Lossy) pick(salt string, n int, lines []string, keep float64, max int) []string {
	type drawn struct {
		i int
		s float64
	}
	var ds []drawn
	for i, l := range lines {
		if s := o.score(salt, n, l); s < keep {
			ds = append(ds, drawn{i, s})
		}
	}
	if len(ds) > max {
		slices.SortFunc(ds, func(a, b drawn) int {
			if a.s < b.s {
				return -1
			}
			return 1
		})
		ds = ds[:max]
	}
	slices.SortFunc(ds, func(a, b drawn) int { return a.i - b.i })
	out := make([]string, len(ds))
	for k, d := range ds {
		out[k] = lines[d.i]
	}
	return out
}

func (o Lossy) summary(transcript string) string {
	es := entries(transcript)
	var b strings.Builder
	b.WriteString(LossySummaryPrefix)
	b.WriteString(strconv.Itoa(len(es)))
	b.WriteString(" entries\n")
	seen := map[string]bool{}
	var details []string
	for _, e := range es {
		if e.role == "user" && !strings.Contains(e.text, "\n") {
			first, _, _ := strings.Cut(e.text, ". ")
			b.WriteString("- user asked: ")
			b.WriteString(firstRunes(first, 160))
			b.WriteByte('\n')
		}
		details = detailLines(e.text, seen, details)
	}
	for _, l := range o.pick("summary", len(transcript), details, o.Keep, o.MaxLines) {
		b.WriteString("- ")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return strings.TrimSpace(b.String())
}

func (o Lossy) gapCheck(transcript string) string {
	es := entries(transcript)
	if len(es) == 0 {
		return "- nothing missing"
	}
	known := es[0].text
	seen := map[string]bool{}
	var missing []string
	for _, e := range es[1:] {
		for _, l := range detailLines(e.text, seen, nil) {
			if !strings.Contains(known, l) {
				missing = append(missing, l)
			}
		}
	}
	kept := o.pick("gap", len(transcript), missing, o.GapKeep, o.GapMaxLines)
	if len(kept) == 0 {
		return "- nothing missing"
	}
	return "- " + strings.Join(kept, "\n- ")
}
