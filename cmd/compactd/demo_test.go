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
		})
	}
}
