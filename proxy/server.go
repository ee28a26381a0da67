// Package proxy is compactd's HTTP front: routes, pass-through to the upstream, and the request
// path of a turn (handoff, threshold, compaction) with the response rewriting that goes with it.
//
// Everything compactd does not handle itself is reverse-proxied untouched, in the manner of
// net/http/httputil.ReverseProxy, which it is built on: hop-by-hop headers dropped, SSE flushed
// as it arrives, the upstream call cancelled when the client goes away.
package proxy

import (
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/compactd/compactd/archive"
	"github.com/compactd/compactd/compact"
	"github.com/compactd/compactd/compact/summarizer"
	"github.com/compactd/compactd/crypto"
)

// Config is what a Server needs. Zero values take the documented defaults.
type Config struct {
	// Upstream is the Responses API backend, e.g. https://api.openai.com (no /v1). Every path
	// that is not Anthropic's goes there.
	Upstream *url.URL
	// AnthropicUpstream is the Messages API backend (default https://api.anthropic.com); the
	// /v1/messages paths go there.
	AnthropicUpstream *url.URL
	// AnthropicApplyEdits makes compactd apply the Messages context-editing edits
	// (clear_thinking_20251015, clear_tool_uses_20250919) itself and report them in
	// context_management.applied_edits, for Anthropic upstreams that do not support them; when
	// false they are forwarded for the upstream to apply.
	AnthropicApplyEdits bool
	// AllowEditedSummaries accepts an Anthropic compaction block whose readable content was
	// changed by the client, using the edited text as the summary; otherwise such a block is a
	// 400 compaction_content_mismatch.
	AllowEditedSummaries bool
	// Transport reaches the upstream; nil means a tuned clone of http.DefaultTransport.
	Transport http.RoundTripper

	// Sealer seals and opens compaction items; the keyring.
	Sealer crypto.Sealer
	// Tenant is bound into every sealed item ("default" until proxy auth exists).
	Tenant string

	Summarizer summarizer.Summarizer
	// Archive keeps the raw items every compaction replaced (nil = off). When set, a compaction
	// whose originals cannot be archived fails rather than lose them.
	Archive archive.Store
	// Recall configures the recall tool compactd offers the model after a compaction.
	Recall RecallConfig
	// Speculative configures speculative compaction (on by default; Fraction < 0 turns it off).
	Speculative SpeculativeConfig
	// MaxHeaderBytes answers larger header blocks with a 431 in the route's dialect (0 = no
	// check of compactd's own; net/http's limit still applies).
	MaxHeaderBytes int
	// ItemMaxAge refuses compaction items older than this (0 = no limit).
	ItemMaxAge time.Duration
	// FailurePolicies say what a turn does when the summariser fails (default: fail).
	FailurePolicies FailurePolicies
	// CompactionTimeout bounds one compaction: all summariser attempts and backoffs, chunks, the
	// wait for a speculative summary and the gap check (0 = DefaultCompactionTimeout, 5m;
	// negative = no bound beyond the summariser's per-call timeout). Running out is a summariser
	// failure: the failure policy applies.
	CompactionTimeout time.Duration
	// LedgerBytes bounds the facts ledger sealed with each summary (default 6144; -1 = no ledger).
	LedgerBytes int
	// GapCheck runs a second summariser pass that compares summary + ledger with the replaced
	// items and adds what is still missing.
	GapCheck bool
	// Tenants turns on proxy authentication: client keys map to tenants, bound into every sealed
	// item, with per-tenant upstream credentials and rate limits. nil = off (one tenant, Tenant).
	Tenants *Tenants
	// AdminToken enables the admin API (/v1/compactd/…) for callers presenting it as a bearer
	// token; empty turns the API off.
	AdminToken string
	Counter    *compact.Counter
	// Policy is the server-side threshold policy.
	Policy compact.Policy
	// RetainTokens is the budget of newest user messages kept verbatim (default 64000).
	RetainTokens int

	// MaxBodyBytes caps request bodies compactd reads (default 32 MiB).
	MaxBodyBytes int64
	// KeepAlive is how long a streaming turn may wait on the summariser before compactd commits
	// the response and starts sending keep-alives (default 5s).
	KeepAlive time.Duration
	// StripCodexFields removes Codex-only fields (client_metadata,
	// internal_chat_message_metadata_passthrough) before forwarding, for strict upstreams.
	StripCodexFields bool

	Logger *slog.Logger

	// Observability (metrics.go, middleware.go, health.go).

	// Registry receives compactd's metrics; nil records none. NewRegistry adds the Go and
	// process collectors.
	Registry *prometheus.Registry
	// MetricModels are model names always kept as gen_ai_request_model label values; beyond
	// them, only the first few dozen names seen are, the rest are "other".
	MetricModels []string
	// MetricsSeparate serves /metrics only from OpsHandler (a separate ops listener), not on
	// the API handler. /healthz and /readyz are on both.
	MetricsSeparate bool
	// MetricsToken (bearer) or MetricsUser/MetricsPassword (basic auth) guard /metrics when set.
	MetricsToken, MetricsUser, MetricsPassword string
	// ReadyUpstreams are dialled (TCP) by /readyz; empty checks only the keyring.
	ReadyUpstreams []*url.URL
	// LogContent logs the head of each request body at debug level. Bodies carry prompts: for
	// debugging only.
	LogContent bool
}

