package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/fixtures"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/proxy"
)

const testModel = "gpt-test"

func threshold(n int64) option.RequestOption {
	return option.WithJSONSet("context_management", []map[string]any{{"type": "compaction", "compact_threshold": n}})
}

func retain(n int) func(*proxy.Config) { return func(c *proxy.Config) { c.RetainTokens = n } }

// turnOne runs a compacting first turn and returns the history sent and the response.
func turnOne(t *testing.T, h *harness) ([]map[string]any, *responses.Response) {
	t.Helper()
	items := history(6, 400)
	resp, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", items), threshold(2000))
	if err != nil {
		t.Fatal(err)
	}
	return items, resp
}

func TestThresholdCompactionJSON(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, retain(1000))
	_, resp := turnOne(t, h)

	if len(resp.Output) != 2 {
		t.Fatalf("output has %d items, want compaction + reply", len(resp.Output))
	}
	item := resp.Output[0].AsCompaction()
	if resp.Output[0].Type != "compaction" || !strings.HasPrefix(item.ID, "cmp_") || item.EncryptedContent == "" {
		t.Fatalf("output[0] = %s, want a compaction item", resp.Output[0].RawJSON())
	}
	if !strings.HasPrefix(resp.OutputText(), "MOCK-REPLY") {
		t.Errorf("reply = %q", resp.OutputText())
	}
	if n := len(h.upstream(fakeupstream.KindSummary)); n != 1 {
		t.Errorf("summariser called %d times, want 1", n)
	}

	up := h.upstream(dialect.Responses)
	if len(up) != 1 {
		t.Fatalf("upstream got %d Responses requests", len(up))
	}
	body := up[0].Body
	if gjson.GetBytes(body, "context_management").Exists() {
		t.Error("context_management was forwarded")
	}
	input := gjson.GetBytes(body, "input").Array()
	if input[0].Get("role").Str != "developer" {
		t.Errorf("instructions not kept first: %s", input[0].Raw)
	}
	last := input[len(input)-1]
	text := last.Get("content.0.text").Str
	if !strings.HasPrefix(text, handoff.Prefix) || !strings.Contains(text, fakeupstream.SummaryPrefix) {
		t.Errorf("last forwarded item is not the handoff message: %.200s", last.Raw)
	}
	// Everything but the handoff message: instructions and the newest user messages, verbatim.
	var kept strings.Builder
	for _, it := range input[:len(input)-1] {
		kept.WriteString(it.Raw)
	}
	if !strings.Contains(kept.String(), marker("U", 5)) {
		t.Error("newest user message was not retained verbatim")
	}
	if strings.Contains(kept.String(), marker("U", 0)) || strings.Contains(string(body), marker("A", 0)) {
		t.Error("old history was forwarded alongside its summary")
	}
}

func TestNextTurnAppliesHandoff(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, retain(1000))
	items, resp := turnOne(t, h)
	first := h.lastUpstreamInput(t)

	// The client appends the whole output (compaction item and reply) and a new message.
	var next []any
	for _, it := range items {
		next = append(next, it)
	}
	for _, o := range resp.Output {
		next = append(next, json.RawMessage(o.RawJSON()))
	}
	next = append(next, map[string]any{"type": "message", "role": "user", "content": "U-NEXT what now?"})
	resp2, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", next))
	if err != nil {
		t.Fatal(err)
	}
	if resp2.Output[0].Type == "compaction" {
		t.Error("a turn under the threshold compacted again")
	}
	body := string(h.upstream(dialect.Responses)[1].Body)
	blob := resp.Output[0].AsCompaction().EncryptedContent
	for _, bad := range []string{`"compaction"`, blob[:40], marker("A", 0), marker("A", 5)} {
		if strings.Contains(body, bad) {
			t.Errorf("upstream request contains %q", bad)
		}
	}
	second := h.lastUpstreamInput(t)
	// Prompt-cache invariant: the compacted context of turn one is, byte for byte, the prefix of
	// what the upstream sees on turn two.
	for i, it := range first {
		if i >= len(second) || second[i].Raw != it.Raw {
			t.Fatalf("turn two diverges from turn one's compacted context at input[%d]", i)
		}
	}
	if !strings.Contains(second[len(second)-1].Raw, "U-NEXT") {
		t.Error("new message missing")
	}
}

