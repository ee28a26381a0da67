// Package metrics is compactd's Prometheus instrumentation: the registry it serves on /metrics,
// every metric it registers (names, help texts, labels and buckets), the label values it makes
// up front, and one recording method per event. The front (package proxy) decides when an event
// happened and calls the method; this package decides how it is counted.
//
// Labels are bounded by construction: routes are chi patterns, methods and status codes are
// clamped, reasons, triggers and outcomes are compactd's own words (and pass through Label), and
// models are capped (at most the configured names and the first few dozen others seen). Nothing
// a tenant controls freely (keys, session ids, paths) ever becomes a label.
package metrics

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// NewRegistry returns a registry with the Go runtime and process collectors, the one compactd
// serves on /metrics. compactd's own metrics are added to it by New.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Label values that are fixed by compactd's code. Series for them are created up front (at zero),
// so rate() and ratio expressions in dashboards and alerts have data before the first event.
var (
	metricAPIs     = metricAPINames()
	metricTriggers = []string{"threshold", "policy", "compact_endpoint", "compaction_trigger", "on_demand", "agent"} // "agent": proxy's agentTrigger
	metricOutcomes = []string{"ok", "failed", "nothing", "skipped"}
	skipReasons    = []string{"nothing", "min_saving", "not_smaller"} // engine.SkipReason
	metricReasons  = []string{"tampered", "unknown_key", "wrong_tenant", "malformed", "expired"}
	sumOutcomes    = []string{"ok", "failed", "canceled", "nothing"}
)

// Buckets. Request and upstream durations span a cache hit to a ten-minute reasoning stream;
// overhead is compactd's own work (parsing, counting, rewriting), normally well under a
// millisecond, so its buckets start at 25µs. The gen_ai buckets are the ones the OpenTelemetry
// GenAI semantic conventions recommend, so dashboards built for those work unchanged.
var (
	durationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	overheadBuckets = []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, .001, .0025, .005, .01, .025, .05, .1, .25, 1}
	tokenBuckets    = prometheus.ExponentialBuckets(1000, 2, 12) // 1k … 2M tokens
	ratioBuckets    = []float64{.01, .02, .05, .1, .15, .2, .3, .4, .5, .75, 1}
	genAITokens     = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	genAIDuration   = []float64{.01, .02, .04, .08, .16, .32, .64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
)

// Metrics is compactd's instrumentation, made by New. Every method is safe on a nil *Metrics and
// then records nothing, so call sites need no guards and a compactd without a registry records
// nothing. Every method is safe for concurrent use.
type Metrics struct {
	requests        *prometheus.CounterVec   // route, method, code
	requestDuration *prometheus.HistogramVec // route
	inFlight        prometheus.Gauge
	streams         *prometheus.GaugeVec     // route
	overhead        *prometheus.HistogramVec // route

	upstreamRequests *prometheus.CounterVec   // upstream, status_class
	upstreamDuration *prometheus.HistogramVec // upstream, status_class

	compactions  *prometheus.CounterVec   // api, trigger, outcome
	skips        *prometheus.CounterVec   // api, reason (skipReasons)
	truncated    *prometheus.CounterVec   // api
	tokens       *prometheus.HistogramVec // api, stage (before, after)
	tokensSaved  *prometheus.CounterVec   // api
	ratio        *prometheus.HistogramVec // api
	openFailures *prometheus.CounterVec   // api, reason
	handoffs     *prometheus.CounterVec   // api
	early        *prometheus.CounterVec   // api, outcome

	sumRequests *prometheus.CounterVec   // outcome
	sumDuration *prometheus.HistogramVec // outcome
	sumTokens   *prometheus.CounterVec   // type (input, output)
	sumCalls    prometheus.Counter

	genAITokens   *prometheus.HistogramVec // gen_ai_operation_name, gen_ai_provider_name, gen_ai_request_model, gen_ai_token_type
	genAIDuration *prometheus.HistogramVec // gen_ai_operation_name, gen_ai_provider_name, gen_ai_request_model

	recallSearches *prometheus.CounterVec // outcome (ok, failed)
	recallHits     prometheus.Counter

	speculativeOutcomes *prometheus.CounterVec // outcome (started, hit, miss, failed)
	memoOutcomes        *prometheus.CounterVec // outcome (hit, miss, stale, error, recorded, record_error, spec_shared, spec_hit)
	authFailures        prometheus.Counter
	adminAuthFailures   *prometheus.CounterVec // outcome (invalid_token, throttled)
	fallbacks           *prometheus.CounterVec // api, policy (passthrough, extractive)
	clientCompactions   *prometheus.CounterVec // api, phase, reason (from the client's own headers)
	foreign             *prometheus.CounterVec // api, action (dropped, rejected)

	models *modelLabels

	// Series resolved once per label set (see seriesCache): the per-request paths skip
	// WithLabelValues' hashing and locking of the vector's map.
	routeSeries    seriesCache[string, *routeSeries]
	requestSeries  seriesCache[requestKey, prometheus.Counter]
	upstreamSeries seriesCache[upstreamKey, upstreamSeries]
	genAISeries    seriesCache[genAIKey, prometheus.Observer]

	budgetRefusals prometheus.Counter
}

