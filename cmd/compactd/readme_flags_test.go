package main

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// Every serve flag is in the README's configuration reference, so the reference cannot fall
// behind the binary (a flag added without its row fails here). Deprecated spellings are listed
// in the README's table of renamed settings and are not required in the reference.
func TestREADMEDocumentsEveryServeFlag(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// Only the configuration reference's table rows count: a flag named in passing elsewhere
	// (--agent-summarizer-model was, in the Claude Code section) is not documented.
	ref := string(readme)
	start := strings.Index(ref, "\n## Configuration reference")
	if start < 0 {
		t.Fatal("README.md has no \"## Configuration reference\" section")
	}
	ref = ref[start+1:]
	if end := strings.Index(ref[3:], "\n## "); end >= 0 {
		ref = ref[:end+3]
	}
	var rows strings.Builder
	for _, line := range strings.Split(ref, "\n") {
		if strings.HasPrefix(line, "|") {
			rows.WriteString(line + "\n")
		}
	}
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.flags(fs)
	var missing []string
	fs.VisitAll(func(f *flag.Flag) {
		if strings.Contains(f.Usage, "deprecated") {
			return
		}
		if !strings.Contains(rows.String(), "`--"+f.Name+"`") {
			missing = append(missing, "--"+f.Name)
		}
	})
	if len(missing) > 0 {
		t.Errorf("serve flags missing from README.md's configuration reference (as `--name`): %s", strings.Join(missing, " "))
	}
}
