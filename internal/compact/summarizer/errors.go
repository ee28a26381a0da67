package summarizer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
)

// ErrUnavailable matches (with errors.Is) every *Error: the summariser could not produce a
// summary. The proxy answers it in its own API's dialect (for example Anthropic's
// compaction_unavailable) instead of forwarding whatever the summariser's server said.
var ErrUnavailable = errors.New("summarizer: unavailable")

// ErrEmptySummary is the cause of an *Error when the summariser answered but produced no text.
var ErrEmptySummary = errors.New("summarizer: empty summary")

// ErrMalformedResponse is the cause of an *Error when a response arrived but could not be
// decoded. The decoder's own message is dropped because it can quote the body.
var ErrMalformedResponse = errors.New("summarizer: malformed response body")

// ErrNothingToSummarize is returned, unwrapped, when a request has no non-empty entries: that
// is a caller decision, not a summariser failure.
var ErrNothingToSummarize = errors.New("summarizer: nothing to summarize")

// Error is a summariser failure. It carries what a retry policy needs and deliberately nothing
// of the request or the upstream error body, which may echo prompt content or credentials.
type Error struct {
	// Status is the summariser's HTTP status code, or 0 if no response arrived (transport
	// failure, per-call timeout, invalid configuration).
	Status int
	// Retryable reports whether the same request may succeed later: transport failures,
	// timeouts, 408, 409, 429, 5xx, an x-should-retry: true header, and empty output that was
	// not cut off by the output limit. An unreachable summariser is not retryable.
	Retryable bool
	// Unreachable reports that no connection could be made: the summariser's host name does not
	// resolve, nothing listens on its port (connection refused), or no route leads to it. That is
	// a wrong address or a summariser that is down, which a retry seconds later does not cure, so
	// Resilient does not retry it (the turn's failure policy applies at once) but its circuit
	// breaker counts it as an outage.
	Unreachable bool
	// Code is the upstream error code or type when the body had one (for example
	// "rate_limit_exceeded", "context_length_exceeded"); it never holds the message text.
	Code string
	// RetryAfter is the delay the upstream asked for in Retry-After, or 0.
	RetryAfter time.Duration
	// Err is the cause, sanitised: the SDK's status summary, a transport error, a context
	// error, ErrEmptySummary, or a decoding error.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("summarizer: ")
	if e.Status != 0 {
		b.WriteString("status ")
		b.WriteString(strconv.Itoa(e.Status))
		if e.Code != "" {
			b.WriteString(" (" + e.Code + ")")
		}
		b.WriteString(": ")
	}
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	} else {
		b.WriteString("unavailable")
	}
	return b.String()
}

// Unwrap exposes both ErrUnavailable and the cause, so errors.Is works for either.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrUnavailable}
	}
	return []error{ErrUnavailable, e.Err}
}

// classify turns an SDK call error into the package's error contract. parent is the caller's
// context: if it is done, its error is returned as is (the caller went away; there is nobody to
// answer). resp is the raw response when one arrived.
func classify(parent context.Context, resp *http.Response, err error) error {
	if perr := parent.Err(); perr != nil {
		return perr
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		// The per-call timeout fired while the caller was still waiting.
		return &Error{Retryable: true, Err: context.DeadlineExceeded}
	}
	if errors.Is(err, ErrAnswerTooLarge) {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		return &Error{Status: status, Err: ErrAnswerTooLarge} // a retry would be as large
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		e := &Error{
			Status:    apiErr.StatusCode,
			Retryable: retryableStatus(apiErr.StatusCode, apiErr.Response),
			Code:      apiErr.Code,
			// apierror.Error.Error() is a status summary without body or URL; rebuild it so
			// Err does not hold the request (and its Authorization header).
			Err: errors.New(apiErr.Error()),
		}
		switch {
		case contextOverflow(apiErr.StatusCode, apiErr.Code, apiErr.Message):
			// Normalised so Summarize can recognise it whatever the server's dialect.
			e.Code = codeContextLength
		case e.Code == "":
			e.Code = apiErr.Type
		}
		if apiErr.Response != nil {
			e.RetryAfter = retryAfter(apiErr.Response.Header)
		}
		return e
	}
	var antErr *anthropic.Error
	if errors.As(err, &antErr) {
		// Its Error() quotes the response body, which can echo the prompt: only the status goes
		// into Err. The code is error.details.error_code, else the error type
		// ("rate_limit_error", "overloaded_error").
		e := &Error{
			Status:    antErr.StatusCode,
			Retryable: retryableStatus(antErr.StatusCode, antErr.Response),
			Code:      string(antErr.ErrorCode()),
			Err:       fmt.Errorf("%d %s", antErr.StatusCode, http.StatusText(antErr.StatusCode)),
		}
		switch {
		case contextOverflow(antErr.StatusCode, e.Code, antErr.Message):
			e.Code = codeContextLength
		case e.Code == "":
			e.Code = string(antErr.Type())
		}
		if antErr.Response != nil {
			e.RetryAfter = retryAfter(antErr.Response.Header)
		}
		return e
	}
	if resp != nil {
		// A response arrived but could not be decoded: most often a wrong BaseURL answering
		// with HTML, which a retry would not fix unless the status says otherwise.
		e := &Error{Status: resp.StatusCode, Err: ErrMalformedResponse}
		if resp.StatusCode >= http.StatusBadRequest {
			e.Retryable = retryableStatus(resp.StatusCode, resp)
			e.RetryAfter = retryAfter(resp.Header)
		}
		return e
	}
	if unreachable(err) {
		return &Error{Unreachable: true, Err: err}
	}
	return &Error{Retryable: true, Err: err}
}

// unreachable reports whether a transport error says no connection could be made: any DNS
// failure (the name does not resolve, or no resolver answers), connection refused, and no route
// to the host or its network. A reset or a timeout on an established connection is not one: the
// summariser was there.
func unreachable(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

// codeContextLength is OpenAI's error code for a request over the model's context window.
const codeContextLength = "context_length_exceeded"

// contextOverflow reports whether a 400 says the prompt did not fit the summariser's window.
// OpenAI sets the code; vLLM, Ollama, LiteLLM and Anthropic ("prompt is too long") often only say
// so in the message, which is read here and never stored.
func contextOverflow(status int, code, message string) bool {
	if status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge {
		return false
	}
	if code == codeContextLength {
		return true
	}
	msg := strings.ToLower(message)
	for _, s := range []string{"context length", "context window", "maximum context", "prompt is too long", "too many tokens", "input is too long"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// isContextOverflow reports whether err is a summariser answer saying the input was too long.
func isContextOverflow(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == codeContextLength
}

// retryableStatus follows the SDK's own retry rule, which the package disables so the proxy can
// apply its policy: honour x-should-retry, else 408, 409, 429 and 5xx.
func retryableStatus(status int, resp *http.Response) bool {
	if resp != nil {
		switch resp.Header.Get("x-should-retry") {
		case "true":
			return true
		case "false":
			return false
		}
	}
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= http.StatusInternalServerError
}

// retryAfter reads Retry-After (seconds or an HTTP date) and OpenAI's retry-after-ms.
func retryAfter(h http.Header) time.Duration {
	if ms, err := strconv.ParseFloat(h.Get("retry-after-ms"), 64); err == nil && ms > 0 {
		return time.Duration(ms * float64(time.Millisecond))
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}