// seriesCache maps label values to the series they resolve to, made by mk on first use. It is
// read on every request and written once per label set, so reads are one atomic load and a
// lookup in a map that is never changed once published (a sync.Map boxed the key, allocating
// and hashing it through its interface on every read); a new label set copies the map under
// mu. The label sets are bounded (see the package doc), so it never grows without bound.
type seriesCache[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex // serialises the writers
	mk func(K) V
}

func (c *seriesCache[K, V]) get(k K) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v // made while this one waited
		}
	}
	next := make(map[K]V)
	if old != nil {
		next = maps.Clone(*old)
	}
	v := c.mk(k)
	next[k] = v
	c.m.Store(&next)
	return v
}

// routeSeries are one route's request series. streams is made on the first stream only, so a
// route that never streamed shows no stream gauge.
type routeSeries struct {
	duration, overhead prometheus.Observer
	streams            func() prometheus.Gauge
}

type requestKey struct {
	route, method string
	code          int
}

type upstreamKey struct{ upstream, class string }

type upstreamSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

type genAIKey struct{ op, provider, model, tokenType string } // tokenType "": the duration

// New registers compactd's metrics in reg and makes their fixed label values' series (at zero).
// models are model names that always keep their name as gen_ai_request_model values (beyond
// them only the first few dozen names seen do; the rest are "other"). A nil reg gives a nil
// *Metrics, which records nothing. New panics if one of the metrics is already registered in
// reg (prometheus.Registry.MustRegister).
func New(reg *prometheus.Registry, models []string) *Metrics {
	if reg == nil {
		return nil
	}
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		f(v)
		return v
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
		f(v)
		return v
	}
	m := &Metrics{
		requests:        counter("compactd_http_requests_total", "HTTP requests served, by route pattern, method and status code.", "route", "method", "code"),
		requestDuration: histogram("compactd_http_request_duration_seconds", "Time from request to the end of the response (streams included), by route pattern.", durationBuckets, "route"),
		inFlight:        prometheus.NewGauge(prometheus.GaugeOpts{Name: "compactd_http_requests_in_flight", Help: "Requests being served."}),
		streams:         prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "compactd_streams_in_flight", Help: "SSE responses open to clients, by route pattern."}, []string{"route"}),
		overhead:        histogram("compactd_proxy_overhead_seconds", "Request duration minus time spent waiting on the upstream and the summariser: compactd's own cost (including writes to the client).", overheadBuckets, "route"),

		upstreamRequests: counter("compactd_upstream_requests_total", "Upstream round trips, by upstream API and status class (2xx … 5xx; error when no response arrived; canceled when the client went away first).", "upstream", "status_class"),
		upstreamDuration: histogram("compactd_upstream_request_duration_seconds", "Time until the upstream's response headers, by upstream API and status class.", durationBuckets, "upstream", "status_class"),

		compactions:  counter("compactd_compactions_total", "Compaction attempts, by API, trigger and outcome (ok, failed, nothing to replace, skipped: it could not make the request meaningfully smaller).", "api", "trigger", "outcome"),
		skips:        counter("compactd_compactions_skipped_total", "Compactions not made, by API and reason: nothing (the window replaces nothing), min_saving (it could save less than --compaction-min-saving; no summariser call), not_smaller (the summary came back no smaller than what it would replace).", "api", "reason"),
		truncated:    counter("compactd_summaries_truncated_total", "Summariser answers cut to their token budget (--summarizer-max-output-tokens and a quarter) before use.", "api"),
		tokens:       histogram("compactd_compaction_tokens", "Estimated context size of compacted conversations, before and after compaction.", tokenBuckets, "api", "stage"),
		tokensSaved:  counter("compactd_compaction_tokens_saved_total", "Estimated input tokens removed by compactions (before minus after): what the upstream no longer reads on each later turn.", "api"),
		ratio:        histogram("compactd_compaction_ratio", "Compression ratio of compactions: tokens after / tokens before.", ratioBuckets, "api"),
		openFailures: counter("compactd_item_open_failures_total", "Compaction items rejected when opening them, by reason (tampered, unknown_key, wrong_tenant, malformed).", "api", "reason"),
		handoffs:     counter("compactd_handoffs_total", "Requests whose compaction item was opened and replaced by the handoff message.", "api"),
		early:        counter("compactd_early_forwards_total", "Large bodies sent upstream while they arrived, by outcome: committed (the turn went as sent) or withdrawn (it did not; the upstream got an incomplete request).", "api", "outcome"),

		sumRequests: counter("compactd_summariser_requests_total", "Summarisations, by outcome (ok, failed, canceled, nothing).", "outcome"),
		sumDuration: histogram("compactd_summariser_duration_seconds", "Time one summarisation took (all its chunks), by outcome.", durationBuckets, "outcome"),
		sumTokens:   counter("compactd_summariser_tokens_total", "Tokens the summariser LLM reported, by type (input, output).", "type"),
		sumCalls:    prometheus.NewCounter(prometheus.CounterOpts{Name: "compactd_summariser_llm_calls_total", Help: "LLM calls made by summarisations (one per chunk, plus retries after a context overflow)."}),

		genAITokens: histogram("gen_ai_client_token_usage", "OpenTelemetry GenAI: tokens used per operation (chat: upstream turns; compaction: summariser calls).",
			genAITokens, "gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_token_type"),
		genAIDuration: histogram("gen_ai_client_operation_duration_seconds", "OpenTelemetry GenAI: duration of an operation (chat: upstream turn to the end of its body; compaction: one summarisation).",
			genAIDuration, "gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"),

		recallSearches: counter("compactd_recall_searches_total", "Recall tool searches of the archive, by outcome (ok, failed).", "outcome"),
		recallHits:     prometheus.NewCounter(prometheus.CounterOpts{Name: "compactd_recall_hits_total", Help: "Archive entries returned by recall searches."}),

		speculativeOutcomes: counter("compactd_speculative_compactions_total", "Speculative compaction: background summaries started, turns past the fraction that started none because a recent summary of their conversation covers them (covered), and crossing turns that found one ready (hit), found none (miss), or found a failed one (failed).", "outcome"),
		memoOutcomes:        counter("compactd_memo_total", "Conversation memo: turns whose prefix had a recorded compaction (hit), had none (miss), had one that no longer opens (stale), or could not be looked up (error); compactions recorded (recorded, record_error); speculative summaries shared between replicas (spec_shared) and used from another replica (spec_hit).", "outcome"),
		authFailures:        prometheus.NewCounter(prometheus.CounterOpts{Name: "compactd_auth_failures_total", Help: "Requests refused for a missing or unknown compactd client key (tenants configured)."}),
		fallbacks:           counter("compactd_summariser_fallbacks_total", "Summariser failures handled by a failure policy instead of failing the turn, by API and policy (passthrough, extractive).", "api", "policy"),
		clientCompactions:   counter("compactd_client_compactions_total", "Compactions whose client said why (Codex x-codex-turn-metadata), by API, the client's phase (pre_turn, post_turn, …) and reason (context_limit, …).", "api", "phase", "reason"),

		foreign: counter("compactd_foreign_items_total", "Compaction items or blocks compactd did not issue (e.g. OpenAI's or Anthropic's own), by API and action (dropped, rejected; --foreign-items).", "api", "action"),

		models: newModelLabels(models, maxModelLabels),
	}
	f(m.authFailures)
	m.adminAuthFailures = newAdminAuthFailures(reg)
	m.budgetRefusals = prometheus.NewCounter(prometheus.CounterOpts{Name: "compactd_inflight_body_refusals_total",
		Help: "Requests answered 503 because their body did not fit in the in-flight body budget (--max-inflight-body-bytes)."})
	f(m.budgetRefusals)
	m.routeSeries.mk = func(route string) *routeSeries {
		return &routeSeries{
			duration: m.requestDuration.WithLabelValues(route),
			overhead: m.overhead.WithLabelValues(route),
			streams:  sync.OnceValue(func() prometheus.Gauge { return m.streams.WithLabelValues(route) }),
		}
	}
	m.requestSeries.mk = func(k requestKey) prometheus.Counter {
		return m.requests.WithLabelValues(k.route, k.method, codeLabel(k.code))
	}
	m.upstreamSeries.mk = func(k upstreamKey) upstreamSeries {
		return upstreamSeries{requests: m.upstreamRequests.WithLabelValues(k.upstream, k.class), duration: m.upstreamDuration.WithLabelValues(k.upstream, k.class)}
	}
	m.genAISeries.mk = func(k genAIKey) prometheus.Observer {
		if k.tokenType == "" {
			return m.genAIDuration.WithLabelValues(k.op, k.provider, k.model)
		}
		return m.genAITokens.WithLabelValues(k.op, k.provider, k.model, k.tokenType)
	}
	for _, o := range []string{"started", "covered", "hit", "miss", "failed"} {
		m.speculativeOutcomes.WithLabelValues(o)
	}
	for _, o := range []string{"hit", "miss", "stale", "error", "recorded", "record_error", "spec_shared", "spec_hit"} {
		m.memoOutcomes.WithLabelValues(o)
	}
	for _, api := range metricAPIs {
		m.fallbacks.WithLabelValues(api, "passthrough")
		m.fallbacks.WithLabelValues(api, "extractive")
		m.foreign.WithLabelValues(api, "dropped")
		m.foreign.WithLabelValues(api, "rejected")
	}
	f(m.recallHits)
	m.recallSearches.WithLabelValues("ok")
	m.recallSearches.WithLabelValues("failed")
	f(m.inFlight)
	f(m.streams)
	f(m.sumCalls)
	for _, api := range metricAPIs {
		for _, tr := range metricTriggers {
			for _, o := range metricOutcomes {
				m.compactions.WithLabelValues(api, tr, o)
			}
		}
		for _, r := range metricReasons {
			m.openFailures.WithLabelValues(api, r)
		}
		m.handoffs.WithLabelValues(api)
		m.early.WithLabelValues(api, "committed")
		m.early.WithLabelValues(api, "withdrawn")
		for _, r := range skipReasons {
			m.skips.WithLabelValues(api, r)
		}
		m.truncated.WithLabelValues(api)
		m.tokensSaved.WithLabelValues(api)
	}
	for _, o := range sumOutcomes {
		m.sumRequests.WithLabelValues(o)
	}
	m.sumTokens.WithLabelValues("input")
	m.sumTokens.WithLabelValues("output")
	return m
}

