package api

import (
	"errors"

	"github.com/compactd/compactd/internal/fault"
)

// The two envelopes a fault (internal/fault) is answered in. Responses and Chat Completions
// share OpenAI's; Messages has Anthropic's. Each maps a fault's kind to its API's status and error
// type, and its code to what that API's clients expect to find.

// OpenAIFault is f in OpenAI's envelope: error.type by kind, error.code the fault's code in
// OpenAI's spelling (every rate limit is rate_limit_exceeded, as OpenAI's own; a failed
// summariser is compaction_failed; an expired compaction is a compaction_item_expired).
func OpenAIFault(f *fault.Fault) *OpenAIError {
	typ := "server_error"
	switch f.Kind {
	case fault.Invalid, fault.Unauthenticated, fault.TooLarge, fault.HeadersTooLarge, fault.BodyTimeout,
		fault.MethodNotAllowed, fault.NotImplemented, fault.ClientClosed:
		typ = "invalid_request_error"
	case fault.RateLimited:
		typ = "requests"
	}
	code := f.Code
	switch {
	case f.Kind == fault.RateLimited:
		code = "rate_limit_exceeded"
	case f.Kind == fault.Unavailable:
		code = "compaction_failed"
	case code == fault.CodeCompactionExpired:
		code = "compaction_item_expired"
	case code == fault.CodeCompactionSignatureInvalid:
		code = fault.CodeInvalidEncryptedContent
	case code == fault.CodeInvalidJSON:
		code = ""
	}
	msg := f.Message
	switch {
	case f.Kind == fault.Unauthenticated:
		msg = "Incorrect API key provided: " + msg // OpenAI's own wording, which clients recognise
	case f.Code == fault.CodeInvalidJSON:
		msg = "We could not parse the JSON body of your request: " + msg // likewise
	}
	return &OpenAIError{Status: f.Status(), Type: typ, Code: code, Param: f.Param, Message: msg, RetryAfter: f.RetryAfter}
}

// anthropicUncoded are the codes Anthropic's envelope leaves out of details.error_code: faults its
// own API reports by error type alone.
var anthropicUncoded = map[string]bool{
	fault.CodeInvalidEncryptedContent: true, fault.CodeCompactionBusy: true, fault.CodeTenantRateLimited: true,
	fault.CodeServerOverloaded: true, fault.CodeRequestTooLarge: true, fault.CodeHeadersTooLarge: true,
	fault.CodeMethodNotImplemented: true, fault.CodeMethodNotAllowed: true, fault.CodeInvalidAPIKey: true,
	fault.CodeUpstreamUnavailable: true, fault.CodeUpstreamInvalid: true, fault.CodeUpstreamInterrupted: true,
	fault.CodeInvalidJSON: true, fault.CodeInvalidValue: true, fault.CodeMissingParameter: true,
}

// AnthropicFault is f in Anthropic's envelope: error.type by kind (a failed summariser is its
// transient 529 overloaded_error, which Anthropic's SDKs retry), details.error_code for the
// compaction faults (an expired compaction is a compaction_block_expired), the param as the
// "path: " the message starts with, and a request id of compactd's own.
func AnthropicFault(f *fault.Fault, requestID string) *AnthropicError {
	status, typ := f.Status(), "invalid_request_error"
	switch f.Kind {
	case fault.Unauthenticated:
		typ = "authentication_error"
	case fault.TooLarge:
		typ = "request_too_large"
	case fault.RateLimited:
		typ = "rate_limit_error"
	case fault.Overloaded:
		typ = "overloaded_error"
	case fault.Unavailable:
		status, typ = 529, "overloaded_error"
	case fault.Timeout:
		typ = "timeout_error"
	case fault.Upstream:
		typ = "api_error"
	}
	code := f.Code
	switch {
	case anthropicUncoded[code]:
		code = ""
	case code == fault.CodeCompactionExpired:
		code = "compaction_block_expired"
	}
	msg := f.Message
	switch {
	case f.Kind == fault.Unauthenticated:
		msg = "invalid x-api-key: " + msg // Anthropic's own wording, which clients recognise
	case f.Code == fault.CodeInvalidJSON:
		msg = "compactd could not parse the request body: " + msg
	}
	if f.Param != "" {
		msg = f.Param + ": " + msg
	}
	return &AnthropicError{Status: status, Type: typ, ErrorCode: code, Message: msg, RequestID: requestID, RetryAfter: f.RetryAfter}
}

// BodyFault is the 400 for a body a skim refused (ParseResponsesRequest, ParseMessagesRequest,
// ParseChatRequest): nothing of it is forwarded. Param locates the problem (input[3].content[1],
// messages.0.content.1) when there is one.
func BodyFault(err error) *fault.Fault {
	f := &fault.Fault{Message: err.Error()}
	var be *BodyError
	if errors.As(err, &be) {
		f.Param, f.Message = be.Param, be.Message
	}
	switch {
	case errors.Is(err, ErrInvalidJSON):
		f.Code = fault.CodeInvalidJSON
	case errors.Is(err, ErrTooDeep):
	default:
		f.Code = fault.CodeInvalidValue
	}
	return f
}
