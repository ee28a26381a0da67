package proxy

import (
	"net/http"
	"time"

	"github.com/compactd/compactd/internal/api"
	dialectname "github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/tidwall/gjson"
)

// The dialect seam. The compaction engine (internal/engine) is the same for every API; what
// differs is the wire: how a body is parsed into neutral items, how the handoff and a compaction
// item or block look, how an error or a keep-alive is written before and after a stream is
// committed. Each API is one dialect value, chosen once per route (dialectOf), and everything the
// handlers need to know of it goes through this interface. The per-API handlers
// (responses*.go, messages*.go) only parse and render; the compaction itself is engine.Compact.

// dialect is one API's wire format.
type dialect interface {
	// String is the dialect's name (dialectname.Name): logs' "api" attribute, the metrics' api
	// label, the event log's API.
	String() string
	// name is the dialect's name: its --compact-threshold and --failure-policy route, its
	// summariser (Config.MessagesSummarizer), its speculation keys.
	name() dialectname.Name
	// engine is what the compaction engine needs to know of the dialect.
	engine() engine.Dialect
	// compactionItem renders a compaction as the dialect's item (Responses) or block (Messages).
	compactionItem(c *engine.Compaction) []byte
	// keepAlive is the bytes that hold a committed stream open while compactd compacts.
	keepAlive(first bool) []byte
	// renderError is e in the dialect's error envelope.
	renderError(e *routeError) wireError
	// errorEvent is e as the stream's terminal error event, once a stream is committed; t is
	// the turn (sequence numbers and the response id, where the dialect has them).
	errorEvent(e *routeError, t *turn) []byte
	// noun is what the dialect calls a compaction in messages: "item" or "block".
	noun() string
	// terminal reports whether an SSE event's (trimmed) data ends the dialect's stream normally,
	// so a stream that stops before one broke off (the stream guard).
	terminal(data []byte) bool
	// modifyResponse is the ReverseProxy hook of the dialect's routes (nil: none): where a
	// rewritten turn's answer is rewritten, as a stream.
	modifyResponse(s *Server) func(*http.Response) error
}

// wireError is an error envelope that can be written as an HTTP response.
type wireError interface {
	Write(w http.ResponseWriter)
}

var (
	dialectOpenAI    dialect = responsesDialect{}
	dialectAnthropic dialect = messagesDialect{}
)

// Seal kinds: the crypto binding of each dialect's compactions, so an item sealed for one API
// never opens as the other's.
const (
	sealKind          = "openai.compaction"
	anthropicSealKind = "anthropic.compaction"
)

// responsesDialect is the OpenAI Responses API (and the OpenAI envelope of every OpenAI route).
type responsesDialect struct{}

func (responsesDialect) String() string         { return string(dialectname.Responses) }
func (responsesDialect) name() dialectname.Name { return dialectname.Responses }
func (responsesDialect) noun() string           { return "item" }
func (responsesDialect) engine() engine.Dialect {
	return engine.Dialect{Name: dialectname.Responses, SealKind: sealKind, Handoff: handoff.Text, Memo: true,
		UserMessage: api.UserMessage}
}
func (responsesDialect) compactionItem(c *engine.Compaction) []byte {
	return api.CompactionItem(c.ID, c.EncryptedContent)
}

// keepAlive is an SSE comment: no event a client parses.
func (responsesDialect) keepAlive(bool) []byte {
	return []byte(": compactd is compacting the conversation\n\n")
}
func (responsesDialect) renderError(e *routeError) wireError { return e.openAI() }
func (responsesDialect) terminal(data []byte) bool {
	switch eventType(data) {
	case "response.completed", "response.failed", "response.incomplete", "error":
		return true
	}
	return false
}
func (responsesDialect) modifyResponse(s *Server) func(*http.Response) error { return s.modifyResponse }
func (responsesDialect) errorEvent(e *routeError, t *turn) []byte {
	seq, id := 0, ""
	if t != nil {
		seq, id = t.nextSeq(), t.responseID
	}
	return e.openAI().SSE(seq, id)
}

// messagesDialect is the Anthropic Messages API.
type messagesDialect struct{}