// CompactionEvent describes one compaction attempt.
type CompactionEvent struct {
	API          string // the dialect's name: "responses", "messages" or "chat"
	Trigger      string // threshold, policy, compact_endpoint, compaction_trigger, on_demand, agent
	Outcome      string // ok, failed, nothing, skipped
	Model        string
	TokensBefore int
	TokensAfter  int
}

// Compaction counts a compaction attempt; a successful one also records its sizes, the tokens it
// saved and its compression ratio.
func (m *Metrics) Compaction(ev CompactionEvent) {
	if m == nil {
		return
	}
	api := ev.API
	m.compactions.WithLabelValues(api, Label(ev.Trigger), Label(ev.Outcome)).Inc()
	if ev.Outcome != "ok" || ev.TokensBefore <= 0 {
		return
	}
	m.tokens.WithLabelValues(api, "before").Observe(float64(ev.TokensBefore))
	m.tokens.WithLabelValues(api, "after").Observe(float64(ev.TokensAfter))
	if saved := ev.TokensBefore - ev.TokensAfter; saved > 0 {
		m.tokensSaved.WithLabelValues(api).Add(float64(saved))
	}
	m.ratio.WithLabelValues(api).Observe(float64(ev.TokensAfter) / float64(ev.TokensBefore))
}

