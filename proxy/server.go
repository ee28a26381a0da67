// Package proxy is compactd's HTTP front: routes, pass-through to the upstream, and the request
// path of a turn (handoff, threshold, compaction) with the response rewriting that goes with it.
//
// Everything compactd does not handle itself is reverse-proxied untouched, in the manner of
// net/http/httputil.ReverseProxy, which it is built on: hop-by-hop headers dropped, SSE flushed
// as it arrives, the upstream call cancelled when the client goes away.
package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/budget"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	dialectname "github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/dialect/chat"
	"github.com/compactd/compactd/internal/dialect/messages"
	"github.com/compactd/compactd/internal/dialect/responses"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/eventlog"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/h1"
	"github.com/compactd/compactd/internal/memo"
	"github.com/compactd/compactd/internal/metrics"
	"github.com/compactd/compactd/internal/owner"
	"github.com/compactd/compactd/internal/pathcanon"
	"github.com/compactd/compactd/internal/skimcache"
	"github.com/compactd/compactd/internal/throttle"
	"github.com/compactd/compactd/internal/turn"
)

// Config is what a Server needs. Zero values take the documented defaults.
type Config struct {
	// Upstream is the Responses API backend (default DefaultUpstream, no /v1). Every path that
	// is not Anthropic's goes there.
	Upstream *url.URL
	// AnthropicUpstream is the Messages API backend (default DefaultAnthropicUpstream); the
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
	// ForeignItems is what to do with compaction items and blocks compactd did not issue
	// (OpenAI's or Anthropic's own, replayed after a provider switch): ForeignDrop ("", the
	// default) or ForeignReject. See foreign.go.
	ForeignItems ForeignItems
	// Transport reaches the upstream; nil means UpstreamTransport(DefaultTransport()): compactd's
	// own HTTP/1.1 client for http:// upstreams, a tuned clone of http.DefaultTransport for the
	// rest.
	Transport http.RoundTripper

	// Sealer seals and opens compaction items; the keyring.
	Sealer crypto.Sealer
	// OwnerKey keys the owner digests that scope every conversation's archive, memo and recall
	// to the tenant and credential that wrote them (internal/owner; SECURITY.md "Who owns a
	// conversation"). Every replica needs the same key: serve derives it from the keyring
	// (owner.KeyPurpose, under --archive-index-key). nil: derived from Sealer when it is a
	// *crypto.Keyring, else random for this process.
	OwnerKey []byte
	// Tenant is bound into every sealed item (archive.DefaultTenant, "default", until proxy auth
	// exists).
	Tenant string

	Summarizer summarizer.Summarizer
	// NoAgentCompaction turns off the upgrade of an agent's own compaction request (Claude Code's
	// summarisation turn, Codex's local compaction turn): with it false (the default) compactd
	// recognises such a request, archives the conversation and answers it with its own
	// summariser, facts ledger and gap check. See agentcompact.go.
	NoAgentCompaction bool
	// AgentSummarizer, when set, writes the summaries of upgraded agent compactions (e.g. a
	// cheaper model); the ledger's gap check of those compactions uses it too. nil: Summarizer.
	AgentSummarizer summarizer.Summarizer
	// MessagesSummarizer, when set, writes the summaries of every compaction on the Messages
	// route (/v1/messages: threshold, speculative, on-demand, and upgraded Claude Code
	// compactions, gap checks included) instead of Summarizer; MessagesAgentSummarizer, when
	// set, those of the upgraded agent compactions there. nil: Summarizer and AgentSummarizer,
	// as on the Responses and Chat routes. serve sets it to a Messages API client at the
	// Anthropic upstream unless the operator configured one summariser for every route.
	// Summariser calls on this route carry the caller's Anthropic credentials in
	// summarizer.Auth.AnthropicHeader (with tenants, the tenant's Anthropic key).
	MessagesSummarizer      summarizer.Summarizer
	MessagesAgentSummarizer summarizer.Summarizer
	// Archive keeps the raw items every compaction replaced (nil = off). When set, a compaction
	// whose originals cannot be archived fails rather than lose them. The Server takes it over:
	// Close closes it (see Server.Close).
	Archive archive.Store
	// Memo remembers, per tenant, which compaction replaced which prefix of a conversation, so a
	// client that never carries compaction items back (the transparent policy) gets the same
	// compaction applied on its next turn instead of a new summary, and shares speculative
	// summaries between replicas. nil: kept in Archive's database when Archive is a SQL store
	// (every replica sharing it applies what any compacted), else in this process's memory
	// (memo.NewLocal). NoMemo turns it off.
	Memo   memo.Memo
	NoMemo bool
	// MemoOptions bounds the memo New makes (records per tenant, how long a record lives).
	MemoOptions archive.MemoOptions
	// ArchiveRetention, when any limit is set, prunes Archive at start and then every
	// ArchiveRetentionInterval (default archive.DefaultRetentionInterval) until Close: MaxBytes
	// per tenant, MaxTotalBytes over all of them (see archive.Retention). It needs an Archive.
	ArchiveRetention         archive.Retention
	ArchiveRetentionInterval time.Duration
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
	// LedgerBytes bounds the facts ledger sealed with each summary (default DefaultLedgerBytes;
	// -1 = no ledger).
	LedgerBytes int
	// CompactionMinSaving is the least share of a turn's input tokens a compaction compactd
	// decides on (threshold, policy, speculation, agent) must be able to save; a turn whose
	// window can save less is forwarded uncompacted without a summariser call, and counted in
	// compactd_compactions_skipped_total (0: engine.DefaultMinSaving, 0.10; negative: no
	// minimum, though a compaction must still make the turn smaller). Explicit compactions the
	// client asked for have none.
	CompactionMinSaving float64
	// MaxSummaryTokens bounds a summariser answer: a longer one is cut at a line, logged and
	// counted (0: engine.DefaultMaxSummaryTokens; negative: no bound). serve sets it to
	// --summarizer-max-output-tokens and a quarter.
	MaxSummaryTokens int
	// GapCheck runs a second summariser pass that compares summary + ledger with the replaced
	// items and adds what is still missing.
	GapCheck bool
	// Tenants turns on proxy authentication: client keys map to tenants, bound into every sealed
	// item, with per-tenant upstream credentials and rate limits. nil = off (one tenant, Tenant).
	Tenants *Tenants
	// AdminToken enables the admin API (/v1/compactd/…) for callers presenting it as a bearer
	// token; empty turns the API off. The operator console (Console) logs in with it too.
	AdminToken string
	// Events receives the event log (internal/eventlog): one row per compaction, memo application and
	// recall search, which the operator console shows. nil: kept in Archive's database when
	// Archive is a SQL store, else none. NoEvents turns it off.
	Events   EventSink
	NoEvents bool
	// Console serves the operator console under /console/ on OpsHandler (never on the API
	// handler); nil: no console. It needs AdminToken.
	Console *ConsoleConfig
	// Counter counts tokens (nil: a Counter without background work, made by New). The Server
	// takes it over like Archive: Close closes it. Counter.Close is idempotent and a closed
	// Counter still counts (it only stops warming its cache in the background), so a caller that
	// also hands the Counter to the summariser, as serve does, or closes it itself, is safe.
	Counter *compact.Counter
	// Policy is the server-side threshold policy.
	Policy compact.Policy
	// RetainTokens is the budget of newest user messages kept verbatim (default
	// compact.DefaultRetainBudget, 64000).
	RetainTokens int

	// MaxBodyBytes caps request bodies on every route, pass-through included (default
	// DefaultMaxBodyBytes):
	// a larger declared Content-Length is a 413 before anything reads the body (so no
	// 100 Continue goes out), and a chunked body is cut at the limit.
	MaxBodyBytes int64
	// MaxInflightBodyBytes bounds the bytes of request bodies compactd buffers (the routes it
	// parses) across all requests at once (internal/budget). Past it a request is answered 503 with
	// Retry-After in its route's dialect before its body is read, and nothing is forwarded.
	// 0: a quarter of the runtime's memory limit, or 1 GiB without one (at least MaxBodyBytes);
	// negative: no budget.
	MaxInflightBodyBytes int64
	// SkimCacheBytes bounds the memory of the skim-state cache (internal/skimcache): per tenant
	// and API, what the skim learnt of a conversation's previous request, so the next request,
	// which begins with the same bytes (proved by a keyed MAC), is validated and skimmed only
	// past them. 0: DefaultSkimCacheBytes; negative: no cache (every body skimmed in full).
	SkimCacheBytes int64
	// EarlyForwardBytes is the smallest declared body sent upstream while it arrives (early.go):
	// when the client's last turn on the route went as it came, everything but the body's last
	// byte goes ahead of the decision, which commits or withdraws it. 0 or negative: never
	// (store and forward), the default; SuggestedEarlyForwardBytes is a sensible value.
	EarlyForwardBytes int64
	// BodyReadTimeout bounds the time to receive a request body once its headers are in
	// (default 5m; negative: no limit). It is a deadline on reading the request only, lifted as
	// soon as the body has arrived, so a long streamed response is never cut by it. When it fires
	// first the client gets a 408 in the route's dialect.
	BodyReadTimeout time.Duration
	// StreamWriteTimeout bounds each write of a response to the client (an SSE event, a piece of
	// a body): a client that stops reading is dropped once a write has waited this long, and its
	// upstream request is cancelled (writedeadline.go). It bounds one write, not the response: a
	// stream may last for hours and pause for as long as the upstream pauses. Default
	// DefaultStreamWriteTimeout (60s); negative: no limit.
	StreamWriteTimeout time.Duration
	// KeepAlive is how long a streaming turn may wait on the summariser before compactd commits
	// the response and starts sending keep-alives (default DefaultKeepAlive).
	KeepAlive time.Duration
	// StripCodexFields removes Codex-only fields (client_metadata,
	// internal_chat_message_metadata_passthrough) before forwarding, for strict upstreams.
	StripCodexFields bool

	Logger *slog.Logger

	// Observability (internal/metrics, middleware.go, health.go).

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

// The engine's settings, re-exported where Config names them.
type (
	// SpeculativeConfig bounds speculative compaction (engine.SpeculativeConfig).
	SpeculativeConfig = engine.SpeculativeConfig
	// FailurePolicy is what a turn does when the summariser fails (engine.FailurePolicy).
	FailurePolicy = engine.FailurePolicy
	// FailurePolicies holds the policy of each API (engine.FailurePolicies).
	FailurePolicies = engine.FailurePolicies
)

// The failure policies.
const (
	PolicyFail        = engine.PolicyFail
	PolicyPassthrough = engine.PolicyPassthrough
	PolicyExtractive  = engine.PolicyExtractive
	// DefaultCompactionTimeout bounds one compaction when Config.CompactionTimeout is zero.
	DefaultCompactionTimeout = engine.DefaultCompactionTimeout
	// DefaultCompactionMinSaving is Config.CompactionMinSaving's default (0.10).
	DefaultCompactionMinSaving = engine.DefaultMinSaving
	// The defaults of zero SpeculativeConfig fields.
	DefaultSpeculativeFraction      = engine.DefaultSpeculativeFraction
	DefaultSpeculativeMaxEntries    = engine.DefaultSpeculativeMaxEntries
	DefaultSpeculativeMaxConcurrent = engine.DefaultSpeculativeMaxConcurrent
	DefaultSpeculativeTTL           = engine.DefaultSpeculativeTTL
)

// Defaults New applies to zero Config fields (and compactd serve's flags start from).
const (
	DefaultUpstream          = "https://api.openai.com"    // Config.Upstream
	DefaultAnthropicUpstream = "https://api.anthropic.com" // Config.AnthropicUpstream
	DefaultLedgerBytes       = 6144                        // Config.LedgerBytes
	DefaultMaxBodyBytes      = 32 << 20                    // Config.MaxBodyBytes, 32 MiB
	DefaultKeepAlive         = 5 * time.Second             // Config.KeepAlive
)

// ParseFailurePolicies reads "POLICY" (both APIs) or "responses=POLICY,messages=POLICY".
func ParseFailurePolicies(s string) (FailurePolicies, error) { return engine.ParseFailurePolicies(s) }

// engineObserver counts what the engine did in the server's metrics and live figures.
type engineObserver struct {
	m    *metrics.Metrics
	live *liveStats
}

func (o engineObserver) Speculative(outcome string) {
	o.m.Speculative(outcome)
	o.live.speculative(outcome)
}
func (o engineObserver) Fallback(d dialectname.Name, policy string) { o.m.Fallback(string(d), policy) }
func (o engineObserver) Memo(outcome string) {
	o.m.Memo(outcome)
	o.live.memo(outcome)
}
func (o engineObserver) SummaryTruncated(d dialectname.Name) { o.m.SummaryTruncated(string(d)) }

// Server is the compactd HTTP handler.
type Server struct {
	cfg Config
	log *slog.Logger
	// logHandler is the handler of Config.Logger, beneath the ctxHandler of log: the access log
	// hands its records to it directly (finish).
	logHandler slog.Handler
	router     chi.Router
	handler    http.Handler // router behind instrument and gate: what ServeHTTP serves
	// forward and forwardAnthropic carry every upstream call of their API.
	forward, forwardAnthropic *httputil.ReverseProxy
	metrics                   *metrics.Metrics
	engine                    *engine.Engine   // the compaction engine
	owners                    *owner.Keyer     // owner digests and signed references (internal/owner)
	budget                    *budget.Budget   // nil: no in-flight body budget
	skims                     *skimcache.Cache // nil: every body skimmed in full
	asSent                    *asSentTable     // per client and API: was its last turn forwarded as sent (early.go)
	bodies                    bodyPool         // buffers of pass-through bodies, for the next ones (bodypool.go)
	ops                       *ops
	live                      *liveStats         // the console's live figures (stats.go)
	events                    *eventlog.Recorder // the event log (internal/eventlog); nil: none
	recall                    *recaller          // the recall loop (recall.go)
	turnOptions               turn.Options       // the operator's settings every adapter reads
	breaker                   summariserState    // the summariser's breaker, when it has one
	adminThrottle             *throttle.Throttle // failed admin-token attempts: admin API and console alike

	// Lifecycle (Close).
	ownTransport  *h1.Transport // the transport New built, whose idle connections Close drops
	stopRetention context.CancelFunc
	retentionDone chan struct{} // closed when the retention loop has returned; nil without one
	// The memo's retention loop, when the memo lives in the archive database.
	stopMemoRetention context.CancelFunc
	memoRetentionDone chan struct{}
	closeOnce         sync.Once
	closeErr          error
}

// routeSummarizers is the engine's per-dialect summarisers (engine.Config.Summarizers): the
// Messages route's own when one is configured. Called after setupObservability, which wraps them.
func (s *Server) routeSummarizers() map[dialectname.Name]summarizer.Summarizer {
	if s.cfg.MessagesSummarizer == nil {
		return nil
	}
	return map[dialectname.Name]summarizer.Summarizer{dialectAnthropic.Name(): s.cfg.MessagesSummarizer}
}

// New builds a Server from cfg, or says which field of cfg makes no sense (see Config.validate).
// A Server started goroutines (speculative compaction, archive retention): stop it with Close.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Upstream == nil {
		u, _ := url.Parse(DefaultUpstream)
		cfg.Upstream = u
	}
	if cfg.AnthropicUpstream == nil {
		u, _ := url.Parse(DefaultAnthropicUpstream)
		cfg.AnthropicUpstream = u
	}
	if cfg.Tenant == "" {
		cfg.Tenant = archive.DefaultTenant
	}
	breaker, _ := cfg.Summarizer.(summariserState)
	if cfg.AgentSummarizer != nil {
		cfg.Summarizer = agentRouting{main: cfg.Summarizer, agent: cfg.AgentSummarizer}
	}
	if cfg.MessagesAgentSummarizer != nil {
		cfg.MessagesSummarizer = agentRouting{main: cfg.MessagesSummarizer, agent: cfg.MessagesAgentSummarizer}
	}
	if cfg.LedgerBytes == 0 {
		cfg.LedgerBytes = DefaultLedgerBytes
	}
	if cfg.RetainTokens == 0 {
		cfg.RetainTokens = compact.DefaultRetainBudget
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxInflightBodyBytes == 0 {
		cfg.MaxInflightBodyBytes = budget.Default(cfg.MaxBodyBytes)
	}
	if cfg.SkimCacheBytes == 0 {
		cfg.SkimCacheBytes = DefaultSkimCacheBytes
	}
	if cfg.BodyReadTimeout == 0 {
		cfg.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if cfg.StreamWriteTimeout == 0 {
		cfg.StreamWriteTimeout = DefaultStreamWriteTimeout
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var own *h1.Transport
	if cfg.Transport == nil {
		own = UpstreamTransport(DefaultTransport())
		cfg.Transport = own
	}
	if cfg.Counter == nil {
		cfg.Counter = compact.NewCounter(compact.CounterOptions{})
	}
	switch {
	case cfg.NoMemo:
		cfg.Memo = nil
	case cfg.Memo == nil && cfg.Archive != nil:
		if m, err := memo.NewStore(cfg.Archive, cfg.MemoOptions); err == nil {
			cfg.Memo = m
			break
		}
		cfg.Memo = memo.NewLocal(cfg.MemoOptions.MaxPerTenant, cfg.MemoOptions.TTL) // an archive without a SQL database
	case cfg.Memo == nil:
		cfg.Memo = memo.NewLocal(cfg.MemoOptions.MaxPerTenant, cfg.MemoOptions.TTL)
	}
	owners, err := ownerKeyer(cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, metrics: metrics.New(cfg.Registry, cfg.MetricModels), ownTransport: own, budget: budget.New(cfg.MaxInflightBodyBytes), owners: owners,
		live: &liveStats{}, breaker: breaker, adminThrottle: throttle.New(AdminFailureBurst, AdminFailureRefill),
		skims: skimcache.New(skimcache.Options{Budget: cfg.SkimCacheBytes}), asSent: newAsSentTable()}
	metrics.RegisterSkimCache(cfg.Registry, s.skims.Stats)
	if !cfg.NoEvents {
		sink := cfg.Events
		if sink == nil && cfg.Archive != nil {
			if l, err := archive.NewEventLog(cfg.Archive, archive.EventOptions{}); err == nil {
				sink = l
			}
		}
		if sink != nil {
			s.events = eventlog.New(sink, cfg.Registry, s.log.Warn)
		}
	}
	s.turnOptions = turn.Options{StripCodexFields: cfg.StripCodexFields, ApplyEdits: cfg.AnthropicApplyEdits,
		AllowEditedSummaries: cfg.AllowEditedSummaries}
	s.setupObservability()
	s.recall = &recaller{cfg: cfg.Recall.withDefaults(), archive: cfg.Archive, metrics: s.metrics, events: s.events, log: s.log,
		source: s.eventSource, tenantOf: s.tenantOf, roundTrip: s.upstreamRoundTrip, upstreamError: s.upstreamError}
	// After setupObservability, which wraps the summariser in its metrics.
	ledger := s.cfg.LedgerBytes
	if ledger < 0 {
		ledger = 0 // no ledger
	}
	s.engine = engine.New(engine.Config{
		Sealer: s.cfg.Sealer, Summarizer: s.cfg.Summarizer, Summarizers: s.routeSummarizers(), Counter: s.cfg.Counter, Archive: s.cfg.Archive,
		LedgerBytes: ledger, GapCheck: s.cfg.GapCheck, CompactionTimeout: s.cfg.CompactionTimeout,
		ItemMaxAge: s.cfg.ItemMaxAge, FailurePolicy: s.cfg.FailurePolicies.For, Speculative: s.cfg.Speculative,
		Memo: s.cfg.Memo, MinSaving: s.cfg.CompactionMinSaving, MaxSummaryTokens: s.cfg.MaxSummaryTokens,
		Observer: engineObserver{s.metrics, s.live}, Logger: s.log,
	})
	s.startRetention()
	s.startMemoRetention()
	// Pass-through: every path compactd does not handle. An Anthropic stream is held to the event
	// cap (guardPassThrough); the OpenAI upstream's other paths pass as they are.
	s.forward = s.newReverseProxy(cfg.Upstream, dialectOpenAI, nil)
	s.forwardAnthropic = s.newReverseProxy(cfg.AnthropicUpstream, dialectAnthropic, func(resp *http.Response) error {
		guardPassThrough(resp, dialectAnthropic)
		return nil
	})

	// Routing is on the path only: Claude Code calls /v1/messages?beta=true. Every request, on
	// every path and method, first passes the gate (authentication, path spelling, limits).
	r := chi.NewRouter()
	s.routeObservability(r)
	r.Post("/v1/responses", s.serveTurn(responses.Adapter{}, cfg.Upstream))
	r.Post("/v1/responses/compact", s.serveTurn(responses.Adapter{CompactEndpoint: true}, cfg.Upstream))
	r.Post("/v1/chat/completions", s.serveTurn(chat.Adapter{}, cfg.Upstream))
	s.routeAdmin(r)
	// chi's Handle registers every method, so it comes first and the POST routes override it.
	forwardAnthropic, forward := fullDuplex(s.forwardAnthropic), fullDuplex(s.forward)
	r.Handle("/v1/messages", forwardAnthropic)   // other methods
	r.Handle("/v1/messages/*", forwardAnthropic) // batches and whatever comes next
	r.Post("/v1/messages", s.serveTurn(messages.Adapter{}, cfg.AnthropicUpstream))
	r.Post("/v1/messages/count_tokens", s.serveTurn(messages.Adapter{CountTokens: true}, cfg.AnthropicUpstream))
	r.NotFound(forward.ServeHTTP)
	r.MethodNotAllowed(forward.ServeHTTP)
	s.router = r
	// instrument and gate wrap the router rather than being chi middleware, so the route
	// context chi needs comes with the request's state (reqCtx) instead of a context value and a
	// request copy of chi's own per request.
	s.handler = s.instrument(s.gate(r))
	return s, nil
}

// gate is what every request on the API handler passes before it is routed, whatever its path
// and method: compactd's routes, pass-through and unknown paths alike. In order: the method (one
// compactd proxies, framing.go); the framing (a chunked HTTP/1 request closes its connection
// after the response, so nothing smuggled after its body is read as a request); the header
// limit; authentication and the tenant's rate limit (with tenants on); the spelling of the path
// (no odd spelling of one of compactd's routes goes anywhere); the declared body size; the
// in-flight body budget; then the body's size limit and read deadline. Every refusal is in the
// dialect of the path and nothing refused reaches the upstream. Nothing here reads the body.
func (s *Server) gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw := r.URL.EscapedPath() // what routing sees and what the upstream would be sent
		canon := pathcanon.Canonical(raw, true)
		d := dialectOf(canon)
		if !checkMethod(w, r, d) {
			return
		}
		closeAfterChunked(w, r)
		if !s.checkHeaders(w, r, d) {
			return
		}
		if st := stateFrom(r.Context()); st != nil {
			st.credential = clientKey(r.Header) // before authenticate replaces it
		}
		r, ok := s.authenticate(w, r, raw, canon, d)
		if !ok {
			return
		}
		if !checkPathSpelling(w, raw, canon, d) || !s.checkDeclaredLength(w, r, d) {
			return
		}
		h, ok := s.budget.Reserve(r, canon)
		if !ok {
			budgetRefused(w, d, s.budget, s.metrics)
			return
		}
		if st := stateFrom(r.Context()); st != nil {
			st.hold = h
		}
		defer h.Release()
		r, guard := s.guardBody(w, r)
		defer guard.finish()
		next.ServeHTTP(w, r)
	})
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// DefaultTransport is http.DefaultTransport with timeouts suited to LLM upstreams: bounded dial
// and TLS handshakes, a generous wait for response headers (DefaultResponseHeaderTimeout: a model
// may think before it answers), and no overall timeout, so long streams are never cut.
//
// Its pool is sized for agent concurrency: compactd talks to one or two upstream hosts, with
// hundreds of turns and streams in flight at once from a team's agents. With fewer idle
// connections kept per host than calls in flight, every burst past the cap closes connections on
// their way back to the pool and dials (and TLS-handshakes) new ones for the next burst. 512 per
// host and 1024 in all keep a burst's connections for the next one; no MaxConnsPerHost, which
// would queue turns behind each other.
func DefaultTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = DefaultMaxIdleConns
	t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	t.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	t.DialContext = bulkDial(t.DialContext) // bodies compactd read whole go out in one write (bulkconn.go)
	return t
}

