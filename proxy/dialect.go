package proxy

import (
	"net/http"

	"github.com/compactd/compactd/internal/dialect/chat"
	"github.com/compactd/compactd/internal/dialect/messages"
	"github.com/compactd/compactd/internal/dialect/responses"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/turn"
)

// The front's view of an API is turn.Dialect (internal/turn): its name, what the engine needs of
// it, its words, its error envelope and stream error event, its keep-alive and terminal event.
// The gate picks it by path (dialectOf) before any route; a compacting route's adapter is chosen
// when the route is registered (New).

// dialect is one API's wire, as the front needs it.
type dialect = turn.Dialect

// The APIs compactd serves, each behind its adapter.
var (
	dialectOpenAI    dialect = responses.Adapter{}
	dialectAnthropic dialect = messages.Adapter{}
	dialectChat      dialect = chat.Adapter{}
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
