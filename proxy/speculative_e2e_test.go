package proxy_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/compactd/compactd/fakeupstream"
	"github.com/compactd/compactd/handoff"
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

func TestSpeculativeCompactionOff(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) { c.RetainTokens = 1000; c.Speculative.Fraction = -1 })
	if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", toAny(history(5, 400))), threshold(6000)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // give a (wrongly) started job the chance to show up
	if n := len(h.upstream(fakeupstream.KindSummary)); n != 0 {
		t.Errorf("%d summariser calls with speculation off", n)
	}
}
