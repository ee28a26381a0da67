package main

import (
	"strings"
	"testing"
)

// TestDemoAgainstStrictFake runs `compactd demo`, streamed and not, end to end against its strict
// fake upstream: every turn must be accepted (before the demo answered its tool outputs' calls,
// turn 2 carried an orphan function_call_output and the strict upstream refused it) and the run
// must compact.
func TestDemoAgainstStrictFake(t *testing.T) {
	clearCompactdEnv(t)
	for _, args := range [][]string{{"demo"}, {"demo", "--stream=false"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, args...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			if !strings.Contains(stdout, "turn 8 ") || !strings.Contains(stdout, "COMPACTED") {
				t.Errorf("the demo did not run all turns or did not compact:\n%s", stdout)
			}
			checkDemoSummaries(t, stdout)
		})
	}
}

// checkDemoSummaries holds the demo's account of the summariser to what a newcomer can follow:
// each compaction either made its summariser call on its own turn or says its summary was made
// ahead, and then an earlier turn said so when it happened (speculative compaction).
func checkDemoSummaries(t *testing.T, stdout string) {
	t.Helper()
	prepared := false
	for _, line := range strings.Split(stdout, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "summary prepared ahead of the threshold ("):
			prepared = true
		case strings.HasPrefix(line, "COMPACTED ("):
			ahead := strings.HasPrefix(line, "COMPACTED (no summariser call on this turn: its summary was made ahead")
			made := strings.HasPrefix(line, "COMPACTED (1 summariser call)") ||
				(strings.Contains(line, " summariser calls)") && !strings.HasPrefix(line, "COMPACTED (0 "))
			if !made && !ahead {
				t.Errorf("a compaction line does not say where its summary came from: %q", line)
			}
			if ahead && !prepared {
				t.Errorf("a compaction says its summary was made ahead, but no earlier turn said it was prepared: %q", line)
			}
			prepared = false
		}
	}
}