// OpenFailure counts a compaction item that could not be opened, by crypto.Reason.
func (m *Metrics) OpenFailure(api, reason string) {
	if m == nil {
		return
	}
	m.openFailures.WithLabelValues(api, Label(reason)).Inc()
}

// ForeignItems counts n compaction items compactd did not issue, by action: dropped or rejected.
func (m *Metrics) ForeignItems(api, action string, n int) {
	if m == nil {
		return
	}
	m.foreign.WithLabelValues(api, Label(action)).Add(float64(n))
}

// EarlyForward counts an early forward by its outcome (committed or withdrawn).
func (m *Metrics) EarlyForward(api string, committed bool) {
	if m == nil {
		return
	}
	outcome := "withdrawn"
	if committed {
		outcome = "committed"
	}
	m.early.WithLabelValues(api, outcome).Inc()
}

// HandoffApplied counts a request whose compaction item was opened and expanded.
func (m *Metrics) HandoffApplied(api string) {
	if m == nil {
		return
	}
	m.handoffs.WithLabelValues(api).Inc()
}

// Recall counts one recall search and its hits.
func (m *Metrics) Recall(ok bool, hits int) {
	if m == nil {
		return
	}
	outcome := "ok"
	if !ok {
		outcome = "failed"
	}
	m.recallSearches.WithLabelValues(outcome).Inc()
	m.recallHits.Add(float64(max(hits, 0)))
}

