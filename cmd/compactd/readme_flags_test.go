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
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.flags(fs)
	var missing []string
	fs.VisitAll(func(f *flag.Flag) {
		if strings.Contains(f.Usage, "deprecated") {
			return
		}
		if !strings.Contains(string(readme), "`--"+f.Name+"`") {
			missing = append(missing, "--"+f.Name)
		}
	})
	if len(missing) > 0 {
		t.Errorf("serve flags missing from README.md's configuration reference (as `--name`): %s", strings.Join(missing, " "))
	}
}
