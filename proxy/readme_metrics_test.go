package proxy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/dialect"
)

// metricName is a metric name as the sources register it: the first argument of
// internal/metrics' counter/histogram helpers, or a collector's Name option.
var metricName = regexp.MustCompile(`(?:(?:counter|histogram|gauge)\(|Name: )"((?:compactd|gen_ai)_[a-z_]+)"`)

// TestREADMEDocumentsEveryMetric: every metric compactd registers has a row in the README's
// metrics table (four were missing: auth failures, in-flight body refusals, speculation and
// summariser fallbacks). Read from the sources (internal/metrics, where compactd's metrics are
// defined, and this package's, which defines a few of its own), since a labelled metric is
// gathered only once a label value exists.
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
	defs, _ := filepath.Glob("../internal/metrics/*.go")
	files = append(files, defs...)
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

// apiSelector is an api label matcher in PromQL or a series selector: api="…", api=~"…", api!="…".
var apiSelector = regexp.MustCompile(`\bapi\s*(?:=~|!~|!=|=)\s*\\?"([^"\\]*)`)

// TestAPILabelValuesAreDialectNames: the api label is the dialect's name, one value per dialect
// (internal/dialect), and every place that names its values says so: the README's metrics table,
// and every api matcher in the Grafana dashboard, the alert rules and their tests (which still
// named openai and anthropic when compactd began writing responses and messages).
func TestAPILabelValuesAreDialectNames(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "| `compactd_compactions_total` |") {
			row = line
		}
	}
	for _, n := range dialect.All {
		if !strings.Contains(row, "`"+string(n)+"`") {
			t.Errorf("README's compactd_compactions_total row does not name the api value %q", n)
		}
	}
	for _, old := range []string{"`openai`", "`anthropic`"} {
		if strings.Contains(row, old) {
			t.Errorf("README's compactd_compactions_total row names the api value %s", old)
		}
	}
	files, _ := filepath.Glob("../deploy/grafana/dashboards/*.json")
	rules, _ := filepath.Glob("../deploy/prometheus/*.yml")
	files = append(files, rules...)
	if len(files) < 3 {
		t.Fatalf("found only %v", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range apiSelector.FindAllStringSubmatch(string(b), -1) {
			for _, v := range strings.Split(m[1], "|") {
				if !dialect.Name(v).Valid() {
					t.Errorf("%s: %s selects api %q, which is no dialect's name (want one of %q)", f, m[0], v, dialect.All)
				}
			}
		}
		for _, old := range []string{"openai = Responses", "anthropic = Messages"} {
			if strings.Contains(string(b), old) {
				t.Errorf("%s still describes the api label as %q", f, old)
			}
		}
	}
}