// UpstreamTransport is the round tripper of the upstream calls of a turn: compactd's own HTTP/1.1
// client (internal/h1) for http:// upstreams, which does a round trip on the handler's goroutine
// instead of handing it to two goroutines of the connection's, and std for everything else
// (https, with HTTP/2 where the upstream offers it; a proxy from the environment; upgrades).
// std's settings (dial, idle pool, header wait, header limit) govern both; a std that caps
// connections a host (MaxConnsPerHost) gets every request, since compactd's client keeps no count.
func UpstreamTransport(std *http.Transport) *h1.Transport { return h1.New(std) }

// The idle-connection pool and header wait of DefaultTransport (see there).
const (
	DefaultMaxIdleConns          = 1024
	DefaultMaxIdleConnsPerHost   = 512
	DefaultResponseHeaderTimeout = 10 * time.Minute
)

// Path spelling. compactd answers some paths itself and picks the upstream of others; a request
// for one of them must spell it exactly. Anything an upstream, or a proxy in front of it, might
// normalise to one of them — doubled or trailing slashes, dot segments, percent-escapes (also
// double ones), backslashes, ";parameters", a NUL, trailing dots or spaces, other letter case —
// is refused with a 400 in the route's dialect rather than forwarded, with or without tenants:
// forwarded, it would carry compaction items and blocks past compactd to the upstream.
//
// Refused rather than canonicalised and routed: compactd cannot know which of these rules a
// given upstream applies, and whatever it forwards must be spelled as what it inspected; no SDK
// sends such spellings (a misconfigured base URL does, and the answer names the exact path, so
// it is fixed in one step). Paths that are no route of compactd's, however spelled, are
// forwarded exactly as sent: there the upstream's own rules apply.