func TestThresholdCompactionStreaming(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{Deltas: 3}, retain(1000))
	stream := h.client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", history(6, 400)), threshold(2000))
	var types []string
	seq := int64(-1)
	var completed responses.Response
	var text strings.Builder
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if ev.SequenceNumber != seq+1 {
			t.Errorf("%s: sequence_number %d after %d", ev.Type, ev.SequenceNumber, seq)
		}
		seq = ev.SequenceNumber
		switch ev.Type {
		case "response.output_item.added":
			if ev.OutputIndex == 0 {
				if ev.Item.Type != "compaction" || ev.Item.AsCompaction().EncryptedContent != "" {
					t.Errorf("added[0] = %s, want a compaction item with empty encrypted_content", ev.Item.RawJSON())
				}
			} else if ev.OutputIndex != 1 {
				t.Errorf("reply added at output_index %d, want 1", ev.OutputIndex)
			}
		case "response.output_item.done":
			if ev.OutputIndex == 0 && ev.Item.AsCompaction().EncryptedContent == "" {
				t.Error("done[0] lacks encrypted_content")
			}
		case "response.output_text.delta":
			if ev.OutputIndex != 1 {
				t.Errorf("delta at output_index %d, want 1", ev.OutputIndex)
			}
			text.WriteString(ev.Delta)
		case "response.completed":
			completed = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.output_item.done", "response.output_item.added"}
	if len(types) < len(want) || strings.Join(types[:len(want)], ",") != strings.Join(want, ",") {
		t.Errorf("event order = %v", types)
	}
	if len(completed.Output) != 2 || completed.Output[0].Type != "compaction" || completed.Output[0].AsCompaction().EncryptedContent == "" {
		t.Errorf("response.completed output = %v", completed.Output)
	}
	if !strings.HasPrefix(text.String(), "MOCK-REPLY") {
		t.Errorf("streamed text = %q", text.String())
	}
}

func TestBelowThresholdForwardsBodyUnchanged(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, nil)
	body := `{"model":"gpt-test","future_field":{"nested":[1,2,3]},"context_management":[{"type":"compaction","compact_threshold":100000}],"input":[{"role":"user","content":"hi"}],"prompt_cache_key":"abc"}`
	resp, err := http.Post(h.proxyURL+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	got := string(h.upstream(dialect.Responses)[0].Body)
	want := `{"model":"gpt-test","future_field":{"nested":[1,2,3]},"input":[{"role":"user","content":"hi"}],"prompt_cache_key":"abc"}`
	if got != want {
		t.Errorf("upstream body\n got %s\nwant %s", got, want)
	}
}

func TestInvalidContextManagement(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, nil)
	for _, cm := range []string{`{}`, `[]`, `[{"type":"other"}]`, `[{"type":"compaction","compact_threshold":999}]`, `[{"type":"compaction","compact_threshold":"2000"}]`} {
		_, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}},
			option.WithJSONSet("context_management", json.RawMessage(cm)))
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Type != "invalid_request_error" || !strings.HasPrefix(apiErr.Param, "context_management") {
			t.Errorf("context_management %s: err = %v", cm, err)
		}
	}
	if n := len(h.upstream(dialect.Responses)); n != 0 {
		t.Errorf("invalid requests reached the upstream %d times", n)
	}
}

func TestRejectedItemsNeverReachUpstream(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, retain(1000))
	_, resp := turnOne(t, h)
	item := resp.Output[0].AsCompaction()
	good := item.EncryptedContent

	foreign := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) { c.Sealer = testRing(t, "kf"); c.RetainTokens = 1000 })
	_, fresp := turnOne(t, foreign)

	// A replica that shares the keyring but serves another tenant.
	otherTenant := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) { c.Sealer = h.ring; c.Tenant = "acme" })

	// Change one character of the sealed part to another valid base64url character: the
	// envelope still decodes, so only the AEAD tag can catch it.
	flip := []byte(good)
	if i := len(flip) / 2; flip[i] != 'A' {
		flip[i] = 'A'
	} else {
		flip[i] = 'B'
	}
	tests := []struct {
		name    string
		h       *harness
		id, enc string
		want    string // substring of the message
	}{
		{"tampered", h, item.ID, string(flip), "integrity"},
		{"truncated", h, item.ID, good[:len(good)/2], ""},
		// Garbage in compactd's own format; without the cmp_ prefix it would be foreign
		// (dropped or refused by --foreign-items: foreign_test.go).
		{"garbage", h, item.ID, "cmp_not-ours", "not a compaction item"},
		{"moved to another id", h, "cmp_0000", good, "integrity"},
		{"foreign key", h, fresp.Output[0].AsCompaction().ID, fresp.Output[0].AsCompaction().EncryptedContent, "key"},
		{"wrong tenant", otherTenant, item.ID, good, "tenant"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(tt.h.upstream(dialect.Responses))
			input := []any{
				map[string]any{"type": "compaction", "id": tt.id, "encrypted_content": tt.enc},
				map[string]any{"type": "message", "role": "user", "content": "continue"},
			}
			_, err := tt.h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", input))
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "input[0].encrypted_content" {
				t.Fatalf("err = %v, want 400 on input[0].encrypted_content", err)
			}
			if !strings.Contains(apiErr.Message, tt.want) {
				t.Errorf("message %q lacks %q", apiErr.Message, tt.want)
			}
			if after := len(tt.h.upstream(dialect.Responses)); after != before {
				t.Error("a rejected request reached the upstream")
			}
		})
	}
}

