package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

func TestHeaderLimitAnswersInDialect(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) { c.MaxHeaderBytes = 2048 })
	for _, tc := range []struct{ path, wantType string }{
		{"/v1/responses", "invalid_request_error"},
		{"/v1/messages", "invalid_request_error"},
	} {
		req, _ := http.NewRequest("POST", h.proxyURL+tc.path, strings.NewReader(`{}`))
		req.Header.Set("X-Big", strings.Repeat("a", 4096))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		raw, _ := json.Marshal(body)
		if resp.StatusCode != 431 || gjson.GetBytes(raw, "error.type").Str != tc.wantType {
			t.Errorf("%s: %d %s, want 431 in the route's envelope", tc.path, resp.StatusCode, raw)
		}
		if strings.HasPrefix(tc.path, "/v1/messages") != (gjson.GetBytes(raw, "type").Str == "error") {
			t.Errorf("%s: wrong dialect: %s", tc.path, raw)
		}
	}
	if n := len(h.fake.Requests()); n != 0 {
		t.Errorf("%d oversized requests reached the upstream", n)
	}
}

func TestItemMaxAge(t *testing.T) {
	h := newHarness(t, fakeupstream.Options{}, retain(1000))
	_, resp := turnOne(t, h)
	// Another replica with the same keyring but a max age the item is already past.
	old := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) { c.Sealer = h.ring; c.ItemMaxAge = time.Nanosecond })
	time.Sleep(2 * time.Millisecond)
	input := []any{json.RawMessage(resp.Output[0].RawJSON()), map[string]any{"role": "user", "content": "go on"}}
	_, err := old.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", input))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "compaction_item_expired" {
		t.Errorf("expired item: err = %v", err)
	}
	fresh := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) { c.Sealer = h.ring; c.ItemMaxAge = time.Hour })
	if _, err := fresh.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", input)); err != nil {
		t.Errorf("fresh item refused: %v", err)
	}
}
