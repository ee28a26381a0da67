package session

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/compactd/compactd/internal/tokenize"
)

// GapChecker hunts one category of information in an excerpt of a raw session log and returns
// its findings, one self-contained statement each. The reduction keeps user messages and
// reasoning but drops tool output; gap checkers read the tool output back in, which is where
// decisions, error fixes and exact values hide.
type GapChecker interface {
	Check(ctx context.Context, category, rawExcerpt string) ([]string, error)
}

// GapCategories are the categories checkers hunt, in the order findings are rendered. With more
// checkers than categories the categories cycle and checkers sharing one split the log's chunks.
var GapCategories = []string{
	"decisions and rejected alternatives",
	"errors and their fixes",
	"exact values, paths and names",
}

// GapCheckOptions sizes a gap check.
type GapCheckOptions struct {
	// Checkers is the number of checkers run in parallel (the --gap-check N flag).
	Checkers int
	// ChunkTokens bounds each excerpt handed to a checker (default 24000).
	ChunkTokens int
	// OutputTokens bounds each tool output in the rendered log (default 800).
	OutputTokens int
}

func (o GapCheckOptions) withDefaults() GapCheckOptions {
	if o.ChunkTokens <= 0 {
		o.ChunkTokens = 24000
	}
	if o.OutputTokens <= 0 {
		o.OutputTokens = 800
	}
	if o.OutputTokens > o.ChunkTokens/2 {
		o.OutputTokens = max(o.ChunkTokens/2, 1)
	}
	return o
}

// RenderRaw renders sessions as compact text blocks, one per event, for gap checkers: everything
// the reduction dropped (tool inputs and outputs) is back in, each output middle-truncated to
// outputTokens so one huge file dump cannot crowd out the rest.
func RenderRaw(sessions []Session, outputTokens int) []string {
	var blocks []string
	for _, s := range sessions {
		blocks = append(blocks, fmt.Sprintf("=== %s session %s (cwd %s)\n", s.Format, orDash(s.ID), orDash(s.CWD)))
		for _, e := range s.Events {
			var b strings.Builder
			switch e.Kind {
			case EventUser:
				b.WriteString("[user]\n" + e.Text)
			case EventAssistant:
				b.WriteString("[assistant]\n" + e.Text)
			case EventReasoning:
				b.WriteString("[reasoning]\n" + e.Text)
			case EventCompaction:
				b.WriteString("[compaction]\n" + e.Text)
			case EventError:
				b.WriteString("[error]\n" + e.Text)
			case EventTool:
				b.WriteString("[tool " + e.Tool + "]")
				if e.HasExit {
					fmt.Fprintf(&b, " exit=%d", e.ExitCode)
				} else if e.Failed {
					b.WriteString(" failed")
				}
				b.WriteString("\n")
				in := e.Command
				if in == "" {
					in = e.Input
				}
				b.WriteString(boundTokens(in, outputTokens))
				if e.HasResult && strings.TrimSpace(e.Output) != "" {
					b.WriteString("\n[output]\n" + boundTokens(e.Output, outputTokens))
				}
			}
			b.WriteString("\n")
			blocks = append(blocks, b.String())
		}
	}
	return blocks
}

// boundTokens middle-truncates s to n tokens, cutting bytes first so a multi-megabyte output is
// not tokenised in full only to be thrown away (tokenize.Bound).
func boundTokens(s string, n int) string {
	if n <= 0 {
		return s
	}
	return tokenize.Bound(s, n)
}

// ChunkRaw packs rendered blocks into excerpts of at most budget tokens, breaking only between
// blocks (a block larger than the budget becomes its own excerpt).
func ChunkRaw(blocks []string, budget int) []string {
	var chunks []string
	var cur strings.Builder
	used := 0
	for _, blk := range blocks {
		n := CountTokens(blk)
		if used > 0 && used+n > budget {
			chunks = append(chunks, cur.String())
			cur.Reset()
			used = 0
		}
		cur.WriteString(blk)
		used += n
	}
	if used > 0 {
		chunks = append(chunks, cur.String())
	}
	return chunks
}

// GapCheck runs opts.Checkers checkers in parallel over the sessions' raw log and returns their
// merged findings. Checker i hunts GapCategories[i%3]; checkers sharing a category take turns over
// the chunks, so more checkers means more parallelism, never repeated calls. It fails on the first
// checker error (cancelling the others): partial findings would silently look like complete ones.
func GapCheck(ctx context.Context, checker GapChecker, sessions []Session, opts GapCheckOptions) ([]Finding, error) {
	opts = opts.withDefaults()
	if opts.Checkers <= 0 {
		return nil, nil
	}
	chunks := ChunkRaw(RenderRaw(sessions, opts.OutputTokens), opts.ChunkTokens)
	ncat := len(GapCategories)
	// results[c][j]: findings of category c in chunk j; each slot has exactly one writer.
	results := make([][][]string, ncat)
	for c := range results {
		results[c] = make([][]string, len(chunks))
	}
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < opts.Checkers; i++ {
		c, rank := i%ncat, i/ncat
		peers := (opts.Checkers - c + ncat - 1) / ncat // checkers sharing category c
		g.Go(func() error {
			for j := rank; j < len(chunks); j += peers {
				found, err := checker.Check(gctx, GapCategories[c], chunks[j])
				if err != nil {
					return fmt.Errorf("gap check %q, chunk %d/%d: %w", GapCategories[c], j+1, len(chunks), err)
				}
				results[c][j] = found
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var merged []Finding
	seen := map[string]bool{}
	for c, perChunk := range results {
		for _, found := range perChunk {
			for _, f := range found {
				text, key := normaliseFinding(f)
				if key == "" || seen[key] {
					continue
				}
				seen[key] = true
				merged = append(merged, Finding{Category: GapCategories[c], Text: text})
			}
		}
	}
	return merged, nil
}

var (
	bulletRe = regexp.MustCompile(`^\s*(?:[-*•+]|\d+[.)])\s+`)
	spaceRe  = regexp.MustCompile(`\s+`)
	noneRe   = regexp.MustCompile(`^(?i)(none|nothing|n/?a|no findings?|nothing (found|missing))\.?$`)
)

// normaliseFinding strips list markers and surrounding whitespace, collapses inner whitespace and
// derives the de-duplication key (case- and trailing-punctuation-insensitive). "None" answers
// yield an empty key and are dropped.
func normaliseFinding(s string) (text, key string) {
	text = strings.TrimSpace(bulletRe.ReplaceAllString(strings.TrimSpace(s), ""))
	text = spaceRe.ReplaceAllString(text, " ")
	if text == "" || noneRe.MatchString(text) {
		return "", ""
	}
	key = strings.ToLower(strings.TrimRight(text, ".;: "))
	return text, key
}

// ParseFindingLines splits a checker's free-text answer into findings: bulleted or numbered lines
// when there are any, otherwise every non-empty line.
func ParseFindingLines(answer string) []string {
	var bulleted, plain []string
	for _, l := range strings.Split(answer, "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "#") || strings.HasPrefix(t, "```") {
			continue
		}
		if bulletRe.MatchString(t) {
			bulleted = append(bulleted, bulletRe.ReplaceAllString(t, ""))
		} else {
			plain = append(plain, t)
		}
	}
	if len(bulleted) > 0 {
		return bulleted
	}
	return plain
}
