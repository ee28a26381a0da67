package proxy

import (
	"net/http"

	"github.com/compactd/compactd/internal/dialect/responses"
	"github.com/compactd/compactd/internal/turn"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/relay"
)

// unrewritable replaces an upstream response compactd cannot rewrite with a 502 in the route's
// dialect's envelope (OpenAI's or Anthropic's), or, when compactd already committed the stream,
// with the dialect's terminal error events.
func (s *Server) unrewritable(resp *http.Response, d dialect, compacted bool, why string) {
	s.log.Warn("upstream response not passed on: compactd cannot rewrite it", "api", apiName(d), "reason", why, "status", resp.StatusCode)
	t := turnFrom(resp.Request.Context())
	e := invalidUpstream(d, compacted, why)
	var body []byte
	if t != nil && t.Committed {
		body = d.FaultEvent(e, t.st())
	} else {
		ae := d.Fault(e)
		body = ae.(interface{ Body() []byte }).Body()
		resp.StatusCode, resp.Status = http.StatusBadGateway, "502 Bad Gateway"
		resp.Header.Set("Content-Type", "application/json")
	}
	resp.Trailer = nil
	relay.ReplaceBody(resp, body)
}

// invalidUpstream is the 502 for an upstream answer compactd cannot pass on.
func invalidUpstream(d dialect, compacted bool, why string) *fault.Fault {
	return turn.UpstreamInvalid(d.Words(), compacted, why)
}

// upstreamErrorFromBody keeps the upstream's own message and code when it sent an OpenAI envelope.
func upstreamErrorFromBody(status int, body []byte) *api.OpenAIError {
	return responses.UpstreamError(status, body)
}

var doneMarker = []byte("[DONE]")

// dataPrefix starts a data line.
var dataPrefix = []byte("data:")
