package proxy

import (
	"net/http"

	"github.com/compactd/compactd/internal/api"
	dialectname "github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
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
	renderError(f *fault.Fault) wireError
	// errorEvent is e as the stream's terminal error event, once a stream is committed; t is
	// the turn (sequence numbers and the response id, where the dialect has them).
	errorEvent(f *fault.Fault, t *turnState) []byte
	// noun is what the dialect calls a compaction in messages: "item" or "block".
	noun() string
	// held is what the client holds of a conversation, for a message that says it is still good.
	held() string
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
func (responsesDialect) held() string           { return "items" }
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
func (responsesDialect) renderError(f *fault.Fault) wireError { return api.OpenAIFault(f) }
func (responsesDialect) terminal(data []byte) bool {
	switch eventType(data) {
	case "response.completed", "response.failed", "response.incomplete", "error":
		return true
	}
	return false
}
func (responsesDialect) modifyResponse(s *Server) func(*http.Response) error { return s.modifyResponse }
func (responsesDialect) errorEvent(f *fault.Fault, t *turnState) []byte {
	seq, id := 0, ""
	if t != nil {
		seq, id = t.nextSeq(), t.responseID
	}
	return api.OpenAIFault(f).SSE(seq, id)
}

// messagesDialect is the Anthropic Messages API.
type messagesDialect struct{}

func (messagesDialect) String() string         { return string(dialectname.Messages) }
func (messagesDialect) name() dialectname.Name { return dialectname.Messages }
func (messagesDialect) noun() string           { return "block" }
func (messagesDialect) held() string           { return "messages and compaction blocks" }
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

func (messagesDialect) keepAlive(bool) []byte                { return pingEvent }
func (messagesDialect) renderError(f *fault.Fault) wireError { return anthropicFault(f) }
func (messagesDialect) errorEvent(f *fault.Fault, _ *turnState) []byte {
	return anthropicFault(f).SSE()
}
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

// writeFault answers f as an HTTP response in d's envelope.
func writeFault(w http.ResponseWriter, d dialect, f *fault.Fault) {
	if f.Close {
		w.Header().Set("Connection", "close")
	}
	d.renderError(f).Write(w)
}

// writeFaultTo answers f in d's envelope: as an HTTP response, or, once t's stream is committed,
// as the stream's error event.
func writeFaultTo(w http.ResponseWriter, d dialect, t *turnState, f *fault.Fault) {
	if t != nil && t.committed {
		_, _ = w.Write(d.errorEvent(f, t))
		_ = http.NewResponseController(w).Flush()
		return
	}
	writeFault(w, d, f)
}

// anthropicFault is f in Anthropic's envelope, with a request id of compactd's own.
func anthropicFault(f *fault.Fault) *api.AnthropicError {
	return api.AnthropicFault(f, engine.NewID("req_compactd_"))
}

// eventType is the "type" member of an event's JSON object data ("" for anything else).
func eventType(data []byte) string {
	if len(data) == 0 || data[0] != '{' {
		return ""
	}
	return gjson.GetBytes(data, "type").Str
}