// ownRoutes are compactd's paths (internal/pathcanon checks their spelling). Exact: the paths
// compactd answers itself (or, for GET /v1/messages and the like, forwards to the Anthropic
// upstream). Prefixes: compactd's namespaces: everything under /v1/messages/ goes to the
// Anthropic upstream (a misspelling would reach the other one), everything under /v1/compactd/
// is the admin API, which compactd alone answers, so its ids may be escaped.
var ownRoutes = pathcanon.Routes{
	Exact: []string{
		"/v1/responses", "/v1/responses/compact", "/v1/messages", "/v1/messages/count_tokens",
		"/v1/chat/completions", "/v1/compactd", "/healthz", "/readyz", "/metrics",
	},
	Prefixes: []pathcanon.Prefix{{Path: "/v1/messages/"}, {Path: "/v1/compactd/", Escaped: true}},
}

// checkPathSpelling answers a 400 for an odd spelling of one of compactd's paths.
func checkPathSpelling(w http.ResponseWriter, raw, canon string, d dialect) bool {
	ok, route := ownRoutes.SpelledExactly(raw, canon)
	if !ok {
		writeFault(w, d, &fault.Fault{Code: fault.CodeNonCanonicalPath,
			Message: "This path is another spelling of " + route + ", which compactd accepts only spelled exactly so " +
				"(no doubled or trailing slashes, dot segments, percent-escapes, backslashes, parameters or other letter case): " +
				"check the client's base URL and call " + route + "."})
	}
	return ok
}

// dialectOf is the dialect of a path, the one place compactd decides it: Anthropic's at and
// below /v1/messages, OpenAI's everywhere else (every other path goes to the OpenAI-compatible
// upstream). It names the upstream (upstreamOf) and the error envelope.
func dialectOf(path string) dialect {
	if path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/") {
		return dialectAnthropic
	}
	return dialectOpenAI
}

// upstreamOf is the upstream label of a path (reqState.upstream): "anthropic" for the paths
// dialectOf gives the Messages dialect, "openai" for every other. A provider's name, not a
// dialect's: the Chat and Responses routes share the OpenAI-compatible upstream.
func upstreamOf(path string) string {
	if dialectOf(path) == dialectAnthropic {
		return "anthropic"
	}
	return "openai"
}