// Request records a finished request: count, duration and overhead (seconds compactd spent on
// it itself). route must be a bounded value (a route pattern); the method is clamped to the
// standard ones ("other"), and a code outside 100 … 599 is "other".
func (m *Metrics) Request(route, method string, code int, seconds, overhead float64) {
	if m == nil {
		return
	}
	if code < 100 || code > 599 {
		code = 0 // one "other" series
	}
	m.requestSeries.get(requestKey{route, methodLabel(method), code}).Inc()
	rs := m.routeSeries.get(route)
	rs.duration.Observe(seconds)
	rs.overhead.Observe(overhead)
}

// BudgetRefused counts a request refused by the in-flight body budget.
func (m *Metrics) BudgetRefused() {
	if m != nil {
		m.budgetRefusals.Inc()
	}
}

// RequestStarted and RequestDone move the in-flight request gauge; the caller pairs them.
func (m *Metrics) RequestStarted() {
	if m != nil {
		m.inFlight.Inc()
	}
}

func (m *Metrics) RequestDone() {
	if m != nil {
		m.inFlight.Dec()
	}
}

// StreamOpened and StreamClosed move the route's in-flight stream gauge; the caller pairs them.
// The route's gauge exists from its first stream on.
func (m *Metrics) StreamOpened(route string) {
	if m != nil {
		m.routeSeries.get(route).streams().Inc()
	}
}

func (m *Metrics) StreamClosed(route string) {
	if m != nil {
		m.routeSeries.get(route).streams().Dec()
	}
}

// UpstreamRoundTrip records one upstream round trip up to its response headers, by upstream
// ("openai", "anthropic") and status class. code 0 means no response (a transport error).
func (m *Metrics) UpstreamRoundTrip(upstream string, code int, seconds float64) {
	if m == nil {
		return
	}
	class := "error"
	if code > 0 {
		class = statusClass(code)
	}
	us := m.upstreamSeries.get(upstreamKey{upstream, class})
	us.requests.Inc()
	us.duration.Observe(seconds)
}

// UpstreamCanceled records a round trip abandoned because the client went away.
func (m *Metrics) UpstreamCanceled(upstream string, seconds float64) {
	if m == nil {
		return
	}
	us := m.upstreamSeries.get(upstreamKey{upstream, "canceled"})
	us.requests.Inc()
	us.duration.Observe(seconds)
}

// GenAI records one GenAI operation: "chat" (an upstream turn) or "compaction" (a summarisation),
// by provider ("openai", "anthropic") and model, which may be anything: it is capped (see New).
// Token counts of zero are not observed (the usage was not reported).
func (m *Metrics) GenAI(op, provider, model string, seconds float64, input, output int64) {
	if m == nil {
		return
	}
	model = m.models.label(model)
	m.genAISeries.get(genAIKey{op, provider, model, ""}).Observe(seconds)
	if input > 0 {
		m.genAISeries.get(genAIKey{op, provider, model, "input"}).Observe(float64(input))
	}
	if output > 0 {
		m.genAISeries.get(genAIKey{op, provider, model, "output"}).Observe(float64(output))
	}
}

