package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/proxy"
)

// openAICiphertext stands in for OpenAI's own encrypted_content (a Fernet token: "gAAAA…").
const openAICiphertext = "gAAAAABpQ0ZPRUlHTi1PUEVOQUktQ0lQSEVSVEVYVC1ORVZFUi1PUEVORUQ="

// foreignHistory is a conversation that switched to compactd after OpenAI compacted it: the
// client followed OpenAI's contract and dropped what the item superseded, so only instructions,
// the item and what came after remain.
func foreignHistory(item map[string]any) []any {
	return []any{
		map[string]any{"type": "message", "role": "developer", "content": "You are a careful coding agent."},
		map[string]any{"type": "message", "role": "user", "content": "U-MARK-kept-before"},
		item,
		map[string]any{"type": "message", "role": "user", "content": "U-MARK-continue"},
	}
}

func TestForeignCompactionItems(t *testing.T) {
	openAIItem := map[string]any{"type": "compaction", "id": "cmp_68c9f1d2e3a4b5c6", "encrypted_content": openAICiphertext}
	summaryItem := map[string]any{"type": "compaction_summary", "encrypted_content": openAICiphertext}
	// compactd's format, damaged: it claims to be compactd's, so it is not foreign.
	tampered := map[string]any{"type": "compaction", "encrypted_content": "cmp_00112233445566778899aabbccddeeff.AAAA-not-a-seal"}
	noContent := map[string]any{"type": "compaction", "id": "cmp_x"}
	cases := []struct {
		name    string
		policy  proxy.ForeignItems
		item    map[string]any
		status  int    // 0: the turn goes through
		code    string // the 400's code
		dropped float64
		reject  float64
	}{
		{"OpenAI compaction item, default policy", "", openAIItem, 0, "", 1, 0},
		{"OpenAI compaction item, drop", proxy.ForeignDrop, openAIItem, 0, "", 1, 0},
		{"compaction_summary item, drop", proxy.ForeignDrop, summaryItem, 0, "", 1, 0},
		{"OpenAI compaction item, reject", proxy.ForeignReject, openAIItem, 400, "foreign_compaction_item", 0, 1},
		{"compactd's format failing to open, drop", proxy.ForeignDrop, tampered, 400, "invalid_encrypted_content", 0, 0},
		{"compactd's format failing to open, reject", proxy.ForeignReject, tampered, 400, "invalid_encrypted_content", 0, 0},
		{"no encrypted_content, drop", proxy.ForeignDrop, noContent, 400, "invalid_encrypted_content", 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			h := newHarness(t, fakeupstream.Options{}, withRegistry(reg, func(c *proxy.Config) { c.ForeignItems = tc.policy }))
			var raw *http.Response
			resp, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
				option.WithJSONSet("input", foreignHistory(tc.item)), option.WithResponseInto(&raw))
			warning := ""
			if raw != nil {
				warning = raw.Header.Get("X-Compactd-Warning")
			}
			if tc.status == 0 {
				if err != nil {
					t.Fatalf("turn failed: %v", err)
				}
				if !strings.Contains(resp.OutputText(), "MOCK-REPLY") {
					t.Errorf("reply %q", resp.OutputText())
				}
				in := h.lastUpstreamInput(t)
				var got []string
				for _, it := range in {
					got = append(got, it.Get("role").Str+":"+it.Get("content").Str)
					if strings.HasPrefix(it.Get("type").Str, "compaction") {
						t.Errorf("upstream received a compaction item: %s", it.Raw)
					}
				}
				want := []string{"developer:You are a careful coding agent.", "user:U-MARK-kept-before", "user:U-MARK-continue"}
				if strings.Join(got, "|") != strings.Join(want, "|") {
					t.Errorf("upstream input = %q, want %q", got, want)
				}
				if !strings.Contains(warning, "foreign compaction item") || !strings.Contains(warning, "input[2]") {
					t.Errorf("X-Compactd-Warning = %q, want it to name the dropped item", warning)
				}
			} else {
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || apiErr.Code != tc.code {
					t.Fatalf("err = %v, want %d %s", err, tc.status, tc.code)
				}
				if tc.code == "foreign_compaction_item" && (!strings.Contains(apiErr.Message, "--foreign-items drop") || apiErr.Param != "input[2].encrypted_content") {
					t.Errorf("reject message %q (param %q): want it to name the item and the flag", apiErr.Message, apiErr.Param)
				}
				if n := len(h.upstream(dialect.Responses)); n != 0 {
					t.Errorf("a refused request reached the upstream %d times", n)
				}
				if warning != "" {
					t.Errorf("X-Compactd-Warning = %q on a refused request", warning)
				}
			}
			for action, want := range map[string]float64{"dropped": tc.dropped, "rejected": tc.reject} {
				if got := value(t, reg, "compactd_foreign_items_total", "api", "responses", "action", action); got != want {
					t.Errorf("compactd_foreign_items_total{api=responses,action=%s} = %v, want %v", action, got, want)
				}
			}
		})
	}
}

