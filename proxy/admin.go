package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/throttle"
)

// Failed admin-token attempts are throttled per client address (adminAuth; internal/throttle):
// each address has a token bucket of AdminFailureBurst attempts that refills by one every
// AdminFailureRefill. An attempt takes one; a right token gives it back, so an operator's
// ordinary use never drains the bucket. Once it is empty every admin call from the address is
// answered 429 with Retry-After, the right token too, and the token is not even compared: a
// right token that still worked would tell a guess that hit from one that missed, and the
// throttle would not slow guessing. The price is that a client sharing the operator's address
// (the same host, NAT, or a reverse proxy in front of compactd, where every caller is the
// proxy's address) can lock the admin API for about a minute by failing on purpose; the API is
// an operator's tool, and the alternative is an unbounded guessing rate.
const (
	AdminFailureBurst  = 10
	AdminFailureRefill = 6 * time.Second // 10 a minute once the burst is spent
)

// The admin API lets operators search and delete a conversation's archived history. It is off
// unless Config.AdminToken is set, and every call must present it as a bearer token. compactd
// answers every path under /v1/compactd itself (unknown ones with a 404): none is forwarded.
//
//	GET    /v1/compactd/conversations/{id}/search?q=…&k=5[&tenant=…]
//	DELETE /v1/compactd/conversations/{id}[?tenant=…]
//
// The operator's token spans tenants; ?tenant= picks one (default: the default tenant).

func (s *Server) routeAdmin(r chi.Router) {
	r.Route("/v1/compactd", func(r chi.Router) {
		r.Use(s.adminAuth(s.adminThrottle))
		r.Get("/conversations/{id}/search", s.handleConversationSearch)
		r.Delete("/conversations/{id}", s.handleConversationDelete)
		// Without these the subrouter inherits the API's not-found handler, the pass-through,
		// and an unknown admin path would reach the upstream with the admin token on it.
		r.NotFound(func(w http.ResponseWriter, r *http.Request) {
			(&api.OpenAIError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "unknown_admin_path",
				Message: "compactd's admin API has no such path: GET /v1/compactd/conversations/{id}/search?q=… and DELETE /v1/compactd/conversations/{id}"}).Write(w)
		})
		r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
			(&api.OpenAIError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed",
				Message: "compactd's admin API does not serve " + r.Method + " on this path: GET …/search, DELETE /v1/compactd/conversations/{id}"}).Write(w)
		})
	})
}

// adminAuth admits calls that present the admin token. Tokens are compared as SHA-256 digests
// in constant time (secretEqual), so neither a prefix nor the length of the token leaks through
// timing, and failed attempts are throttled per client address (AdminFailureBurst).
func (s *Server) adminAuth(th *throttle.Throttle) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s.cfg.AdminToken == "" {
				(&api.OpenAIError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "admin_api_disabled",
					Message: "compactd's admin API is off; start compactd with --admin-token (COMPACTD_ADMIN_TOKEN) to enable it"}).Write(w)
				return
			}
			addr := throttle.Addr(r)
			if ok, retry := th.Take(addr); !ok {
				s.metrics.AdminAuthFailure("throttled")
				adminThrottled(w, retry)
				return
			}
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if match := secretEqual(got, s.cfg.AdminToken); !ok || !match {
				s.metrics.AdminAuthFailure("invalid_token")
				(&api.OpenAIError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
					Message: "the admin API needs 'Authorization: Bearer <admin token>'"}).Write(w)
				return
			}
			th.Refund(addr)
			if s.cfg.Archive == nil {
				(&api.OpenAIError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "archive_disabled",
					Message: "the archive is off on this compactd (--archive off)"}).Write(w)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// adminThrottled answers a throttled admin call: 429 in OpenAI's envelope (the admin API's) with
