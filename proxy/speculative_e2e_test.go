package proxy_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/proxy"
)

func TestSpeculativeCompactionIsUsedByTheCrossingTurn(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, retain(1000))
	ctx := context.Background()
	send := func(items []any) *responses.Response {
		resp, err := h.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", items), threshold(6000))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// ~5.2k tokens: past 85% of 6000, below it. compactd starts summarising in the background.
	items := toAny(history(5, 400))
	r1 := send(items)
	if r1.Output[0].Type == "compaction" {
		t.Fatal("compacted below the threshold")
	}
	waitFor(t, func() bool { return len(h.upstream(fakeupstream.KindSummary)) == 1 })

	// The next turn crosses the threshold and starts with the speculated prefix.
	for _, o := range r1.Output {
		items = append(items, json.RawMessage(o.RawJSON()))
	}
	items = append(items, map[string]any{"role": "user", "content": "U-CROSS " + strings.Repeat("more words here ", 400)})
	r2 := send(items)
	if r2.Output[0].Type != "compaction" {
		t.Fatal("the crossing turn did not compact")
	}
	if n := len(h.upstream(fakeupstream.KindSummary)); n != 1 {
		t.Errorf("%d summariser calls, want 1: the crossing turn should reuse the speculative summary", n)
	}
	up := h.lastUpstreamInput(t)
	var sawHandoff bool
	var afterHandoff []string
	for _, it := range up {
		if strings.HasPrefix(it.Get("content.0.text").Str, handoff.Prefix) {
			sawHandoff = true
			continue
		}
		if sawHandoff {
			afterHandoff = append(afterHandoff, it.Raw)
		}
	}
	// The speculated prefix ended before the newest user message of the first turn: that
	// message, its answer, the reply and the new message follow the summary verbatim.
	if !sawHandoff || len(afterHandoff) != 4 || !strings.Contains(afterHandoff[0], marker("U", 4)) || !strings.Contains(afterHandoff[3], "U-CROSS") {
		t.Fatalf("upstream context after the handoff: %d items (handoff seen: %v), want the 4 items after the speculated prefix", len(afterHandoff), sawHandoff)
	}

	// The turn after: the handoff rebuilds the same context (tail included), byte for byte.
	for _, o := range r2.Output {
		items = append(items, json.RawMessage(o.RawJSON()))
	}
	items = append(items, map[string]any{"role": "user", "content": "U-AFTER"})
	if _, err := h.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", items)); err != nil {
		t.Fatal(err)
	}
	next := h.lastUpstreamInput(t)
	for i, it := range up {
		if i >= len(next) || next[i].Raw != it.Raw {
			t.Fatalf("the turn after diverges from the compacted context at input[%d]", i)
		}
	}
}

// TestSpeculativeCompactionOff checks that a turn past the fraction starts no background job
// with speculation off. Deterministically: the "started" outcome is counted before the turn is
// forwarded, so it is final once the response is in, and Close waits for any job that did start
// before the summariser calls are counted. The "on" row shows the same turn does start one.
func TestSpeculativeCompactionOff(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fraction float64
		started  float64
	}{
		{"on", 0, 1},
		{"off", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			h := newHarness(t, fakeupstream.Options{}, withRegistry(reg, func(c *proxy.Config) { c.RetainTokens = 1000; c.Speculative.Fraction = tc.fraction }))
			if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
				option.WithJSONSet("input", toAny(history(5, 400))), threshold(6000)); err != nil {
				t.Fatal(err)
			}
			if got := value(t, reg, "compactd_speculative_compactions_total", "outcome", "started"); got != tc.started {
				t.Errorf("speculative jobs started = %v, want %v", got, tc.started)
			}
			closeServer(t, h.srv)
			if n := len(h.upstream(fakeupstream.KindSummary)); tc.started == 0 && n != 0 {
				t.Errorf("%d summariser calls with speculation off", n)
			}
		})
	}
}
