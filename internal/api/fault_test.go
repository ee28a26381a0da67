package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/fault"
)

// TestFaultEnvelopes pins what each fault compactd raises looks like in both envelopes: the
// status, error type and code the OpenAI and Anthropic SDKs (and the agents on them) branch on.
func TestFaultEnvelopes(t *testing.T) {
	type env struct {
		status     int
		typ, code  string
		msgContain string
	}
	tests := []struct {
		name      string
		f         fault.Fault
		openai    env
		anthropic env
	}{
		{"open failed", fault.Fault{Code: fault.CodeInvalidEncryptedContent, Param: "input[0].encrypted_content", Message: "m"},
			env{400, "invalid_request_error", "invalid_encrypted_content", "m"}, env{400, "invalid_request_error", "", "input[0].encrypted_content: m"}},
		{"expired", fault.Fault{Code: fault.CodeCompactionExpired, Message: "m"},
			env{400, "invalid_request_error", "compaction_item_expired", "m"}, env{400, "invalid_request_error", "compaction_block_expired", "m"}},
		{"signature", fault.Fault{Code: fault.CodeCompactionSignatureInvalid, Message: "m"},
			env{400, "invalid_request_error", "invalid_encrypted_content", "m"}, env{400, "invalid_request_error", "compaction_signature_invalid", "m"}},
		{"not smaller", fault.Fault{Code: fault.CodeCompactionNotSmaller, Message: "m"},
			env{400, "invalid_request_error", "compaction_not_smaller", "m"}, env{400, "invalid_request_error", "compaction_not_smaller", "m"}},
		{"busy", fault.Fault{Kind: fault.RateLimited, Code: fault.CodeCompactionBusy, Message: "m"},
			env{429, "requests", "rate_limit_exceeded", "m"}, env{429, "rate_limit_error", "", "m"}},
		{"summariser rate limited", fault.Fault{Kind: fault.RateLimited, Code: fault.CodeCompactionUnavailable, Message: "m"},
			env{429, "requests", "rate_limit_exceeded", "m"}, env{429, "rate_limit_error", "compaction_unavailable", "m"}},
		{"summariser failed", fault.Fault{Kind: fault.Unavailable, Code: fault.CodeCompactionUnavailable, Message: "m"},
			env{502, "server_error", "compaction_failed", "m"}, env{529, "overloaded_error", "compaction_unavailable", "m"}},
		{"compaction timeout", fault.Fault{Kind: fault.Timeout, Code: fault.CodeCompactionTimeout, Message: "m"},
			env{504, "server_error", "compaction_timeout", "m"}, env{504, "timeout_error", "compaction_timeout", "m"}},
		{"tenant rate", fault.Fault{Kind: fault.RateLimited, Code: fault.CodeTenantRateLimited, Message: "m"},
			env{429, "requests", "rate_limit_exceeded", "m"}, env{429, "rate_limit_error", "", "m"}},
		{"budget", fault.Fault{Kind: fault.Overloaded, Code: fault.CodeServerOverloaded, Message: "m"},
			env{503, "server_error", "server_overloaded", "m"}, env{503, "overloaded_error", "", "m"}},
		{"key", fault.Fault{Kind: fault.Unauthenticated, Code: fault.CodeInvalidAPIKey, Message: "m"},
			env{401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided: m"}, env{401, "authentication_error", "", "invalid x-api-key: m"}},
		{"too large", fault.Fault{Kind: fault.TooLarge, Code: fault.CodeRequestTooLarge, Message: "m"},
			env{413, "invalid_request_error", "request_too_large", "m"}, env{413, "request_too_large", "", "m"}},
		{"headers", fault.Fault{Kind: fault.HeadersTooLarge, Code: fault.CodeHeadersTooLarge, Message: "m"},
			env{431, "invalid_request_error", "request_headers_too_large", "m"}, env{431, "invalid_request_error", "", "m"}},
		{"body timeout", fault.Fault{Kind: fault.BodyTimeout, Code: fault.CodeBodyTimeout, Message: "m"},
			env{408, "invalid_request_error", "request_body_timeout", "m"}, env{408, "invalid_request_error", "request_body_timeout", "m"}},
		{"method", fault.Fault{Kind: fault.NotImplemented, Code: fault.CodeMethodNotImplemented, Message: "m"},
			env{501, "invalid_request_error", "method_not_implemented", "m"}, env{501, "invalid_request_error", "", "m"}},
		{"connect", fault.Fault{Kind: fault.MethodNotAllowed, Code: fault.CodeMethodNotAllowed, Message: "m"},
			env{405, "invalid_request_error", "method_not_allowed", "m"}, env{405, "invalid_request_error", "", "m"}},
		{"path", fault.Fault{Code: fault.CodeNonCanonicalPath, Message: "m"},
			env{400, "invalid_request_error", "non_canonical_path", "m"}, env{400, "invalid_request_error", "non_canonical_path", "m"}},
		{"upstream down", fault.Fault{Kind: fault.Upstream, Code: fault.CodeUpstreamUnavailable, Message: "m"},
			env{502, "server_error", "upstream_unavailable", "m"}, env{502, "api_error", "", "m"}},
		{"upstream cut", fault.Fault{Kind: fault.Upstream, Code: fault.CodeUpstreamInterrupted, Message: "m"},
			env{502, "server_error", "upstream_stream_interrupted", "m"}, env{502, "api_error", "", "m"}},
		{"json", fault.Fault{Code: fault.CodeInvalidJSON, Message: "m"},
			env{400, "invalid_request_error", "", "We could not parse the JSON body of your request: m"}, env{400, "invalid_request_error", "", "compactd could not parse the request body: m"}},
		{"client gone", fault.Fault{Kind: fault.ClientClosed, Message: "m"},
			env{499, "invalid_request_error", "", "m"}, env{499, "invalid_request_error", "", "m"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := OpenAIFault(&tt.f)
			var ob struct {
				Error struct {
					Type    string  `json:"type"`
					Code    *string `json:"code"`
					Param   *string `json:"param"`
					Message string  `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(o.Body(), &ob); err != nil {
				t.Fatal(err)
			}
			code := ""
			if ob.Error.Code != nil {
				code = *ob.Error.Code
			}
			if got := (env{o.Status, ob.Error.Type, code, ob.Error.Message}); got != tt.openai {
				t.Errorf("OpenAI = %+v, want %+v", got, tt.openai)
			}
			if tt.f.Param != "" && (ob.Error.Param == nil || *ob.Error.Param != tt.f.Param) {
				t.Errorf("OpenAI param = %v, want %q", ob.Error.Param, tt.f.Param)
			}
			a := AnthropicFault(&tt.f, "req_1")
			var ab struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
					Details *struct {
						ErrorCode string `json:"error_code"`
					} `json:"details"`
				} `json:"error"`
				RequestID string `json:"request_id"`
			}
			if err := json.Unmarshal(a.Body(), &ab); err != nil {
				t.Fatal(err)
			}
			code = ""
			if ab.Error.Details != nil {
				code = ab.Error.Details.ErrorCode
			}
			if got := (env{a.Status, ab.Error.Type, code, ab.Error.Message}); got != tt.anthropic {
				t.Errorf("Anthropic = %+v, want %+v", got, tt.anthropic)
			}
			if ab.Type != "error" || ab.RequestID != "req_1" {
				t.Errorf("Anthropic envelope = %s", a.Body())
			}
		})
	}
}

func TestFaultRetryAfter(t *testing.T) {
	f := &fault.Fault{Kind: fault.RateLimited, RetryAfter: 3 * time.Second}
	if OpenAIFault(f).RetryAfter != 3*time.Second || AnthropicFault(f, "").RetryAfter != 3*time.Second {
		t.Fatal("RetryAfter not carried")
	}
}