// Retry-After in whole seconds, at least one.
func adminThrottled(w http.ResponseWriter, retry time.Duration) {
	secs := max(1, int(math.Ceil(retry.Seconds())))
	(&api.OpenAIError{Status: http.StatusTooManyRequests, Type: "requests", Code: "admin_auth_throttled",
		RetryAfter: time.Duration(secs) * time.Second,
		Message: "Too many failed admin-token attempts from this address; retry after " + strconv.Itoa(secs) +
			"s with the right 'Authorization: Bearer <admin token>'."}).Write(w)
}

func (s *Server) handleConversationSearch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("q")
	if strings.TrimSpace(q) == "" {
		api.InvalidRequest("q", "missing_required_parameter", "Missing query parameter 'q'.").Write(w)
		return
	}
	k, _ := strconv.Atoi(r.URL.Query().Get("k"))
	hits, err := s.cfg.Archive.Search(r.Context(), archive.Query{
		Text: q, Tenant: adminTenant(r, s.cfg.Tenant), Conversation: chi.URLParam(r, "id"), Limit: k,
		ExcerptBytes: s.cfg.Recall.withDefaults().ExcerptBytes,
	})
	if errors.Is(err, archive.ErrEmptyQuery) {
		api.InvalidRequest("q", "invalid_query", "The query 'q' has no word to search for. The archive is searched by words: runs of "+
			"letters and digits, with _ . / - : kept inside a word (identifiers, paths, values); other characters only separate words, "+
			"and there are no operators or wildcards such as *.").Write(w)
		return
	}
	if err != nil {
		s.log.Warn("admin search failed", "err", err)
		(&api.OpenAIError{Status: http.StatusInternalServerError, Type: "server_error", Message: "archive search failed"}).Write(w)
		return
	}
	type hit struct {
		Segment   string  `json:"segment"`
		Owner     string  `json:"owner"` // the owner digest the segment was written under
		Item      int     `json:"item"`
		CreatedAt int64   `json:"created_at"`
		Score     float64 `json:"score"`
		Excerpt   string  `json:"excerpt"`
	}
	out := struct {
		Object string `json:"object"`
		Data   []hit  `json:"data"`
	}{Object: "list", Data: []hit{}}
	for _, h := range hits {
		out.Data = append(out.Data, hit{h.SegmentID, h.Owner, h.ItemIndex, h.CreatedAt.Unix(), h.Score, h.Excerpt})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Server) handleConversationDelete(w http.ResponseWriter, r *http.Request) {
	id, tenant := chi.URLParam(r, "id"), adminTenant(r, s.cfg.Tenant)
	n, err := s.deleteConversation(r.Context(), tenant, id)
	if err != nil {
		(&api.OpenAIError{Status: http.StatusInternalServerError, Type: "server_error", Message: err.Error()}).Write(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "object": "conversation.deleted", "deleted": true, "segments": n})
}

// deleteConversation deletes a conversation of tenant, of every owner: its archive segments,
// its memo records and event log rows (the archive deletes them in the same transaction), and
// what the engine holds of it (a memo kept elsewhere, this replica's speculation). The admin
// API's DELETE and the console's delete both come here. The error is one an operator reads.
func (s *Server) deleteConversation(ctx context.Context, tenant, id string) (int, error) {
	n, err := s.cfg.Archive.DeleteConversation(ctx, tenant, id)
	if err != nil {
		s.log.Warn("admin delete failed", "err", err)
		return 0, errors.New("archive delete failed")
	}
	// The memo's records and speculative summaries of the conversation go with its archive, so no
	// later turn is handed a compaction made in it (an archive store deletes its own memo rows in
	// the same transaction; this reaches a memo kept elsewhere and this replica's speculation).
	forgotten, err := s.engine.Forget(ctx, tenant, id)
	if err != nil {
		s.log.Warn("admin delete: memo not cleared", "err", err)
		return n, errors.New("archive deleted, but the conversation memo could not be cleared; retry the delete")
	}
	s.log.Info("archived conversation deleted", "conversation", id, "tenant", tenant, "segments", n, "memo_records", forgotten)
	return n, nil
}

func adminTenant(r *http.Request, def string) string {
	if t := r.URL.Query().Get("tenant"); t != "" {
		return t
	}
	return def
}
