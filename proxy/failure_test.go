package proxy_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/proxy"
)

// downSummarizer fails every call with err.
type downSummarizer struct{ err error }

func (d downSummarizer) Summarize(context.Context, summarizer.Request) (summarizer.Result, error) {
	return summarizer.Result{}, d.err
}

var errOutage = &summarizer.Error{Status: 503, Retryable: true, Err: errors.New("upstream overloaded")}

func TestParseFailurePolicies(t *testing.T) {
	tests := []struct {
		in      string
		want    proxy.FailurePolicies
		wantErr bool
	}{
		{"", proxy.FailurePolicies{dialect.Responses: "fail", dialect.Messages: "fail"}, false},
		{"extractive", proxy.FailurePolicies{dialect.Responses: "extractive", dialect.Messages: "extractive", dialect.Chat: "extractive"}, false},
		{"responses=passthrough,messages=extractive", proxy.FailurePolicies{dialect.Responses: "passthrough", dialect.Messages: "extractive"}, false},
		{"responses=passthrough", proxy.FailurePolicies{dialect.Responses: "passthrough", dialect.Messages: "fail"}, false},
		{"chat=passthrough", proxy.FailurePolicies{dialect.Responses: "fail", dialect.Messages: "fail", dialect.Chat: "passthrough"}, false},
		{"retry", nil, true},
		{"openai=fail", nil, true},
	}
	for _, tt := range tests {
		got, err := proxy.ParseFailurePolicies(tt.in)
		if (err != nil) != tt.wantErr || (!tt.wantErr && !maps.Equal(got, tt.want)) {
			t.Errorf("ParseFailurePolicies(%q) = %+v, %v", tt.in, got, err)
		}
	}
}

func TestResponsesFailurePolicies(t *testing.T) {
	tests := []struct {
		policy     proxy.FailurePolicy
		err        error
		wantStatus int
		wantCode   string
	}{
		{proxy.PolicyFail, errOutage, 502, "compaction_failed"},
		{proxy.PolicyFail, summarizer.ErrCircuitOpen, 502, "compaction_failed"},
		{proxy.PolicyPassthrough, errOutage, 200, ""},
		{proxy.PolicyExtractive, errOutage, 200, ""},
		{proxy.PolicyExtractive, summarizer.ErrBusy, 429, "rate_limit_exceeded"},
		{proxy.PolicyPassthrough, summarizer.ErrBusy, 429, "rate_limit_exceeded"},
	}
	for _, tt := range tests {
		t.Run(string(tt.policy)+"/"+tt.err.Error(), func(t *testing.T) {
			h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) {
				c.Summarizer = downSummarizer{tt.err}
				c.RetainTokens = 1000
				c.FailurePolicies = proxy.FailurePolicies{dialect.Responses: tt.policy, dialect.Messages: tt.policy}
			})
			var raw *http.Response
			resp, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
				option.WithJSONSet("input", history(6, 400)), threshold(2000), option.WithResponseInto(&raw))
			if tt.wantStatus != 200 {
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != tt.wantStatus || apiErr.Code != tt.wantCode {
					t.Fatalf("err = %v, want %d %s", err, tt.wantStatus, tt.wantCode)
				}
				if tt.wantStatus == 429 && apiErr.Response.Header.Get("Retry-After") == "" {
					t.Error("429 without Retry-After")
				}
				if n := len(h.upstream(dialect.Responses)); n != 0 {
					t.Errorf("a failed compaction still called the upstream %d times", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			body := string(h.upstream(dialect.Responses)[0].Body)
			switch tt.policy {
			case proxy.PolicyPassthrough:
				if resp.Output[0].Type == "compaction" || raw.Header.Get("X-Compactd-Warning") == "" || !strings.Contains(body, marker("A", 0)) {
					t.Errorf("passthrough: output[0] %s, warning %q", resp.Output[0].Type, raw.Header.Get("X-Compactd-Warning"))
				}
			case proxy.PolicyExtractive:
				if resp.Output[0].Type != "compaction" || !strings.Contains(body, jsonText(handoff.Prefix)) || !strings.Contains(body, jsonText(summarizer.ExtractiveHeading)) {
					t.Errorf("extractive: output[0] %s; upstream lacks the extractive summary", resp.Output[0].Type)
				}
			}
		})
	}
}

func TestMessagesFailurePolicies(t *testing.T) {
	for _, tt := range []struct {
		policy     proxy.FailurePolicy
		wantStatus int
	}{{proxy.PolicyFail, 529}, {proxy.PolicyPassthrough, 200}, {proxy.PolicyExtractive, 200}} {
		t.Run(string(tt.policy), func(t *testing.T) {
			h := newMsgHarness(t, func(c *proxy.Config) {
				c.Summarizer = downSummarizer{errOutage}
				c.FailurePolicies = proxy.FailurePolicies{dialect.Messages: tt.policy}
			})
			msg, err := h.ant.Beta.Messages.New(context.Background(), params(append(longHistory(16), userText("next?")), compactEdit(50_000, false)))
			if tt.wantStatus != 200 {
				if code, errCode, _ := apiError(t, err); code != tt.wantStatus || errCode != "compaction_unavailable" {
					t.Fatalf("status %d code %q, want %d compaction_unavailable", code, errCode, tt.wantStatus)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			hasBlock := msg.Content[0].Type == "compaction"
			if tt.policy == proxy.PolicyPassthrough && hasBlock {
				t.Error("passthrough still compacted")
			}
			cb, _ := msg.Content[0].AsAny().(anthropic.BetaCompactionBlock)
			if tt.policy == proxy.PolicyExtractive && (!hasBlock || !strings.HasPrefix(cb.Content, summarizer.ExtractiveHeading)) {
				t.Errorf("extractive: content[0] = %s", msg.Content[0].RawJSON())
			}
		})
	}
}
