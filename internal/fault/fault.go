// Package fault is compactd's one error model: what went wrong with a request, said once,
// without any API's wire format. Every error compactd answers itself — a refused body, a
// compaction that did not open, a summariser that failed, an upstream that broke off — is a
// *Fault; each API's adapter maps it to its own envelope and stream error event (the OpenAI
// `{"error":{…}}` object, Anthropic's `{"type":"error",…}`), so the code that decides a request
// has failed never knows which API it is answering.
//
// A Fault names the problem twice: Kind, the class every API has a status and an error type
// for (invalid request, rate limited, upstream failure, …), and Code, compactd's own
// machine-readable name for it (compaction_expired, upstream_stream_interrupted, …). An API maps
// the pair: OpenAI's envelope carries a code for nearly every fault, Anthropic's
// details.error_code only for the compaction faults its own API defines.
package fault

import (
	"net/http"
	"time"
)

// Kind is the class of a fault: what status it is answered with and what error type each API
// gives it.
type Kind uint8

// The kinds. The zero Kind is Invalid.
const (
	// Invalid: the request is wrong (400). Nothing was changed; the client must fix it.
	Invalid Kind = iota
	// Unauthenticated: no valid compactd client key (401).
	Unauthenticated
	// TooLarge: the body exceeds the size limit (413).
	TooLarge
	// HeadersTooLarge: the header block exceeds the limit (431).
	HeadersTooLarge
	// BodyTimeout: the body did not arrive in time (408).
	BodyTimeout
	// MethodNotAllowed: a method compactd refuses to proxy (405; CONNECT, TRACE).
	MethodNotAllowed
	// NotImplemented: a method compactd does not know (501).
	NotImplemented
	// RateLimited: the tenant's rate, compactd's compaction queue or the summariser's rate is
	// exhausted (429); RetryAfter says when to come back.
	RateLimited
	// Overloaded: compactd's own load (the in-flight body budget) refuses the request (503).
	Overloaded
	// Unavailable: the summariser failed; the turn was not compacted (502; Anthropic's 529).
	Unavailable
	// Timeout: the compaction ran out of time (504).
	Timeout
	// Upstream: the upstream API could not be reached, its answer could not be passed on, or its
	// stream broke off (502).
	Upstream
	// ClientClosed: the client went away before it was answered (499, nginx's).
	ClientClosed
)

// Fault is one error compactd answers itself.
type Fault struct {
	Kind Kind
	// Code is compactd's name for the problem (the constants below, or an API's own, such as
	// compaction_block_misplaced); "" for none.
	Code string
	// Param locates the problem in the request body in the API's own path syntax
	// (input[3].encrypted_content, messages.0.content.1): OpenAI's error.param, and on Anthropic
	// the "path: " its message starts with.
	Param   string
	Message string
	// RetryAfter, when positive, is sent as Retry-After (seconds, rounded up).
	RetryAfter time.Duration
	// Close asks the client to close the connection: the request body was not (all) read.
	Close bool
}

func (f *Fault) Error() string { return f.Message }

// Status is the HTTP status every API answers f's kind with. Adapters may differ where their API
// does (Anthropic answers Unavailable with 529, overloaded).
func (f *Fault) Status() int {
	switch f.Kind {
	case Unauthenticated:
		return http.StatusUnauthorized
	case TooLarge:
		return http.StatusRequestEntityTooLarge
	case HeadersTooLarge:
		return http.StatusRequestHeaderFieldsTooLarge
	case BodyTimeout:
		return http.StatusRequestTimeout
	case MethodNotAllowed:
		return http.StatusMethodNotAllowed
	case NotImplemented:
		return http.StatusNotImplemented
	case RateLimited:
		return http.StatusTooManyRequests
	case Overloaded:
		return http.StatusServiceUnavailable
	case Unavailable, Upstream:
		return http.StatusBadGateway
	case Timeout:
		return http.StatusGatewayTimeout
	case ClientClosed:
		return 499
	}
	return http.StatusBadRequest
}

// Retryable reports whether the same request may succeed later unchanged.
func (f *Fault) Retryable() bool {
	switch f.Kind {
	case RateLimited, Overloaded, Unavailable, Timeout, Upstream, BodyTimeout:
		return true
	}
	return false
}

// Codes compactd gives its own faults. An API's envelope may spell some of them its own way
// (OpenAI's compaction_item_expired for CompactionExpired) or leave them out.
const (
	CodeInvalidEncryptedContent    = "invalid_encrypted_content"    // a compaction that is not compactd's format, or failed its integrity check
	CodeCompactionExpired          = "compaction_expired"           // older than --item-max-age
	CodeCompactionSignatureInvalid = "compaction_signature_invalid" // a signed block whose signature does not verify
	CodeCompactionContentMismatch  = "compaction_content_mismatch"  // a block whose readable summary was edited
	CodeCompactionNotSmaller       = "compaction_not_smaller"       // the summary came back no smaller than what it replaces
	CodeCompactionBusy             = "compaction_busy"              // compactd's compaction queue is full
	CodeCompactionUnavailable      = "compaction_unavailable"       // the summariser failed or is rate limited
	CodeCompactionTimeout          = "compaction_timeout"           // the compaction ran out of time
	CodeCompactionNothing          = "compaction_nothing_to_summarize"
	CodeCompactionIncompleteTurn   = "compaction_incomplete_turn" // on-demand compaction of a turn with tool calls unanswered
	CodeTenantRateLimited          = "tenant_rate_limited"
	CodeServerOverloaded           = "server_overloaded"
	CodeRequestTooLarge            = "request_too_large"
	CodeHeadersTooLarge            = "request_headers_too_large"
	CodeBodyTimeout                = "request_body_timeout"
	CodeMethodNotImplemented       = "method_not_implemented"
	CodeMethodNotAllowed           = "method_not_allowed"
	CodeInvalidAPIKey              = "invalid_api_key"
	CodeNonCanonicalPath           = "non_canonical_path"
	CodeUpstreamUnavailable        = "upstream_unavailable"
	CodeUpstreamInvalid            = "upstream_response_invalid"
	CodeUpstreamInterrupted        = "upstream_stream_interrupted"
	CodeInvalidJSON                = "invalid_json" // the body is not JSON (both envelopes carry it in the message only)
	CodeInvalidValue               = "invalid_value"
	CodeMissingParameter           = "missing_required_parameter"
)

// InvalidParam is the 400 for a value at param.
func InvalidParam(param, code, msg string) *Fault {
	return &Fault{Kind: Invalid, Param: param, Code: code, Message: msg}
}
