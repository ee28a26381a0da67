package proxy_test

// Helpers for .ci/prometheus-e2e.sh. Both tests skip unless the script sets their variables:
// TestE2EDrive runs a scripted conversation with compactions against a running compactd;
// TestE2EPromQL runs every PromQL expression of the Grafana dashboards and the loaded alert rules
// through a running Prometheus's HTTP API.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestE2EDrive: COMPACTD_E2E_PROXY is compactd's base URL (in front of `compactd fake-upstream`).
func TestE2EDrive(t *testing.T) {
	base := os.Getenv("COMPACTD_E2E_PROXY")
	if base == "" {
		t.Skip("COMPACTD_E2E_PROXY not set (run by .ci/prometheus-e2e.sh)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("sk-e2e"), option.WithMaxRetries(0))
	params := responses.ResponseNewParams{Model: "gpt-e2e"}

	var items []any
	for _, it := range history(6, 400) {
		items = append(items, it)
	}
	for round := 0; round < 3; round++ {
		// A threshold compaction (JSON), then the handoff of its item on the next turn.
		resp, err := client.Responses.New(ctx, params, option.WithJSONSet("input", items), threshold(2000))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Output[0].Type != "compaction" {
			t.Fatalf("round %d: no compaction item", round)
		}
		next := append(append([]any{}, items...), json.RawMessage(resp.Output[0].RawJSON()),
			map[string]any{"type": "message", "role": "user", "content": "continue"})
		if _, err := client.Responses.New(ctx, params, option.WithJSONSet("input", next)); err != nil {
			t.Fatal(err)
		}
		// A streamed threshold compaction.
		s := client.Responses.NewStreaming(ctx, params, option.WithJSONSet("input", items), threshold(2000))
		for s.Next() {
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		// The compact endpoint and a compaction_trigger turn (what Codex CLI sends).
		if err := client.Post(ctx, "responses/compact", map[string]any{"model": "gpt-e2e", "input": items}, nil); err != nil {
			t.Fatal(err)
		}
		trig := append(append([]any{}, items...), map[string]any{"type": "compaction_trigger"})
		s = client.Responses.NewStreaming(ctx, params, option.WithJSONSet("input", trig))
		for s.Next() {
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		// A relabelled item: rejected as tampered.
		var item map[string]any
		_ = json.Unmarshal([]byte(resp.Output[0].RawJSON()), &item)
		item["id"] = "cmp_0123456789abcdef0123456789abcdef"
		if _, err := client.Responses.New(ctx, params, option.WithJSONSet("input", []any{item, map[string]any{"type": "message", "role": "user", "content": "hi"}})); err == nil {
			t.Fatal("tampered item accepted")
		}
		// A plain Messages turn, for the Anthropic upstream series.
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/messages",
			strings.NewReader(`{"model":"claude-e2e","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Api-Key", "sk-ant-e2e")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Fatalf("/v1/messages: %d", r.StatusCode)
		}
	}
}

// promResult is the part of a Prometheus API answer the check reads.
type promResult struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
		Groups     []struct {
			Rules []struct {
				Name      string `json:"name"`
				Query     string `json:"query"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"data"`
}

func promGet(t *testing.T, base, path string, q url.Values) promResult {
	t.Helper()
	r, err := http.Get(base + path + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var pr promResult
	if err := json.NewDecoder(r.Body).Decode(&pr); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pr
}

// Grafana's built-in variables, replaced by values that suit the CI scrape interval (1s).
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "5s", "$__range", "10m", "${__range}", "10m")

// compactionMetric marks the expressions of the compaction panels: after a scripted conversation
// with compactions they must return data.
var compactionMetric = regexp.MustCompile(`compactd_(compaction|summariser|handoffs|item_open|memo|speculative|recall)`)

// TestE2EPromQL: COMPACTD_E2E_PROMETHEUS is Prometheus's base URL; COMPACTD_E2E_DASHBOARDS a
// directory of dashboard JSON files.
func TestE2EPromQL(t *testing.T) {
	prom, dir := os.Getenv("COMPACTD_E2E_PROMETHEUS"), os.Getenv("COMPACTD_E2E_DASHBOARDS")
	if prom == "" || dir == "" {
		t.Skip("COMPACTD_E2E_PROMETHEUS / COMPACTD_E2E_DASHBOARDS not set (run by .ci/prometheus-e2e.sh)")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) == 0 {
		t.Fatalf("no dashboards in %s", dir)
	}
	type expr struct{ where, query string }
	var exprs []expr
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels []dashPanel `json:"panels"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range flattenPanels(d.Panels) {
			for _, tg := range p.Targets {
				if tg.Expr != "" {
					exprs = append(exprs, expr{fmt.Sprintf("%s panel %q %s", filepath.Base(f), p.Title, tg.RefID), tg.Expr})
				}
			}
		}
	}
	// The alert rules Prometheus loaded (and evaluated: health ok, no last error).
	rules := promGet(t, prom, "/api/v1/rules", nil)
	nRules := 0
	for _, g := range rules.Data.Groups {
		for _, r := range g.Rules {
			nRules++
			if r.Health != "ok" {
				t.Errorf("rule %s: health %q %s", r.Name, r.Health, r.LastError)
			}
			exprs = append(exprs, expr{"rule " + r.Name, r.Query})
		}
	}
	if nRules == 0 {
		t.Error("Prometheus loaded no alert rules")
	}
	compactionPanels := 0
	for _, e := range exprs {
		q := grafanaVars.Replace(e.query)
		res := promGet(t, prom, "/api/v1/query", url.Values{"query": {q}})
		if res.Status != "success" {
			t.Errorf("%s: invalid: %s: %s\n  %s", e.where, res.ErrorType, res.Error, q)
			continue
		}
		if strings.HasPrefix(e.where, "rule ") || !compactionMetric.MatchString(q) {
			continue
		}
		compactionPanels++
		if len(res.Data.Result) == 0 {
			t.Errorf("%s: no data after the scripted compactions\n  %s", e.where, q)
		}
	}
	t.Logf("checked %d expressions (%d alert rules, %d compaction panel queries with data)", len(exprs), nRules, compactionPanels)
	if compactionPanels == 0 {
		t.Error("no compaction panels found in the dashboards")
	}
}

type dashPanel struct {
	Title   string      `json:"title"`
	Panels  []dashPanel `json:"panels"` // collapsed rows
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

func flattenPanels(ps []dashPanel) []dashPanel {
	var out []dashPanel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flattenPanels(p.Panels)...)
	}
	return out
}
