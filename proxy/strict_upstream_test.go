package proxy_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// recordingTB is a testing.TB whose Errorf is recorded instead of failing the test, so a test can
// check what the harness reports at cleanup.
type recordingTB struct {
	testing.TB
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestHarnessFailsOnStrictRefusal: the harness fails a test whose upstream refused what compactd
// forwarded, naming the route and the rule, even though compactd relayed the 400 to the client
// and the test itself checked nothing; a test that expects the refusal (ExpectRefusals) passes.
func TestHarnessFailsOnStrictRefusal(t *testing.T) {
	orphan := `{"model":"claude-fake","max_tokens":10,"messages":[{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_gone","content":"x"}]}]}`
	for _, tc := range []struct {
		name   string
		expect bool
		errs   int
	}{{"unexpected refusal fails the test", false, 1}, {"expected refusal passes", true, 0}} {
		rec := &recordingTB{}
		t.Run(tc.name, func(t *testing.T) {
			rec.TB = t
			h := newHarness(rec, fakeupstream.Options{}, func(c *proxy.Config) { c.AnthropicUpstream = c.Upstream })
			if tc.expect {
				h.fake.ExpectRefusals("unexpected `tool_use_id`")
			}
			req, _ := http.NewRequest(http.MethodPost, h.proxyURL+"/v1/messages", strings.NewReader(orphan))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("x-api-key", "sk-ant-test")
			req.Header.Set("anthropic-version", "2023-06-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("status %d, want the upstream's 400 relayed", resp.StatusCode)
			}
		})
		if len(rec.errs) != tc.errs {
			t.Fatalf("%s: harness reported %q", tc.name, rec.errs)
		}
		for _, e := range rec.errs {
			if !strings.Contains(e, "POST /v1/messages") || !strings.Contains(e, "unexpected `tool_use_id` found in `tool_result` blocks: toolu_gone") {
				t.Errorf("report %q does not name the route and the rule", e)
			}
		}
	}
}