// Server is the compactd HTTP handler.
type Server struct {
	cfg    Config
	log    *slog.Logger
	router chi.Router
	// forward and forwardAnthropic carry every upstream call of their API.
	forward, forwardAnthropic *httputil.ReverseProxy
	metrics                   *metrics
	spec                      *speculator // nil when speculative compaction is off
	ops                       *ops
}

// New builds a Server from cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Upstream == nil {
		u, _ := url.Parse("https://api.openai.com")
		cfg.Upstream = u
	}
	if cfg.AnthropicUpstream == nil {
		u, _ := url.Parse("https://api.anthropic.com")
		cfg.AnthropicUpstream = u
	}
	if cfg.Tenant == "" {
		cfg.Tenant = "default"
	}
	if cfg.LedgerBytes == 0 {
		cfg.LedgerBytes = 6144
	}
	if cfg.RetainTokens == 0 {
		cfg.RetainTokens = 64_000
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Transport == nil {
		cfg.Transport = DefaultTransport()
	}
	if cfg.Counter == nil {
		cfg.Counter = compact.NewCounter(compact.CounterOptions{})
	}
	s := &Server{cfg: cfg, log: cfg.Logger, metrics: newMetrics(cfg)}
	s.setupObservability()
	if cfg.Speculative.Fraction >= 0 {
		s.spec = newSpeculator(cfg.Speculative)
	}
	s.forward = s.newReverseProxy(cfg.Upstream, dialectOpenAI)
	s.forwardAnthropic = s.newReverseProxy(cfg.AnthropicUpstream, dialectAnthropic)
	s.forwardAnthropic.ModifyResponse = s.modifyMessagesResponse

	// Routing is on the path only: Claude Code calls /v1/messages?beta=true.
	r := chi.NewRouter()
	s.routeObservability(r)
	// Every API route, pass-through included, is behind the tenant check (a no-op without tenants).
	guard := func(h http.HandlerFunc) http.HandlerFunc { return s.limitHeaders(s.authenticate(h)).ServeHTTP }
	r.Post("/v1/responses", guard(s.handleResponses))
	r.Post("/v1/responses/compact", guard(s.handleCompact))
	s.routeAdmin(r)
	// chi's Handle registers every method, so it comes first and the POST routes override it.
	r.Handle("/v1/messages", guard(s.forwardAnthropic.ServeHTTP))   // other methods
	r.Handle("/v1/messages/*", guard(s.forwardAnthropic.ServeHTTP)) // batches and whatever comes next
	r.Post("/v1/messages", guard(s.handleMessages))
	r.Post("/v1/messages/count_tokens", guard(s.handleCountTokens))
	r.NotFound(guard(s.forward.ServeHTTP))
	r.MethodNotAllowed(guard(s.forward.ServeHTTP))
	s.router = r
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

// DefaultTransport is http.DefaultTransport with timeouts suited to LLM upstreams: bounded dial
// and TLS handshakes, a generous wait for response headers (a model may think before it answers),
// and no overall timeout, so long streams are never cut.
func DefaultTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	t.ResponseHeaderTimeout = 10 * time.Minute
	return t
}
