package fakeupstream

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/compactd/compactd/internal/sse"
)

// marshal encodes v without HTML escaping (the real APIs send "<" as is) and without the
// encoder's trailing newline. Struct field order is fixed, so the bytes are deterministic.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("fakeupstream: marshal: " + err.Error()) // only our own types are encoded
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func (c *call) writeJSON(status int, v any) {
	h := c.w.Header()
	h.Set("Content-Type", "application/json")
	c.w.WriteHeader(status)
	_, _ = c.w.Write(marshal(v))
}

// HeaderSSE asks for a stream in another of the spellings the event-stream grammar allows, so
// a client's SSE reader is tested on it: "crlf" ends lines with CRLF, "multiline" splits each
// event's JSON over two data lines (after its first comma, between tokens, so the data the
// grammar dispatches is the same JSON), "crlf,multiline" both. A test hook like the others.
const HeaderSSE = "X-Fake-SSE"

// sseStream writes one Server-Sent Events stream, flushing after every event, and carries out
// an X-Fake-Cut by writing half of the next event and aborting the connection.
type sseStream struct {
	c         *call
	rc        *http.ResponseController
	cut       int // events to write before cutting; -1 = never
	sent      int
	crlf      bool
	multiline bool
	buf       []byte
	split     []byte
}

func (c *call) startSSE() *sseStream {
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	s := &sseStream{c: c, rc: http.NewResponseController(c.w), cut: -1}
	style := c.r.Header.Get(HeaderSSE)
	s.crlf, s.multiline = strings.Contains(style, "crlf"), strings.Contains(style, "multiline")
	if v := c.r.Header.Get(HeaderCut); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			s.cut = n
		}
	}
	c.w.WriteHeader(http.StatusOK)
	_ = s.rc.Flush()
	return s
}

// event writes an event whose "type" is name (on the event: line and first in the JSON, as the
// real APIs order it), then "sequence_number" when seq >= 0, then fields in key order. It returns
// false when the client has gone, so the caller stops producing.
func (s *sseStream) event(name string, seq int64, fields map[string]any) bool {
	delete(fields, "type")
	delete(fields, "sequence_number")
	b := append([]byte(`{"type":`), marshal(name)...)
	if seq >= 0 {
		b = append(b, `,"sequence_number":`...)
		b = strconv.AppendInt(b, seq, 10)
	}
	if rest := marshal(fields); len(rest) > 2 {
		b = append(b, ',')
		b = append(b, rest[1:]...)
	} else {
		b = append(b, '}')
	}
	return s.raw(name, b)
}

func (s *sseStream) raw(name string, data []byte) bool {
	if s.c.ctx.Err() != nil {
		return false
	}
	if i := bytes.IndexByte(data, ','); s.multiline && i >= 0 {
		// JSON has no raw newline, so this one becomes a second data line, and the reader's
		// joining "\n" is whitespace between two tokens.
		s.split = append(append(append(s.split[:0], data[:i+1]...), '\n'), data[i+1:]...)
		data = s.split
	}
	b := sse.AppendEvent(s.buf[:0], name, data)
	if s.crlf {
		b = bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n"))
	}
	s.buf = b
	if s.sent == s.cut {
		// Mid-event: the client has a partial line and then a dropped connection, the way a
		// crashed upstream or a reset proxy looks.
		_, _ = s.c.w.Write(b[:len(b)/2])
		_ = s.rc.Flush()
		panic(http.ErrAbortHandler)
	}
	if _, err := s.c.w.Write(b); err != nil {
		return false
	}
	s.sent++
	return s.rc.Flush() == nil
}

// fail answers status with an error body in the route's dialect.
func (c *call) fail(status int, param, message string) {
	c.failAs(status, c.route == routeMessages || c.route == routeCountTokens, param, nil, message)
}

// refuse answers a refusal in its envelope: the route's, unless the refusal names one.
func (c *call) refuse(r *refusal) {
	anthropic := (c.route == routeMessages || c.route == routeCountTokens || r.anthropic) && !r.openai
	var code any
	if r.code != "" {
		code = r.code
	}
	c.failAs(r.status, anthropic, r.param, code, r.reason)
}

// failAs answers status with an Anthropic or OpenAI error body. code overrides the OpenAI code
// the status implies when non-nil; in an Anthropic body a string code is details.error_code.
func (c *call) failAs(status int, anthropic bool, param string, code any, message string) {
	if status == http.StatusTooManyRequests {
		c.w.Header().Set("Retry-After", "1")
	}
	if anthropic {
		reqID := c.id("req_", "error")
		c.w.Header().Set("request-id", reqID)
		body := anthropicErrorBody{Type: anthropicErrorType(status), Message: message}
		if s, ok := code.(string); ok && s != "" {
			body.Details = &anthropicErrorDetails{ErrorCode: s}
		}
		c.writeJSON(status, anthropicError{Type: "error", Error: body, RequestID: reqID})
		return
	}
	typ, def := openAIErrorType(status)
	if code == nil {
		code = def
	}
	e := openAIError{Message: message, Type: typ, Code: code}
	if param != "" {
		e.Param = param
	}
	c.writeJSON(status, struct {
		Error openAIError `json:"error"`
	}{e})
}

// openAIError has all four keys always present, as OpenAI sends them (nil encodes as null).
type openAIError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"`
	Code    any    `json:"code"`
}

func openAIErrorType(status int) (typ string, code any) {
	switch status {
	case http.StatusUnauthorized:
		return "invalid_request_error", "invalid_api_key"
	case http.StatusNotFound:
		return "invalid_request_error", nil
	case http.StatusTooManyRequests:
		return "requests", "rate_limit_exceeded"
	}
	if status >= 500 {
		return "server_error", "server_error"
	}
	return "invalid_request_error", nil
}

type anthropicError struct {
	Type      string             `json:"type"`
	Error     anthropicErrorBody `json:"error"`
	RequestID string             `json:"request_id"`
}

type anthropicErrorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	// Details carries the error_code the API gives some refusals (anthropic-sdk-go's and the
	// Node SDK's error classes key on it: "400 tool_reference_unresolved").
	Details *anthropicErrorDetails `json:"details,omitempty"`
}

type anthropicErrorDetails struct {
	ErrorCode string `json:"error_code"`
}

func anthropicErrorType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	if status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}
