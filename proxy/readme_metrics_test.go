package proxy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// metricName is a metric name as this package's sources register it: the first argument of the
// counter/histogram helpers, or a collector's Name option.
var metricName = regexp.MustCompile(`(?:(?:counter|histogram|gauge)\(|Name: )"((?:compactd|gen_ai)_[a-z_]+)"`)

// TestREADMEDocumentsEveryMetric: every metric compactd registers has a row in the README's
// metrics table (four were missing: auth failures, in-flight body refusals, speculation and
// summariser fallbacks). Read from the sources, since a labelled metric is gathered only once a
// label value exists.
func TestREADMEDocumentsEveryMetric(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows strings.Builder
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "| `compactd_") || strings.HasPrefix(line, "| `gen_ai_") {
			rows.WriteString(line + "\n")
		}
	}
	files, _ := filepath.Glob("*.go")
	names := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range metricName.FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
		}
	}
	if len(names) < 20 {
		t.Fatalf("found only %d metric names in the sources", len(names))
	}
	for name := range names {
		if !strings.Contains(rows.String(), "`"+name+"`") {
			t.Errorf("metric %s has no row in README.md's metrics table", name)
		}
	}
}
