package proxy

import (
	"net/http"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/dialect/messages"
	"github.com/compactd/compactd/internal/dialect/responses"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/turn"
	"github.com/tidwall/gjson"
)

// The front's view of an API is turn.Dialect (internal/turn): its name, what the engine needs of
// it, its words, its error envelope and stream error event, its keep-alive and terminal event.
// Each route's API is chosen once (dialectOf for the gate, the route's adapter for its turns).
// The Messages and Chat Completions APIs are still served by their own handlers in this package
// (messages*.go, chat.go) until their adapters replace them; legacyDialect is what those
// handlers need beyond turn.Dialect.

// dialect is one API's wire, as the front needs it.
type dialect = turn.Dialect

// legacyDialect is what the handlers not yet behind the turn seam need of their API.
type legacyDialect interface {
	dialect
	// compactionItem renders a compaction as the API's block (Messages); nil: none.
	compactionItem(c *engine.Compaction) []byte
	// modifyResponse is the ReverseProxy hook of the API's routes.
	modifyResponse(s *Server) func(*http.Response) error
}

var (
	dialectOpenAI    dialect = responses.Adapter{}
	dialectAnthropic dialect = messages.Adapter{}
)

// apiName is d's name as logs, metrics labels and the event log spell it.
func apiName(d dialect) string { return string(d.Name()) }

// writeFault answers f as an HTTP response in d's envelope.
func writeFault(w http.ResponseWriter, d dialect, f *fault.Fault) {
	if f.Close {
		w.Header().Set("Connection", "close")
	}
	d.Fault(f).Write(w)
}

// writeFaultTo answers f in d's envelope: as an HTTP response, or, once st's stream is
// committed, as the stream's error event.
func writeFaultTo(w http.ResponseWriter, d dialect, st *turn.Stream, f *fault.Fault) {
	if st != nil && st.Committed {
		_, _ = w.Write(d.FaultEvent(f, st))
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
