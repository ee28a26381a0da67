package proxy_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// One threshold rule on every route: a request compacts when its input exceeds the threshold,
// never at it (compact.Over). The Messages route used to compact at it. Each case runs fresh
// servers (the memo would remember a compaction) at thresholds that close in on the request's
// token count as compactd counts it (tokens_before of a transparent compaction): at that count
// it must not compact, one below it it must.
func TestThresholdRuleIsTheSameOnEveryRoute(t *testing.T) {
	msgs := func(system bool) []map[string]any {
		var out []map[string]any
		if system {
			out = append(out, map[string]any{"role": "system", "content": "You are a careful coding agent."})
		}
		for i := range 6 {
			out = append(out,
				map[string]any{"role": "user", "content": fmt.Sprintf("turn %d: %s", i, strings.Repeat("please refactor the parser ", 60))},
				map[string]any{"role": "assistant", "content": fmt.Sprintf("done %d: %s", i, strings.Repeat("I changed parse.go line 42 ", 50))})
		}
		return append(out, map[string]any{"role": "user", "content": "and now the tests"})
	}
	cases := []struct {
		route dialect.Name
		path  string
		body  map[string]any
	}{
		{dialect.Responses, "/v1/responses", map[string]any{"model": testModel, "input": history(6, 300)}},
		{dialect.Messages, "/v1/messages", map[string]any{"model": testModel, "max_tokens": 256, "messages": msgs(false)}},
		{dialect.Chat, "/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs(true)}},
	}
	tokensBefore := regexp.MustCompile(`tokens_before=(\d+)`)
	send := func(t *testing.T, route dialect.Name, path string, body []byte, threshold int) string {
		t.Helper()
		h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) {
			c.AnthropicUpstream = c.Upstream
			c.Policy = compact.Policy{Routes: map[dialect.Name]int{route: threshold}}
			c.RetainTokens, c.Speculative.Fraction = 32, -1
		})
		req, _ := http.NewRequest(http.MethodPost, h.proxyURL+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-test")
		req.Header.Set("X-Api-Key", "sk-test")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s at threshold %d: HTTP %d %s", path, threshold, resp.StatusCode, data)
		}
		return resp.Header.Get("X-Compactd-Compaction")
	}
	for _, tc := range cases {
		t.Run(string(tc.route), func(t *testing.T) {
			body := mustJSON(t, tc.body)
			// Far from a threshold compactd estimates; near one it counts exactly. Set the
			// threshold to the count the last compaction reported until a run does not compact:
			// that threshold is then the request's exact count.
			threshold, compacted := 1000, 0
			for range 5 {
				state := send(t, tc.route, tc.path, body, threshold)
				if !strings.HasPrefix(state, "compacted;") {
					break
				}
				compacted++
				m := tokensBefore.FindStringSubmatch(state)
				if m == nil {
					t.Fatalf("X-Compactd-Compaction %q has no tokens_before", state)
				}
				total, _ := strconv.Atoi(m[1])
				if total <= threshold {
					t.Fatalf("a request of %d tokens compacted at threshold %d: %q", total, threshold, state)
				}
				threshold = total
			}
			if compacted == 0 {
				t.Fatal("far over the threshold, the request did not compact")
			}
			if state := send(t, tc.route, tc.path, body, threshold-1); !strings.HasPrefix(state, "compacted;") {
				t.Errorf("a request of %d tokens did not compact at threshold %d: %q", threshold, threshold-1, state)
			}
		})
	}
}
