package proxy_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// A conversation's requests grow: each is the last plus new items. The skim cache resumes each
// from the last one's skim; these tests hold the front to what the full skim decides: the
// upstream gets the client's bytes, a refusal in the new tail is still refused, a changed byte
// in the remembered prefix is skimmed in full, and one client's bytes never resume another's.

// skimLookups is compactd_skim_cache_lookups_total{outcome}.
func skimLookups(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "compactd_skim_cache_lookups_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelIs(m, "outcome", outcome) {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatal("compactd_skim_cache_lookups_total is not exported")
	return 0
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// growing are the three APIs' conversations: the body of turn n (items 0..n), large enough for
// the cache (40 KB of history before the first turn).
var growing = []struct {
	api  dialect.Name
	path string
	body func(turns int, tail string) string
}{
	{dialect.Responses, "/v1/responses", func(n int, tail string) string {
		var items []string
		items = append(items, `{"type":"message","role":"user","content":"`+strings.Repeat("read the parser and fix it ", 1500)+`"}`)
		for i := range n {
			items = append(items, fmt.Sprintf(`{"type":"function_call","call_id":"c%d","name":"shell","arguments":"{}"}`, i),
				fmt.Sprintf(`{"type":"function_call_output","call_id":"c%d","output":"line %d ok"}`, i, i))
		}
		return `{"model":"gpt-5","input":[` + strings.Join(items, ",") + tail + `],"stream":false}`
	}},
	{dialect.Messages, "/v1/messages", func(n int, tail string) string {
		var msgs []string
		msgs = append(msgs, `{"role":"user","content":"`+strings.Repeat("read the parser and fix it ", 1500)+`"}`)
		for i := range n {
			msgs = append(msgs, fmt.Sprintf(`{"role":"assistant","content":[{"type":"tool_use","id":"t%d","name":"sh","input":{}}]}`, i),
				fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t%d","content":"ok %d"}]}`, i, i))
		}
		return `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[` + strings.Join(msgs, ",") + tail + `]}`
	}},
	{dialect.Chat, "/v1/chat/completions", func(n int, tail string) string {
		var msgs []string
		msgs = append(msgs, `{"role":"user","content":"`+strings.Repeat("read the parser and fix it ", 1500)+`"}`)
		for i := range n {
			msgs = append(msgs, fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"id":"t%d","type":"function","function":{"name":"sh","arguments":"{}"}}]}`, i),
				fmt.Sprintf(`{"role":"tool","tool_call_id":"t%d","content":"ok %d"}`, i, i))
		}
		return `{"model":"gpt-4o","messages":[` + strings.Join(msgs, ",") + tail + `]}`
	}},
}

func postGrowing(t *testing.T, url, key, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("x-api-key", key)
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestSkimCacheResumesGrowingConversations(t *testing.T) {
	for _, g := range growing {
		t.Run(string(g.api), func(t *testing.T) {
			reg := proxy.NewRegistry()
			h := newHarness(t, fakeupstream.Options{}, withRegistry(reg, func(c *proxy.Config) { c.AnthropicUpstream = c.Upstream }))
			for n := range 4 {
				body := g.body(n+1, "")
				if code, out := postGrowing(t, h.proxyURL+g.path, "sk-a", body); code != http.StatusOK {
					t.Fatalf("turn %d: %d %s", n, code, out)
				}
				reqs := h.upstream(g.api)
				if got := reqs[len(reqs)-1].Body; !bytes.Equal(got, []byte(body)) {
					t.Fatalf("turn %d: the upstream got other bytes than the client sent", n)
				}
			}
			if hits, misses := skimLookups(t, reg, "hit"), skimLookups(t, reg, "miss"); hits != 3 || misses != 1 {
				t.Fatalf("%v hits, %v misses; want 3 and 1 (each turn resumed the last)", hits, misses)
			}
			// A refusal in the new tail is found on a resumed skim: a duplicate member, and a
			// body that is not JSON past the remembered prefix.
			for _, tail := range []string{`,{"role":"user","role":"assistant","content":"x"}`, `,{"role":"user","content":"` + "\xff" + `"}`} {
				code, out := postGrowing(t, h.proxyURL+g.path, "sk-a", g.body(4, tail))
				if code != http.StatusBadRequest {
					t.Fatalf("tail %q: %d %s, want a 400", tail, code, out)
				}
			}
			if skimLookups(t, reg, "hit") != 5 {
				t.Fatal("the refused bodies did not resume the remembered skim")
			}
			// Another client's identical bytes do not resume this client's skim.
			before := skimLookups(t, reg, "miss")
			postGrowing(t, h.proxyURL+g.path, "sk-b", g.body(4, ""))
			if skimLookups(t, reg, "miss") != before+1 {
				t.Fatal("another client's request resumed this client's skim")
			}
		})
	}
}

// TestSkimCacheChangedPrefixSkimsInFull: a body whose remembered prefix changed — a compaction
// item where a message was, same length — is skimmed in full: the item is found (and, as one
// compactd did not issue, dropped by the foreign-items policy) instead of passing as the message
// the remembered skim saw there.
func TestSkimCacheChangedPrefixSkimsInFull(t *testing.T) {
	reg := proxy.NewRegistry()
	h := newHarness(t, fakeupstream.Options{}, withRegistry(reg))
	g := growing[0]
	msg := `{"type":"message","role":"user","content":"` + strings.Repeat("x", 60) + `"}`
	item := `{"type":"compaction","encrypted_content":"` + strings.Repeat("y", len(msg)-len(`{"type":"compaction","encrypted_content":""}`)) + `"}`
	if len(item) != len(msg) {
		t.Fatal("the edit must keep the layout")
	}
	first := g.body(2, ","+msg)
	if code, out := postGrowing(t, h.proxyURL+g.path, "sk-a", first); code != http.StatusOK {
		t.Fatalf("%d %s", code, out)
	}
	second := strings.Replace(first, msg, item, 1)
	code, out := postGrowing(t, h.proxyURL+g.path, "sk-a", second)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, out)
	}
	reqs := h.upstream(g.api)
	if got := reqs[len(reqs)-1].Body; bytes.Contains(got, []byte(`"compaction"`)) || bytes.Contains(got, []byte(msg)) {
		t.Fatalf("the upstream got the item or the old message: the changed prefix was not skimmed again")
	}
	if skimLookups(t, reg, "hit") != 0 {
		t.Fatal("a body with a changed prefix resumed the remembered skim")
	}
}