func (messagesDialect) String() string         { return string(dialectname.Messages) }
func (messagesDialect) name() dialectname.Name { return dialectname.Messages }
func (messagesDialect) noun() string           { return "block" }
func (messagesDialect) engine() engine.Dialect {
	return engine.Dialect{Name: dialectname.Messages, SealKind: anthropicSealKind, Handoff: handoff.MessagesText, Memo: true,
		UserMessage: messagesUserMessage}
}
func (messagesDialect) compactionItem(c *engine.Compaction) []byte {
	return api.CompactionBlock(c.Summary, c.EncryptedContent, c.Signature)
}

// messagesUserMessage is a Messages user message of one text block.
func messagesUserMessage(text string) []byte {
	return api.AnthropicMessage("user", [][]byte{api.TextBlock(text)})
}

// pingEvent keeps a committed Messages stream alive while the summariser runs.
var pingEvent = api.AppendSSE(nil, "ping", []byte(`{"type": "ping"}`))

func (messagesDialect) keepAlive(bool) []byte                    { return pingEvent }
func (messagesDialect) renderError(e *routeError) wireError      { return e.anthropic() }
func (messagesDialect) errorEvent(e *routeError, _ *turn) []byte { return e.anthropic().SSE() }
func (messagesDialect) terminal(data []byte) bool {
	switch eventType(data) {
	case "message_stop", "error":
		return true
	}
	return false
}
func (messagesDialect) modifyResponse(s *Server) func(*http.Response) error {
	return s.modifyMessagesResponse
}

// routeError is an error compactd answers itself, dialect-neutral; the route's dialect renders
// it (renderError, errorEvent). Param locates the problem in the request: OpenAI's error.param,
// and on Anthropic the "path: " the message starts with.
type routeError struct {
	Status  int
	Type    string // error.type in both envelopes, unless AnthropicType is set
	Code    string // OpenAI's error.code; also Anthropic's details.error_code unless AnthropicCode is set
	Param   string
	Message string
	// AnthropicStatus, AnthropicType and AnthropicCode override Status, Type and Code in
	// Anthropic's envelope (AnthropicCode "-": no error_code).
	AnthropicStatus              int
	AnthropicType, AnthropicCode string
	// AnthropicMessage, when set, is the message in Anthropic's envelope.
	AnthropicMessage string
	RetryAfter       time.Duration
	// Close asks the client to close the connection: the request body was not (all) read.
	Close bool
}

// write answers e as an HTTP response in d's envelope.
func (e *routeError) write(w http.ResponseWriter, d dialect) {
	if e.Close {
		w.Header().Set("Connection", "close")
	}
	d.renderError(e).Write(w)
}

// writeTo answers e in d's envelope: as an HTTP response, or, once t's stream is committed, as
// the stream's error event.
func (e *routeError) writeTo(w http.ResponseWriter, d dialect, t *turn) {
	if t != nil && t.committed {
		_, _ = w.Write(d.errorEvent(e, t))
		_ = http.NewResponseController(w).Flush()
		return
	}
	e.write(w, d)
}

func (e *routeError) openAI() *api.OpenAIError {
	return &api.OpenAIError{Status: e.Status, Type: e.Type, Code: e.Code, Param: e.Param, Message: e.Message, RetryAfter: e.RetryAfter}
}

func (e *routeError) anthropic() *api.AnthropicError {
	status, typ, code, msg := e.Status, e.Type, e.Code, e.Message
	if e.AnthropicStatus != 0 {
		status = e.AnthropicStatus
	}
	if e.AnthropicType != "" {
		typ = e.AnthropicType
	}
	if e.AnthropicCode != "" {
		code = e.AnthropicCode
	}
	if code == "-" {
		code = ""
	}
	if e.AnthropicMessage != "" {
		msg = e.AnthropicMessage
	}
	if e.Param != "" {
		msg = e.Param + ": " + msg
	}
	return &api.AnthropicError{Status: status, Type: typ, ErrorCode: code, Message: msg,
		RequestID: engine.NewID("req_compactd_"), RetryAfter: e.RetryAfter}
}

// eventType is the "type" member of an event's JSON object data ("" for anything else).
func eventType(data []byte) string {
	if len(data) == 0 || data[0] != '{' {
		return ""
	}
	return gjson.GetBytes(data, "type").Str
}
