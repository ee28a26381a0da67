package proxy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// Issue 23, defect 2: a compaction that cannot make the request meaningfully smaller is not made
// — no summariser call, the request goes upstream as it came — and is counted as skipped.
func TestCompactionsThatCannotSaveAreSkipped(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		send         func(t *testing.T, h *harness) (body []byte, report string)
		upstream     dialect.Name
	}{
		{"chat: a fresh conversation whose first request is past the policy", "nothing", func(t *testing.T, h *harness) ([]byte, string) {
			msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are a careful coding agent."),
				openai.UserMessage("NEW " + strings.Repeat("please refactor the parser module ", 900))}
			var hr *http.Response
			if _, err := h.client.Chat.Completions.New(context.Background(), chatParams(msgs), option.WithResponseInto(&hr)); err != nil {
				t.Fatal(err)
			}
			body, _ := json.Marshal(chatParams(msgs))
			return body, hr.Header.Get("X-Compactd-Compaction")
		}, dialect.Chat},
		{"responses: user messages the retain budget keeps, above the threshold", "min_saving", func(t *testing.T, h *harness) ([]byte, string) {
			input := []map[string]any{
				{"type": "message", "role": "user", "content": "U1 " + strings.Repeat("please refactor the parser module ", 600)},
				{"type": "message", "role": "assistant", "content": "ok"},
				{"type": "message", "role": "user", "content": "U2 " + strings.Repeat("and now the lexer as well ", 600)},
			}
			var hr *http.Response
			if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
				option.WithJSONSet("input", input), option.WithResponseInto(&hr)); err != nil {
				t.Fatal(err)
			}
			body, _ := json.Marshal(map[string]any{"model": testModel, "input": input})
			return body, hr.Header.Get("X-Compactd-Compaction")
		}, dialect.Responses},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			h := newHarness(t, fakeupstream.Options{}, withRegistry(reg, func(c *proxy.Config) {
				c.Policy = compact.Policy{Threshold: 3_000}
				c.Speculative.Fraction = -1
			}))
			body, report := tc.send(t, h)
			if n := len(h.upstream(fakeupstream.KindSummary)); n != 0 {
				t.Errorf("%d summariser calls for a compaction that could not save anything worth it", n)
			}
			if report != "" {
				t.Errorf("X-Compactd-Compaction: %q, want none", report)
			}
			reqs := h.upstream(tc.upstream)
			if len(reqs) != 1 {
				t.Fatalf("%d upstream requests", len(reqs))
			}
			key := "messages"
			if tc.upstream == dialect.Responses {
				key = "input"
			}
			if got, want := gjson.GetBytes(reqs[0].Body, key+".#").Int(), gjson.GetBytes(body, key+".#").Int(); got != want {
				t.Errorf("the upstream got %d %s, the client sent %d", got, key, want)
			}
			api := string(tc.upstream) // the api label is the dialect's name
			if v := value(t, reg, "compactd_compactions_skipped_total", "api", api, "reason", tc.reason); v != 1 {
				t.Errorf("compactd_compactions_skipped_total{reason=%q} = %v, want 1", tc.reason, v)
			}
			if v := value(t, reg, "compactd_compactions_total", "api", api, "trigger", "policy", "outcome", "ok"); v != 0 {
				t.Errorf("counted as %v successful compactions", v)
			}
		})
	}
}

// Issue 22, defect 11: a summariser answer is never sealed at any size. One past its token budget
// is cut (and counted), and a compaction whose summary is still no smaller than what it would
// replace is not made: the turn goes on uncompacted. An answer larger than any summary within
// the output budget can be is not even read: the failure policy applies (passthrough here).
func TestSummaryIsBoundedAndNeverSealedLarger(t *testing.T) {
	for _, tc := range []struct {
		name      string
		summary   int // bytes
		truncated float64
		reason    string
		warning   bool
	}{
		{"200 KB: cut to its budget, still larger than the conversation", 200 << 10, 1, "not_smaller", false},
		{"8 MB: not read, the failure policy applies", 8 << 20, 0, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			huge := strings.Repeat("- the handler returns positioned errors now\n", tc.summary/44+1)
			reg := prometheus.NewRegistry()
			h := newHarness(t, fakeupstream.Options{Summaries: func(string) string { return huge }}, withRegistry(reg, retain(1000), func(c *proxy.Config) {
				c.FailurePolicies = proxy.FailurePolicies{dialect.Responses: proxy.PolicyPassthrough}
				c.Speculative.Fraction = -1
			}))
			input := toAny(history(4, 400)) // ~4k tokens
			var hr *http.Response
			resp, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
				option.WithJSONSet("input", input), threshold(2000), option.WithResponseInto(&hr))
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range resp.Output {
				if o.Type == "compaction" {
					t.Fatalf("a compaction was sealed with a %d-byte summary (%d bytes of item)", len(huge), len(o.RawJSON()))
				}
			}
			clientBody, _ := json.Marshal(map[string]any{"model": testModel, "input": input})
			if up := h.upstream(dialect.Responses); len(up) != 1 || len(up[0].Body) > len(clientBody)+200 {
				t.Fatalf("the upstream got %d requests, the last of %d bytes against the client's %d", len(up), len(up[len(up)-1].Body), len(clientBody))
			}
			if v := value(t, reg, "compactd_summaries_truncated_total", "api", "responses"); v != tc.truncated {
				t.Errorf("summaries truncated = %v, want %v", v, tc.truncated)
			}
			if tc.reason != "" {
				if v := value(t, reg, "compactd_compactions_skipped_total", "api", "responses", "reason", tc.reason); v != 1 {
					t.Errorf("compactd_compactions_skipped_total{reason=%q} = %v, want 1", tc.reason, v)
				}
			}
			if got := hr.Header.Get("X-Compactd-Warning") != ""; got != tc.warning {
				t.Errorf("X-Compactd-Warning present = %v, want %v", got, tc.warning)
			}
		})
	}
}