func TestRetiredKeyOpensOldItems(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, retain(1000))
	_, resp := turnOne(t, h)

	// Rotation: a new active key, the old one retired. Items sealed before still open.
	oldKey := exportKey(t, h.ring)
	rotated := testRing(t, "k2", oldKey)
	h2 := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) { c.Sealer = rotated; c.RetainTokens = 1000 })
	input := []any{json.RawMessage(resp.Output[0].RawJSON()), map[string]any{"type": "message", "role": "user", "content": "go on"}}
	if _, err := h2.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", input)); err != nil {
		t.Fatalf("retired key did not open the item: %v", err)
	}
	if !strings.Contains(string(h2.upstream(dialect.Responses)[0].Body), fakeupstream.SummaryPrefix) {
		t.Error("upstream did not receive the summary")
	}
	// Without the old key the same item is refused with advice about the keyring.
	h3 := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) { c.Sealer = testRing(t, "k3") })
	_, err := h3.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", input))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "retired key") {
		t.Errorf("unknown key: err = %v", err)
	}
}

// exportKey returns the active key of a keyring through its text form, as an operator would
// copy it into the next keyring.
func exportKey(t *testing.T, r *crypto.Keyring) crypto.Key {
	t.Helper()
	line := strings.Fields(strings.Split(strings.TrimSpace(r.String()), "\n")[0])
	k, err := crypto.ParseKey(line[len(line)-1])
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestCompactEndpoint(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, retain(1000))
	c, err := h.client.Responses.Compact(context.Background(), responses.ResponseCompactParams{Model: testModel},
		option.WithJSONSet("input", history(6, 400)))
	if err != nil {
		t.Fatal(err)
	}
	if c.Object != "response.compaction" || len(c.Output) < 2 {
		t.Fatalf("compact response = %+v", c)
	}
	lastItem := c.Output[len(c.Output)-1]
	if lastItem.Type != "compaction" {
		t.Errorf("last output item is %s, want the compaction item", lastItem.Type)
	}
	for _, o := range c.Output[:len(c.Output)-1] {
		if o.Type != "message" || o.AsMessage().Role != "user" {
			t.Errorf("non-user item before the compaction item: %s", o.RawJSON())
		}
	}
	if c.Usage.InputTokens == 0 || c.Usage.OutputTokens == 0 {
		t.Errorf("usage = %+v, want the summariser's", c.Usage)
	}
	if n := len(h.upstream(dialect.Responses)); n != 0 {
		t.Errorf("compact called the upstream model %d times", n)
	}
	// The returned window is the next context as-is.
	var next []any
	for _, o := range c.Output {
		next = append(next, json.RawMessage(o.RawJSON()))
	}
	next = append(next, map[string]any{"role": "user", "content": "U-NEXT"})
	if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", next)); err != nil {
		t.Fatal(err)
	}
	body := string(h.upstream(dialect.Responses)[0].Body)
	if !strings.Contains(body, fakeupstream.SummaryPrefix) || !strings.Contains(body, marker("U", 5)) || strings.Contains(body, `"compaction"`) {
		t.Errorf("next turn upstream body lacks summary or retained message: %.300s", body)
	}
}

