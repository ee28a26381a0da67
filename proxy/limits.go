package proxy

import (
	"fmt"
	"net/http"
	"time"

	"github.com/compactd/compactd/api"
	"github.com/compactd/compactd/compact"
)

// Request limits that must answer in the dialect of the route. net/http answers an oversized
// header block itself, in plain text, before any handler runs; so serve gives the http.Server
// twice this limit and this check answers everything between in the API's own envelope.

// headerBytes is the size of a request's header block as sent (near enough: names, values,
// separators and the request line).
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// limitHeaders answers 431 when the header block exceeds Config.MaxHeaderBytes.
func (s *Server) limitHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.MaxHeaderBytes <= 0 || headerBytes(r) <= s.cfg.MaxHeaderBytes {
			next.ServeHTTP(w, r)
			return
		}
		msg := fmt.Sprintf("The request headers exceed compactd's limit of %d bytes; raise --max-header-bytes (COMPACTD_MAX_HEADER_BYTES) if this is expected.", s.cfg.MaxHeaderBytes)
		if isAnthropicPath(r.URL.Path) {
			(&api.AnthropicError{Status: http.StatusRequestHeaderFieldsTooLarge, Type: "invalid_request_error", Message: msg}).Write(w)
			return
		}
		(&api.OpenAIError{Status: http.StatusRequestHeaderFieldsTooLarge, Type: "invalid_request_error", Code: "request_headers_too_large", Message: msg}).Write(w)
	})
}

// expired reports whether a compaction payload is older than Config.ItemMaxAge allows.
func (s *Server) expired(p *compact.Payload) bool {
	return s.cfg.ItemMaxAge > 0 && p.CreatedAt > 0 && time.Since(time.Unix(p.CreatedAt, 0)) > s.cfg.ItemMaxAge
}

const expiredMessage = "The compaction item is older than this compactd accepts (--item-max-age); start a new conversation, or compact it again before it expires."
