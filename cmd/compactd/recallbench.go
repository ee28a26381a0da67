package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/compactd/compactd/bench/recallbench"
)

// runRecallBench runs the recall benchmark and prints its Markdown table. It needs no network and
// no keys: the archive is a temporary SQLite file under a throwaway key.
func runRecallBench(args []string) error {
	d := recallbench.DefaultConfig()
	fs := flag.NewFlagSet("recall-bench", flag.ContinueOnError)
	seed := fs.Uint64("seed", d.Seed, "RNG seed (the same seed gives the same sessions and figures)")
	checkpoints := fs.String("compactions", joinInts(d.Checkpoints), "comma-separated compaction counts to report")
	steps := fs.Int("steps", d.Steps, "agent steps per compaction round")
	facts := fs.Int("facts", d.FactsPerRound, "planted facts per round")
	budget := fs.Int("ledger-budget", d.LedgerBudget, "facts ledger budget per compaction, bytes")
	topK := fs.Int("k", d.TopK, "recall hits per query")
	excerpt := fs.Int("excerpt-bytes", d.ExcerptBytes, "bytes per recall excerpt")
	excerpts := fs.String("excerpts", recallbench.ExcerptArchive, "what counts as recalled: archive (the archive's excerpts, what the recall tool returns) or segment (the answer anywhere in a hit's segment: the search's upper bound)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// recallbench reads 0 as "use the default": a 0 here would silently not be what was asked.
	if *steps <= 0 || *facts <= 0 || *budget <= 0 || *topK <= 0 || *excerpt <= 0 {
		return usageErrorf("recall-bench", "--steps, --facts, --ledger-budget, -k and --excerpt-bytes must be positive")
	}
	cfg := recallbench.Config{Seed: *seed, Steps: *steps, FactsPerRound: *facts, LedgerBudget: *budget,
		TopK: *topK, ExcerptBytes: *excerpt, Excerpts: *excerpts}
	if *excerpts != recallbench.ExcerptArchive && *excerpts != recallbench.ExcerptSegment {
		return usageErrorf("recall-bench", "--excerpts: want %s or %s", recallbench.ExcerptArchive, recallbench.ExcerptSegment)
	}
	for _, s := range strings.Split(*checkpoints, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return usageErrorf("recall-bench", "--compactions: %q is not a positive count", s)
		}
		cfg.Checkpoints = append(cfg.Checkpoints, n)
	}
	rs, err := recallbench.Run(context.Background(), cfg)
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(os.Stdout, recallbench.Markdown(cfg, rs))
	return err
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