// Summarised records one summarisation, by outcome (ok, failed, canceled, nothing): its time,
// the tokens the summariser reported (zero: not reported) and its LLM calls.
func (m *Metrics) Summarised(outcome string, seconds float64, input, output int64, calls int) {
	if m == nil {
		return
	}
	m.sumRequests.WithLabelValues(outcome).Inc()
	m.sumDuration.WithLabelValues(outcome).Observe(seconds)
	if input > 0 {
		m.sumTokens.WithLabelValues("input").Add(float64(input))
	}
	if output > 0 {
		m.sumTokens.WithLabelValues("output").Add(float64(output))
	}
	if calls > 0 {
		m.sumCalls.Add(float64(calls))
	}
}

// AuthFailure counts a request refused for a missing or unknown client key.
func (m *Metrics) AuthFailure() {
	if m == nil {
		return
	}
	m.authFailures.Inc()
}

// Skipped counts a compaction not made, by engine.SkipReason: outcome "nothing" when the window
// replaced nothing, "skipped" otherwise, and the reason.
func (m *Metrics) Skipped(api, trigger, reason string) {
	if m == nil {
		return
	}
	outcome := "skipped"
	if reason == "nothing" {
		outcome = "nothing"
	}
	m.Compaction(CompactionEvent{API: api, Trigger: trigger, Outcome: outcome})
	m.skips.WithLabelValues(api, Label(reason)).Inc()
}

// SummaryTruncated counts a summariser answer cut to its budget (engine.Observer).
func (m *Metrics) SummaryTruncated(api string) {
	if m == nil {
		return
	}
	m.truncated.WithLabelValues(api).Inc()
}

// Memo counts conversation-memo outcomes (engine.Observer.Memo).
func (m *Metrics) Memo(outcome string) {
	if m == nil {
		return
	}
	m.memoOutcomes.WithLabelValues(Label(outcome)).Inc()
}

// Speculative counts speculative-compaction outcomes: started, covered, hit, miss, failed.
func (m *Metrics) Speculative(outcome string) {
	if m == nil {
		return
	}
	m.speculativeOutcomes.WithLabelValues(Label(outcome)).Inc()
}

// Fallback counts a summariser failure handled by a failure policy (passthrough, extractive).
func (m *Metrics) Fallback(api, policy string) {
	if m == nil {
		return
	}
	m.fallbacks.WithLabelValues(api, Label(policy)).Inc()
}

// ClientCompaction counts a compaction with the phase and reason the client gave for it (Codex's
// x-codex-turn-metadata). Both must already be sanitised enum words (Label), so a client cannot
// blow up the series count; one left empty is "unknown", and nothing is counted when both are.
func (m *Metrics) ClientCompaction(api, phase, reason string) {
	if m == nil || (phase == "" && reason == "") {
		return
	}
	if phase == "" {
		phase = "unknown"
	}
	if reason == "" {
		reason = "unknown"
	}
	m.clientCompactions.WithLabelValues(api, phase, reason).Inc()
}

// The admin API's failure counter, compactd_admin_auth_failures_total{outcome}: invalid_token
// (a missing or wrong token, answered 401) and throttled (answered 429 without comparing).
func newAdminAuthFailures(reg *prometheus.Registry) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "compactd_admin_auth_failures_total",
		Help: "Admin API calls refused: a missing or wrong admin token (invalid_token, 401), or an address past its budget of failed attempts (throttled, 429)."},
		[]string{"outcome"})
	reg.MustRegister(v)
	v.WithLabelValues("invalid_token")
	v.WithLabelValues("throttled")
	return v
}

// AdminAuthFailure counts a refused admin call, by outcome: invalid_token (a missing or wrong
// admin token) or throttled (an address past its budget of failed attempts).
func (m *Metrics) AdminAuthFailure(outcome string) {
	if m == nil {
		return
	}
	m.adminAuthFailures.WithLabelValues(outcome).Inc()
}