// TestForeignItemBesideCompactdItem: a foreign item is dropped wherever it sits, and compactd's
// own latest item still hands off.
func TestForeignItemBesideCompactdItem(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, retain(1000))
	items, r1 := turnOne(t, h)
	own := json.RawMessage(r1.Output[0].RawJSON())
	foreign := map[string]any{"type": "compaction", "encrypted_content": openAICiphertext}
	var next []any
	for _, it := range items {
		next = append(next, it)
	}
	next = append(next, foreign, own, foreign, map[string]any{"type": "message", "role": "user", "content": "U-MARK-after"})
	var raw *http.Response
	if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", next), option.WithResponseInto(&raw)); err != nil {
		t.Fatal(err)
	}
	in := h.lastUpstreamInput(t)
	handoffs := 0
	for _, it := range in {
		if strings.HasPrefix(it.Get("type").Str, "compaction") {
			t.Errorf("upstream received a compaction item: %.80s", it.Raw)
		}
		if strings.Contains(it.Raw, handoff.Prefix[:40]) {
			handoffs++
		}
	}
	if handoffs == 0 || in[len(in)-1].Get("content").Str != "U-MARK-after" {
		t.Errorf("compactd's own item was not handed off: upstream input %v", in)
	}
	if w := raw.Header.Get("X-Compactd-Warning"); !strings.Contains(w, "dropped 2 foreign") {
		t.Errorf("X-Compactd-Warning = %q, want both items counted", w)
	}
}

// TestForeignItemLogLine: the drop is logged at warn level, saying the history is gone, with the
// item's location and no content.
func TestForeignItemLogLine(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) { c.Logger = log })
	item := map[string]any{"type": "compaction", "encrypted_content": openAICiphertext}
	if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", foreignHistory(item))); err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "foreign") {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line == nil || line["level"] != "WARN" || !strings.Contains(line["msg"].(string), "gone from the model's view") || line["at"] != "input[2]" {
		t.Errorf("log line = %v, want a WARN saying the history is gone, at input[2]", line)
	}
	for _, secret := range []string{openAICiphertext[:20], "U-MARK", "careful coding agent"} {
		if strings.Contains(buf.String(), secret) {
			t.Errorf("the log holds content %q", secret)
		}
	}
}

// TestAdditionalToolsSurviveCompaction: Codex's additional_tools item (tool definitions moved
// into input) is kept verbatim and in place through a threshold compaction and the handoff turn
// after it, never summarised; the handoff turn's upstream input starts with exactly what the
// compacting turn sent (the prompt cache keeps hitting).
func TestAdditionalToolsSurviveCompaction(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, retain(1000))
	tools := map[string]any{"type": "additional_tools", "role": "developer", "tools": []map[string]any{{
		"type": "function", "name": "TOOL-MARK-shell", "description": "run a command", "parameters": map[string]any{"type": "object"},
	}}}
	config := map[string]any{"type": "configuration_update", "CONF-MARK": true}
	hist := history(6, 400)
	var items []any
	for i, it := range hist {
		items = append(items, it)
		if i == 0 {
			items = append(items, tools)
		}
		if i == 6 {
			items = append(items, config) // mid-conversation
		}
	}
	r1, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", items), threshold(2000))
	if err != nil {
		t.Fatal(err)
	}
	if r1.Output[0].Type != "compaction" {
		t.Fatalf("no compaction: output[0] is %s", r1.Output[0].Type)
	}
	order := func(in []gjson.Result) (kinds []string) {
		for _, it := range in {
			switch k := it.Get("type").Str; {
			case k == "additional_tools" || k == "configuration_update":
				kinds = append(kinds, k)
			case it.Get("role").Str == "developer":
				kinds = append(kinds, "developer")
			case strings.Contains(it.Raw, handoff.Prefix[:40]):
				kinds = append(kinds, "handoff")
			}
		}
		return kinds
	}
	first := h.lastUpstreamInput(t)
	if got := strings.Join(order(first), ","); !strings.HasPrefix(got, "developer,additional_tools,configuration_update,handoff") {
		t.Errorf("compacting turn's upstream input order = %s, want developer,additional_tools,configuration_update before the handoff", got)
	}
	for _, sum := range h.upstream(fakeupstream.KindSummary) {
		if strings.Contains(string(sum.Body), "TOOL-MARK") || strings.Contains(string(sum.Body), "CONF-MARK") {
			t.Error("the summariser was given the additional_tools or configuration_update item")
		}
	}
	for _, it := range first {
		if it.Get("type").Str == "additional_tools" && gjson.Get(it.Raw, "tools.0.name").Str != "TOOL-MARK-shell" {
			t.Errorf("additional_tools not verbatim: %s", it.Raw)
		}
	}

	// The handoff turn: the client replays its history, the item, and a new message.
	next := append(append([]any{}, items...), json.RawMessage(r1.Output[0].RawJSON()), map[string]any{"type": "message", "role": "user", "content": "U-MARK-next"})
	if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", next), threshold(1_000_000)); err != nil {
		t.Fatal(err)
	}
	second := h.lastUpstreamInput(t)
	if got := strings.Join(order(second), ","); !strings.HasPrefix(got, "developer,additional_tools,configuration_update,handoff") {
		t.Errorf("handoff turn's upstream input order = %s", got)
	}
	if len(second) != len(first)+1 {
		t.Fatalf("handoff turn sent %d items, want the compacting turn's %d plus the new message", len(second), len(first))
	}
	for i := range first {
		if first[i].Raw != second[i].Raw {
			t.Errorf("upstream input[%d] differs between the compacting turn and the handoff turn:\n%s\n%s", i, first[i].Raw, second[i].Raw)
		}
	}
}