func TestCompactionTriggerStream(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, retain(1000))
	input := append([]any{}, toAny(history(3, 200))...)
	input = append(input, map[string]any{"type": "compaction_trigger"})
	stream := h.client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", input))
	var types []string
	compactions := 0
	var completed responses.Response
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.output_item.done" && ev.Item.Type == "compaction" {
			compactions++
		}
		if ev.Type == "response.completed" {
			completed = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if compactions != 1 {
		t.Errorf("%d compaction items in the stream, want exactly one (events %v)", compactions, types)
	}
	if completed.ID == "" || completed.Usage.TotalTokens == 0 {
		t.Errorf("response.completed lacks id or usage: %+v", completed)
	}
	if n := len(h.upstream(dialect.Responses)); n != 0 {
		t.Errorf("the trigger turn reached the upstream model %d times", n)
	}
}

func TestCompactionTriggerNotLast(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, nil)
	input := []any{map[string]any{"type": "compaction_trigger"}, map[string]any{"role": "user", "content": "hi"}}
	_, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", input))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "input[0]" {
		t.Fatalf("err = %v, want 400 on input[0]", err)
	}
}

func TestKeepAliveWhileSummarising(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{SummaryDelay: 300 * time.Millisecond}, func(c *proxy.Config) {
		c.KeepAlive = 10 * time.Millisecond
		c.RetainTokens = 1000
	})
	body := mustJSON(t, map[string]any{"model": testModel, "stream": true, "input": history(6, 400),
		"context_management": []map[string]any{{"type": "compaction", "compact_threshold": 2000}}})
	resp, err := http.Post(h.proxyURL+"/v1/responses", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	s := string(raw)
	if !strings.HasPrefix(s, ": compactd") {
		t.Errorf("stream does not start with a keep-alive comment: %.80q", s)
	}
	if !strings.Contains(s, `"type":"compaction"`) || !strings.Contains(s, "response.completed") {
		t.Errorf("stream after keep-alives is incomplete")
	}
}

func TestPassThroughIsByteExact(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, nil)
	get := func(base string) (int, http.Header, string) {
		resp, err := http.Get(base + "/v1/models?limit=2")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	ds, dh, db := get(h.upURL)
	ps, ph, pb := get(h.proxyURL)
	if ds != ps || db != pb || dh.Get("Content-Type") != ph.Get("Content-Type") {
		t.Errorf("pass-through differs: %d %q vs %d %q", ds, db, ps, pb)
	}
	rec := h.upstream("other")
	if len(rec) == 0 || rec[len(rec)-1].RawQuery != "limit=2" {
		t.Errorf("query not forwarded: %+v", rec)
	}

	// Upstream errors come back unchanged, status, headers and body.
	req, _ := http.NewRequest("POST", h.proxyURL+"/v1/responses", strings.NewReader(`{"model":"m","input":"hi"}`))
	req.Header.Set(fakeupstream.HeaderStatus, "429")
	req.Header.Set("Authorization", "Bearer sk-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !gjson.GetBytes(b, "error.message").Exists() {
		t.Errorf("upstream 429 not passed through: %d %s", resp.StatusCode, b)
	}
	last := h.fake.Requests()[len(h.fake.Requests())-1]
	if last.Header.Get("Authorization") != "Bearer sk-secret" {
		t.Error("Authorization header not forwarded")
	}
}

func toAny(items []map[string]any) []any {
	out := make([]any, len(items))
	for i, it := range items {
		out[i] = it
	}
	return out
}

func TestStripCodexFields(t *testing.T) {
	raw := fixtures.Codex("normal_turn_request.json")
	body := gjson.GetBytes(raw, "body").Raw
	for _, strip := range []bool{false, true} {
		h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) { c.StripCodexFields = strip })
		resp, err := http.Post(h.proxyURL+"/v1/responses", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got := h.upstream(dialect.Responses)[0].Body
		has := strings.Contains(string(got), "internal_chat_message_metadata_passthrough") || gjson.GetBytes(got, "client_metadata").Exists()
		if has == strip {
			t.Errorf("strip=%v: Codex-only fields present=%v", strip, has)
		}
		if !strip && string(got) != body {
			t.Error("without stripping the Codex body must be forwarded byte for byte")
		}
		for _, keep := range []string{"prompt_cache_key", "include", "store", "reasoning", "tools"} {
			if !gjson.GetBytes(got, keep).Exists() {
				t.Errorf("strip=%v dropped %s", strip, keep)
			}
		}
	}
}
