package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/compactd/compactd/internal/sse"
)

// OpenAIError is an error compactd itself answers in the OpenAI envelope:
// {"error":{"message","type","param","code"}} with all four keys present.
type OpenAIError struct {
	Status  int
	Type    string // invalid_request_error, server_error, rate_limit_exceeded, …
	Code    string // "" renders as null
	Param   string // "" renders as null
	Message string
	// RetryAfter, when positive, is sent as a Retry-After header (seconds).
	RetryAfter time.Duration
}

func (e *OpenAIError) Error() string { return e.Message }

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Body renders the JSON envelope.
func (e *OpenAIError) Body() []byte {
	type inner struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	b, _ := json.Marshal(struct {
		Error inner `json:"error"`
	}{inner{e.Message, e.Type, nullable(e.Param), nullable(e.Code)}})
	return b
}

// Write sends the error as an HTTP response.
func (e *OpenAIError) Write(w http.ResponseWriter) {
	writeJSONError(w, e.Status, e.RetryAfter, e.Body())
}

// SSE renders the error as the two events a Responses stream ends with once it has started:
// an `error` event and `response.failed` carrying the same code.
func (e *OpenAIError) SSE(seq int, responseID string) []byte {
	code := e.Code
	if code == "" {
		code = e.Type
	}
	errEv, _ := json.Marshal(map[string]any{
		"type": "error", "code": code, "message": e.Message, "param": nullable(e.Param), "sequence_number": seq,
	})
	failed, _ := json.Marshal(map[string]any{
		"type": "response.failed", "sequence_number": seq + 1,
		"response": map[string]any{
			"id": responseID, "object": "response", "status": "failed",
			"error": map[string]any{"code": code, "message": e.Message},
		},
	})
	var b []byte
	b = AppendSSE(b, "error", errEv)
	return AppendSSE(b, "response.failed", failed)
}

// AppendSSE appends one server-sent event with an `event:` line: internal/sse's writer, which
// every stream compactd writes goes through.
func AppendSSE(dst []byte, event string, data []byte) []byte {
	return sse.AppendEvent(dst, event, data)
}

// Common OpenAI-dialect errors.
func InvalidRequest(param, code, msg string) *OpenAIError {
	return &OpenAIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Code: code, Message: msg}
}

// AnthropicError is an error compactd itself answers in Anthropic's envelope:
// {"type":"error","error":{"type","message","details":{"error_code"}},"request_id"}.
type AnthropicError struct {
	Status     int
	Type       string // invalid_request_error, authentication_error, overloaded_error, …
	ErrorCode  string // details.error_code, omitted when ""
	Message    string
	RequestID  string
	RetryAfter time.Duration
}

func (e *AnthropicError) Error() string { return e.Message }

// Body renders the JSON envelope.
func (e *AnthropicError) Body() []byte {
	inner := map[string]any{"type": e.Type, "message": e.Message}
	if e.ErrorCode != "" {
		inner["details"] = map[string]any{"error_code": e.ErrorCode}
	}
	env := map[string]any{"type": "error", "error": inner}
	if e.RequestID != "" {
		env["request_id"] = e.RequestID
	}
	b, _ := json.Marshal(env)
	return b
}

// Write sends the error as an HTTP response.
func (e *AnthropicError) Write(w http.ResponseWriter) {
	writeJSONError(w, e.Status, e.RetryAfter, e.Body())
}

// SSE renders the error as an Anthropic stream `error` event.
func (e *AnthropicError) SSE() []byte { return AppendSSE(nil, "error", e.Body()) }

func writeJSONError(w http.ResponseWriter, status int, retryAfter time.Duration, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