// TestForeignCompactionBlocks: an Anthropic compaction block compactd did not seal (Anthropic's
// own server-side compaction) is dropped by default and refused with reject; a block in
// compactd's format that fails to open stays a 400 either way.
func TestForeignCompactionBlocks(t *testing.T) {
	anthropicBlock := map[string]any{"type": "compaction", "content": "Anthropic's own summary", "encrypted_content": "EqQBCkYIBxgCKkBANTHROPIC-OPAQUE", "signature": "sig"}
	tampered := map[string]any{"type": "compaction", "content": "x", "encrypted_content": "cmp_00112233445566778899aabbccddeeff.AAAA"}
	cases := []struct {
		name   string
		policy proxy.ForeignItems
		block  map[string]any
		status int
	}{
		{"Anthropic block, default", "", anthropicBlock, 200},
		{"Anthropic block, reject", proxy.ForeignReject, anthropicBlock, 400},
		{"compactd's format failing to open, drop", proxy.ForeignDrop, tampered, 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			h := newMsgHarness(t, withRegistry(reg, func(c *proxy.Config) { c.ForeignItems = tc.policy }))
			msgs := []any{
				map[string]any{"role": "user", "content": "U-MARK-first"},
				map[string]any{"role": "assistant", "content": []any{tc.block}},
				map[string]any{"role": "user", "content": "U-MARK-continue"},
			}
			var raw *http.Response
			_, err := h.ant.Beta.Messages.New(context.Background(), anthropic.BetaMessageNewParams{Model: antModel, MaxTokens: 64},
				antoption.WithJSONSet("messages", msgs), antoption.WithResponseInto(&raw))
			if tc.status == 200 {
				if err != nil {
					t.Fatal(err)
				}
				reqs := h.upstream(dialect.Messages)
				if len(reqs) != 1 {
					t.Fatalf("%d upstream requests", len(reqs))
				}
				body := string(reqs[0].Body)
				if strings.Contains(body, "compaction") || strings.Contains(body, "ANTHROPIC-OPAQUE") || !strings.Contains(body, "U-MARK-first") || !strings.Contains(body, "U-MARK-continue") {
					t.Errorf("upstream body %s", body)
				}
				if n := gjson.Get(body, "messages.#").Int(); n != 2 {
					t.Errorf("upstream got %d messages, want the emptied assistant message removed", n)
				}
				if w := raw.Header.Get("X-Compactd-Warning"); !strings.Contains(w, "messages.1.content.0") {
					t.Errorf("X-Compactd-Warning = %q", w)
				}
				if got := value(t, reg, "compactd_foreign_items_total", "api", "messages", "action", "dropped"); got != 1 {
					t.Errorf("dropped counter = %v", got)
				}
				return
			}
			var apiErr *anthropic.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status {
				t.Fatalf("err = %v, want %d", err, tc.status)
			}
			if tc.policy == proxy.ForeignReject && !strings.Contains(apiErr.RawJSON(), "--foreign-items drop") {
				t.Errorf("reject body %s: want the flag named", apiErr.RawJSON())
			}
			if n := len(h.upstream(dialect.Messages)); n != 0 {
				t.Errorf("a refused request reached the upstream")
			}
		})
	}
}

func TestParseForeignItems(t *testing.T) {
	for in, want := range map[string]proxy.ForeignItems{"": proxy.ForeignDrop, "drop": proxy.ForeignDrop, "reject": proxy.ForeignReject, " reject ": proxy.ForeignReject} {
		if got, err := proxy.ParseForeignItems(in); err != nil || got != want {
			t.Errorf("ParseForeignItems(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"forward", "DROP", "0"} {
		if _, err := proxy.ParseForeignItems(bad); err == nil {
			t.Errorf("ParseForeignItems(%q) accepted", bad)
		}
	}
	cfg := proxy.Config{Sealer: testRing(t, "k1"), Summarizer: failingSummarizer{}, ForeignItems: "keep"}
	if _, err := proxy.New(cfg); err == nil || !strings.Contains(err.Error(), "ForeignItems") {
		t.Errorf("New with ForeignItems %q: err = %v", cfg.ForeignItems, err)
	}
}
