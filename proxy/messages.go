package proxy

import "net/http"

// handleMessages serves POST /v1/messages. Until Messages-side compaction lands it is plain
// pass-through to the Anthropic upstream.
func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	s.forwardAnthropic.ServeHTTP(w, r)
}

// handleCountTokens serves POST /v1/messages/count_tokens.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	s.forwardAnthropic.ServeHTTP(w, r)
}
