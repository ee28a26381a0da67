package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/owner"
	"github.com/compactd/compactd/proxy"
)

// serveHelp is serve's extra help text.
const serveHelp = `Every flag also reads its environment variable, COMPACTD_ + the flag name in upper case with
_ for - (--max-body-bytes: COMPACTD_MAX_BODY_BYTES); a flag on the command line wins.
Off convention: a limit, size, count, duration or threshold is turned off with 0, a feature
with --FEATURE=false, the archive with --archive off.`

// serveConfig is every setting of `compactd serve`, each a flag and a COMPACTD_* variable.
type serveConfig struct {
	listen   string
	upstream string

	anthropicUpstream                         string
	anthropicApplyEdits, allowEditedSummaries bool
	foreignItems                              string

	summarizerURL, summarizerKey, summarizerAPI  string
	summarizerModel                              routeModel
	summarizerContextTokens, summarizerMaxOutput int
	summarizerTimeout, compactionTimeout         time.Duration

	compactThreshold                     thresholdFlag
	defaultClientThreshold, retainTokens int
	policyOverride                       bool

	keys, keyFile, dataDir string

	earlyForwardBytes                              int64
	maxBodyBytes                                   int64
	bodyReadTimeout                                time.Duration
	streamWriteTimeout                             time.Duration
	readHeaderTimeout, idleTimeout, upstreamHeader time.Duration
	upstreamClient                                 string
	keepAlive, shutdownGrace                       time.Duration
	stripCodexFields                               bool

	logFormat, logLevel string
	obs                 obsConfig // metrics, ops listener, readiness (serve_obs.go)
	mem                 memConfig // memory limit, in-flight body budget (serve_obs.go)

	maxHeaderBytes int
	itemMaxAge     time.Duration
	tenantsFile    string
	failurePolicy  string
	resilience     summarizer.ResilienceConfig
	speculative    proxy.SpeculativeConfig
	ledgerBytes    int
	minSaving      float64
	gapCheck       bool
	memo           bool
	memoTTL        time.Duration
	memoMax        int
	// upgradeAgentCompaction answers an agent's own compaction turn with compactd's engine.
	upgradeAgentCompaction bool
	agentSummarizerModel   routeModel

	archiveDSN, archiveIndexKey string
	archiveMaxAge               time.Duration
	archiveMaxBytes             int64
	archiveMaxTotalBytes        int64
	adminToken                  string
	recall                      bool
	recallConfig                proxy.RecallConfig
}

// Defaults of serve's own settings, which no package applies: the HTTP server around the proxy
// and the header limit (proxy.Config.MaxHeaderBytes is 0, no limit, when unset). Every other flag
// takes its default from the constant the package that applies it exports (proxy.Default*,
// compact.Default*, summarizer.Default*, archive.Default*…).
const (
	defaultListen            = "127.0.0.1:8080" // serve --listen, and where healthcheck looks
	defaultMaxHeaderBytes    = 1 << 20
	defaultReadHeaderTimeout = 10 * time.Second
	defaultIdleTimeout       = 2 * time.Minute
	defaultShutdownGrace     = 30 * time.Second
)

// flags defines serve's flags: one line per flag, default from a package constant (those above
// for serve's own settings). Every flag reads its COMPACTD_* variable without further ado. A
// renamed flag keeps its old name with deprecate(fs, old, new).
func (c *serveConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.listen, "listen", defaultListen, "address to listen on")
	fs.StringVar(&c.upstream, "upstream", proxy.DefaultUpstream, "Responses API upstream base URL (without /v1)")
	fs.StringVar(&c.anthropicUpstream, "anthropic-upstream", proxy.DefaultAnthropicUpstream, "Messages API upstream base URL (without /v1); /v1/messages* goes there")
	fs.BoolVar(&c.anthropicApplyEdits, "anthropic-apply-edits", false, "apply clear_thinking/clear_tool_uses context edits in compactd (for Messages upstreams without context editing) instead of forwarding them")
	fs.BoolVar(&c.allowEditedSummaries, "allow-edited-summaries", false, "accept Anthropic compaction blocks whose readable summary the client edited (otherwise 400 compaction_content_mismatch)")
	fs.StringVar(&c.foreignItems, "foreign-items", string(proxy.ForeignDrop), "compaction items or blocks compactd did not issue (OpenAI's or Anthropic's own, after a provider switch): drop (forward without them, with an X-Compactd-Warning) or reject (400)")
	fs.StringVar(&c.summarizerURL, "summarizer-url", "", "one summariser for every route at this base URL including /v1 (default: per route, the Responses API at --upstream's /v1 for responses and chat, the Messages API at --anthropic-upstream for messages)")
	fs.Var(&c.summarizerModel, "summarizer-model", "summariser model, M for every route or responses=M1,messages=M2 (chat follows responses; default: the request's own model)")
	fs.StringVar(&c.summarizerKey, "summarizer-key", "", "one summariser for every route with this API key (default: forward the caller's credentials; prefer the env variable)")
	fs.StringVar(&c.summarizerAPI, "summarizer-api", "", "one summariser for every route over this wire API: responses, chat or messages (default: per route, as --summarizer-url says)")
	fs.IntVar(&c.summarizerContextTokens, "summarizer-context-tokens", summarizer.DefaultContextTokens, "summariser context window; longer histories are summarised in chunks")
	fs.IntVar(&c.summarizerMaxOutput, "summarizer-max-output-tokens", summarizer.DefaultMaxOutputTokens, "summary length cap in tokens")
	fs.DurationVar(&c.summarizerTimeout, "summarizer-timeout", summarizer.DefaultTimeout, "timeout of one summariser call")
	fs.DurationVar(&c.compactionTimeout, "compaction-timeout", proxy.DefaultCompactionTimeout, "deadline of one whole compaction (all summariser attempts, chunks, gap check); past it the failure policy applies (0: none)")
	fs.Var(&c.compactThreshold, "compact-threshold", "server-side policy: compact requests without context_management past this many input tokens, N for every route or responses=N,messages=M,chat=C (0 or a route left out: off)")
	fs.BoolVar(&c.policyOverride, "policy-override", false, "apply --compact-threshold even to requests that send their own context_management")
	fs.IntVar(&c.defaultClientThreshold, "default-client-threshold", compact.DefaultClientThreshold, "threshold used when a client sends compact_threshold: null")
	fs.IntVar(&c.retainTokens, "retain-tokens", compact.DefaultRetainBudget, "budget of newest user messages kept verbatim across a compaction")
	fs.StringVar(&c.keys, "keys", "", "keyring text: id:secret entries, first active, rest retired (prefer the env variable)")
	fs.StringVar(&c.keyFile, "key-file", "", "path of a keyring file (same format as --keys, mode 0600)")
	fs.StringVar(&c.dataDir, "data-dir", crypto.DefaultDataDir(), "where a generated keyring (and the archive) live")
	fs.Int64Var(&c.maxBodyBytes, "max-body-bytes", proxy.DefaultMaxBodyBytes, "largest request body compactd reads")
	fs.Int64Var(&c.earlyForwardBytes, "early-forward-bytes", 0, "smallest request body sent upstream while it arrives when the client's last turn on the route went as it came: all but its last byte goes ahead of compactd's decision, which completes or withdraws it (0: off, store and forward; e.g. 262144)")
	fs.DurationVar(&c.streamWriteTimeout, "stream-write-timeout", proxy.DefaultStreamWriteTimeout, "time one write of a response (an SSE event, a piece of a body) may wait on a client that stops reading; past it the connection is dropped and the upstream call cancelled (bounds each write, not the stream; 0: no limit)")
	fs.DurationVar(&c.bodyReadTimeout, "body-read-timeout", proxy.DefaultBodyReadTimeout, "time allowed to receive a request body after its headers; 408 past it (responses are not limited; 0: no limit)")
	fs.DurationVar(&c.readHeaderTimeout, "read-header-timeout", defaultReadHeaderTimeout, "time allowed to read request headers (0: off)")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", defaultIdleTimeout, "keep-alive connection idle timeout (0: off)")
	fs.DurationVar(&c.upstreamHeader, "upstream-header-timeout", proxy.DefaultResponseHeaderTimeout, "time to wait for the upstream's response headers; streams themselves have no timeout (0: off)")
	fs.StringVar(&c.upstreamClient, "upstream-client", "compactd", "what calls the upstreams: compactd (its own HTTP/1.1 client for http:// upstreams, a round trip on the request's goroutine; Go's transport for https://, with HTTP/2 where offered) or go (Go's transport for every upstream)")
	fs.DurationVar(&c.keepAlive, "keepalive", proxy.DefaultKeepAlive, "while summarising a streamed turn, commit the stream and send keep-alives after this long")
	fs.DurationVar(&c.shutdownGrace, "shutdown-grace", defaultShutdownGrace, "on SIGTERM, how long in-flight requests and streams may take to finish")
	fs.BoolVar(&c.stripCodexFields, "strip-codex-fields", false, "remove Codex-only fields (client_metadata, internal_chat_message_metadata_passthrough) for strict upstreams")
	fs.StringVar(&c.archiveDSN, "archive", "", "archive of replaced history: \"\" = SQLite in the data dir, a .db path, postgres://…, or \"off\"")
	fs.StringVar(&c.archiveIndexKey, "archive-index-key", "", "key id the archive's search index is derived from (default: the active key; pin it before rotating keys)")
	fs.DurationVar(&c.archiveMaxAge, "archive-max-age", 0, "delete archived history older than this (0: off, keep it)")
	fs.Int64Var(&c.archiveMaxBytes, "archive-max-bytes", 0, "per tenant: delete a tenant's oldest archived history past this many bytes of that tenant, no other tenant's (0: off, unlimited)")
	fs.Int64Var(&c.archiveMaxTotalBytes, "archive-max-total-bytes", 0, "all tenants together: past this many archived bytes, delete the oldest history of the tenant holding the most (0: off, unlimited)")
	fs.StringVar(&c.adminToken, "admin-token", "", "bearer token for compactd's admin API (/v1/compactd/…) on the main listener, and the login of the console (--console); the API is off without it (prefer the env variable: a flag shows in ps)")
	fs.BoolVar(&c.recall, "recall", true, "offer the model the recall tool after a compaction")
	deprecateInverted(fs, "recall-off", "recall")
	fs.StringVar(&c.recallConfig.ToolName, "recall-tool-name", proxy.DefaultRecallToolName, "name of the recall tool")
	fs.StringVar(&c.recallConfig.Description, "recall-tool-description", "", "description of the recall tool (default: built in)")
	fs.IntVar(&c.recallConfig.MaxRounds, "recall-max-rounds", proxy.DefaultRecallMaxRounds, "recall rounds per turn")
	fs.IntVar(&c.recallConfig.TopK, "recall-top-k", proxy.DefaultRecallTopK, "excerpts per recall search")
	fs.IntVar(&c.recallConfig.ExcerptBytes, "recall-excerpt-bytes", proxy.DefaultRecallExcerptBytes, "bytes per recall excerpt")
	fs.IntVar(&c.maxHeaderBytes, "max-header-bytes", defaultMaxHeaderBytes, "largest request header block; larger ones get a 431 in the API's dialect (0: off, net/http's 1 MiB cap only)")
	fs.DurationVar(&c.itemMaxAge, "item-max-age", 0, "refuse compaction items older than this (0: off, no limit)")
	fs.StringVar(&c.tenantsFile, "tenants-file", "", "YAML/JSON tenants file: client keys (hashed) -> tenant, upstream credentials by env var, rate limits; enables proxy authentication")
	fs.Float64Var(&c.speculative.Fraction, "speculative-fraction", proxy.DefaultSpeculativeFraction, "start summarising in the background past this fraction of the threshold (0: off)")
	fs.IntVar(&c.speculative.MaxConcurrent, "speculative-max-concurrent", proxy.DefaultSpeculativeMaxConcurrent, "background summarisations at once")
	fs.DurationVar(&c.speculative.TTL, "speculative-ttl", proxy.DefaultSpeculativeTTL, "how long an unused speculative summary is kept")
	fs.Float64Var(&c.speculative.MinGrowth, "speculative-min-growth", 0, "share of the threshold a conversation must grow by before another background summary of it is started (0: half the room between --speculative-fraction and the threshold; negative: one every turn)")
	fs.StringVar(&c.failurePolicy, "summarizer-failure-policy", string(proxy.PolicyFail), "when the summariser fails: fail, passthrough or extractive, or per route: responses=…,messages=…,chat=… (chat left out follows responses)")
	fs.IntVar(&c.resilience.MaxAttempts, "summarizer-attempts", summarizer.DefaultMaxAttempts, "attempts per summarisation, the first included (retries on 429/5xx with exponential backoff and jitter, honouring Retry-After; 1: no retries)")
	deprecate(fs, "summarizer-retries", "summarizer-attempts")
	fs.IntVar(&c.resilience.BreakerFailures, "breaker-failures", summarizer.DefaultBreakerFailures, "consecutive failed summarisations that open the circuit breaker (0: off, no breaker)")
	fs.DurationVar(&c.resilience.BreakerCooldown, "breaker-cooldown", summarizer.DefaultBreakerCooldown, "how long the breaker stays open before one probe")
	fs.IntVar(&c.resilience.MaxConcurrent, "max-concurrent-compactions", summarizer.DefaultMaxConcurrent, "summarisations in flight at once (0: off, unlimited)")
	fs.IntVar(&c.resilience.MaxQueue, "compaction-queue", summarizer.DefaultMaxQueue, "compactions allowed to wait for a slot; past it the turn gets a 429 (0: off, no waiting)")
	fs.IntVar(&c.ledgerBytes, "ledger-bytes", proxy.DefaultLedgerBytes, "facts ledger sealed with each summary, in bytes (0: off, no ledger)")
	fs.Float64Var(&c.minSaving, "compaction-min-saving", proxy.DefaultCompactionMinSaving, "skip a threshold, policy or agent compaction (no summariser call) whose window can save less than this share of the request's tokens (0: off; a compaction must still make the request smaller)")
	fs.BoolVar(&c.gapCheck, "gap-check", false, "second summariser pass that adds facts the summary and ledger still miss")
	fs.BoolVar(&c.memo, "memo", true, "conversation memo: remember each compaction for the prefix it covered, so clients that do not carry compaction items back (the transparent policy) get it applied again instead of a new summary; kept in the archive database (shared by replicas), in memory with --archive off")
	fs.DurationVar(&c.memoTTL, "memo-ttl", archive.DefaultMemoTTL, "how long a memo record lives after it was written or last used")
	fs.IntVar(&c.memoMax, "memo-max-records", archive.DefaultMemoMaxPerTenant, "memo records per tenant; past it the least recently used go first")
	fs.BoolVar(&c.upgradeAgentCompaction, "upgrade-agent-compaction", true, "answer an agent's own compaction request (Claude Code's /compact and auto-compact, Codex's local compaction) with compactd's summariser, facts ledger and gap check, and archive the conversation under the agent's session id (false: forward it unchanged)")
	fs.Var(&c.agentSummarizerModel, "agent-summarizer-model", "summariser model for upgraded agent compactions, e.g. a cheaper one, M or responses=M1,messages=M2 (default: as --summarizer-model)")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	c.obs.flags(fs)
	c.mem.flags(fs)
}

// parseServeFlags parses serve's command line and environment and checks the values. Uses of
// deprecated names are returned, to be logged once the logger exists.
func parseServeFlags(args []string) (c serveConfig, warnings []string, err error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.flags(fs)
	err = parseFlags(fs, args, withEnvAll(), withWarnings(func(w string) { warnings = append(warnings, w) }))
	if err != nil {
		return c, warnings, err
	}
	return c, warnings, c.check()
}

// check rejects values the packages would silently replace by their default (they read 0 as
// "use the default"), and maps the CLI's off convention, 0, onto the packages' spelling of off
// where that differs (a negative number).
func (c *serveConfig) check() error {
	for _, p := range []struct {
		name string
		ok   bool
	}{
		{"summarizer-context-tokens", c.summarizerContextTokens > 0},
		{"summarizer-max-output-tokens", c.summarizerMaxOutput > 0},
		{"summarizer-timeout", c.summarizerTimeout > 0},
		{"summarizer-attempts", c.resilience.MaxAttempts > 0},
		{"breaker-cooldown", c.resilience.BreakerCooldown > 0},
		{"default-client-threshold", c.defaultClientThreshold > 0},
		{"retain-tokens", c.retainTokens > 0},
		{"max-body-bytes", c.maxBodyBytes > 0},
		{"keepalive", c.keepAlive > 0},
		{"recall-max-rounds", c.recallConfig.MaxRounds > 0},
		{"recall-top-k", c.recallConfig.TopK > 0},
		{"recall-excerpt-bytes", c.recallConfig.ExcerptBytes > 0},
		{"speculative-max-concurrent", c.speculative.MaxConcurrent > 0},
		{"speculative-ttl", c.speculative.TTL > 0},
		{"memo-ttl", c.memoTTL > 0},
		{"memo-max-records", c.memoMax > 0},
	} {
		if !p.ok {
			return usageErrorf("serve", "--%s must be positive", p.name)
		}
	}
	for _, p := range []struct {
		name string
		bad  bool
	}{
		{"archive-max-age", c.archiveMaxAge < 0},
		{"archive-max-bytes", c.archiveMaxBytes < 0},
		{"archive-max-total-bytes", c.archiveMaxTotalBytes < 0},
		{"item-max-age", c.itemMaxAge < 0},
		{"max-concurrent-compactions", c.resilience.MaxConcurrent < 0},
		{"max-header-bytes", c.maxHeaderBytes < 0},
	} {
		if p.bad {
			return usageErrorf("serve", "--%s must not be negative (0 turns it off)", p.name)
		}
	}
	if c.upstreamClient != "compactd" && c.upstreamClient != "go" {
		return usageErrorf("serve", "--upstream-client must be compactd or go, not %q", c.upstreamClient)
	}
	if math.IsNaN(c.minSaving) || c.minSaving < 0 || c.minSaving >= 1 {
		return usageErrorf("serve", "--compaction-min-saving must be a share of the request's tokens, from 0 (off) to below 1")
	}
	if c.summarizerAPI != "" && !dialect.Name(c.summarizerAPI).Valid() {
		return usageErrorf("serve", "--summarizer-api must be responses, chat or messages, not %q", c.summarizerAPI)
	}
	if _, err := proxy.ParseForeignItems(c.foreignItems); err != nil {
		return usageErrorf("serve", "--foreign-items: %v", err)
	}
	if err := c.checkURLsAndLogs(); err != nil {
		return err
	}
	if err := c.mem.check(c.maxBodyBytes); err != nil {
		return err
	}
	// Negative values were the packages' off before 0 was; they still mean off.
	c.speculative.Fraction = offAsNegative(c.speculative.Fraction)
	c.resilience.BreakerFailures = offAsNegative(c.resilience.BreakerFailures)
	c.resilience.MaxQueue = offAsNegative(c.resilience.MaxQueue)
	c.ledgerBytes = offAsNegative(c.ledgerBytes)
	c.minSaving = offAsNegative(c.minSaving)
	c.recallConfig.Disabled = !c.recall
	return nil
}

// checkURLsAndLogs checks, before anything is opened (keyring, archive), the settings that only
// have to be read to be wrong: the upstream and summariser URLs, the log settings and the flags
// that need another.
func (c *serveConfig) checkURLsAndLogs() error {
	for _, u := range []struct{ name, v string }{
		{"upstream", c.upstream}, {"anthropic-upstream", c.anthropicUpstream}, {"summarizer-url", c.summarizerURL},
	} {
		if u.v == "" && u.name == "summarizer-url" {
			continue
		}
		pu, err := url.Parse(u.v)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return usageErrorf("serve", "--%s %q is not an absolute http(s) URL", u.name, u.v)
		}
		// compactd appends the API paths (/v1/responses, /v1/messages) to the upstreams itself; a
		// base URL that already ends in /v1 would send /v1/v1/responses. The summariser URL is
		// the API base, /v1 included.
		if u.name != "summarizer-url" && strings.HasSuffix(strings.TrimRight(pu.Path, "/"), "/v1") {
			return usageErrorf("serve", "--%s %q ends in /v1, but compactd adds /v1/… to it itself: use %q",
				u.name, u.v, strings.TrimSuffix(strings.TrimRight(u.v, "/"), "/v1"))
		}
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(c.logLevel)); err != nil {
		return usageErrorf("serve", "--log-level: %v", err)
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return usageErrorf("serve", "--log-format must be text or json, not %q", c.logFormat)
	}
	if c.obs.logContent && lv > slog.LevelDebug {
		return usageErrorf("serve", "--log-content needs --log-level debug")
	}
	if a := c.obs.metricsBasicAuth; a != "" {
		if u, p, ok := strings.Cut(a, ":"); !ok || u == "" || p == "" {
			return usageErrorf("serve", "--metrics-basic-auth must be user:password")
		}
	}
	if err := c.obs.checkConsole(c.adminToken); err != nil {
		return err
	}
	return c.obs.checkPprof()
}

// offAsNegative turns the CLI's off (0, or a negative number) into -1, which is off for the
// packages whose zero value means "default".
func offAsNegative[T int | float64 | time.Duration](v T) T {
	if v <= 0 {
		return -1
	}
	return v
}

// newLogger is the log on w. With buf (w's buffer), warnings and errors are flushed at once.
func newLogger(w io.Writer, buf *logBuffer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %v", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	switch format {
	case "json":
		h = slog.NewJSONHandler(w, opts)
	case "text":
		h = slog.NewTextHandler(w, opts)
	default:
		return nil, fmt.Errorf("--log-format must be text or json, not %q", format)
	}
	if buf != nil {
		h = flushingHandler{h, buf}
	}
	return slog.New(h), nil
}

// logFlushInterval bounds how long an access-log line waits in the log buffer.
const logFlushInterval = time.Second

// build assembles the proxy from the configuration.
func (c *serveConfig) build(log *slog.Logger) (*proxy.Server, error) {
	up, err := url.Parse(c.upstream)
	if err != nil || up.Scheme == "" || up.Host == "" {
		return nil, fmt.Errorf("--upstream %q is not an absolute URL", c.upstream)
	}
	antUp, err := url.Parse(c.anthropicUpstream)
	if err != nil || antUp.Scheme == "" || antUp.Host == "" {
		return nil, fmt.Errorf("--anthropic-upstream %q is not an absolute URL", c.anthropicUpstream)
	}
	budget, skimCache, memAttrs, err := c.mem.apply(c.maxBodyBytes)
	if err != nil {
		return nil, err
	}
	log.Info("memory", memAttrs...)
	ring, src, err := crypto.LoadKeyring(crypto.LoadOptions{Env: c.keys, File: c.keyFile, DataDir: c.dataDir, Generate: true})
	if err != nil {
		return nil, err
	}
	if src.Generated {
		log.Warn("no key configured: generated a new keyring; set COMPACTD_KEYS or --key-file for production and for more than one replica",
			"path", src.Path, "active_key", ring.ActiveID())
	} else {
		log.Info("keyring loaded", "source", src.Kind, "active_key", ring.ActiveID(), "keys", len(ring.IDs()))
	}
	transport := proxy.DefaultTransport()
	transport.ResponseHeaderTimeout = c.upstreamHeader
	counter := compact.NewCounter(compact.CounterOptions{Background: true})
	plans := c.summariserPlans()
	built := map[summariserPlan][2]summarizer.Summarizer{} // a plan shared by routes is one summariser
	for _, p := range plans {
		if _, ok := built[p]; ok {
			continue
		}
		var pair [2]summarizer.Summarizer
		for i, model := range []string{p.model, p.agentModel} {
			if i == 1 && p.agentModel == "" {
				break
			}
			sum, err := summarizer.New(summarizer.Config{
				BaseURL: p.url, APIKey: c.summarizerKey, Model: model, API: p.api,
				ContextTokens: c.summarizerContextTokens, MaxOutputTokens: c.summarizerMaxOutput,
				Timeout: c.summarizerTimeout, HTTPClient: &http.Client{Transport: transport},
				CountTokens: counter.Text,
			})
			if err != nil {
				return nil, err
			}
			pair[i] = summarizer.NewResilient(sum, c.resilience)
		}
		built[p] = pair
	}
	for _, route := range dialect.All {
		log.Info("summariser", plans[route].logAttrs(route, c.summarizerKey != "", c.tenantsFile != "")...)
	}
	main, messages := built[plans[dialect.Responses]], built[plans[dialect.Messages]]
	var messagesSum, messagesAgentSum summarizer.Summarizer
	if plans[dialect.Messages] != plans[dialect.Responses] {
		messagesSum, messagesAgentSum = messages[0], messages[1]
	}
	store, err := c.openArchive(ring, log)
	if err != nil {
		return nil, err
	}
	// Owners are derived from the same key as the archive's blind index, so pinning
	// --archive-index-key keeps both stable across rotation (SECURITY.md, "Who owns a conversation").
	ownerKey, err := ring.Derive(c.archiveIndexKey, owner.KeyPurpose)
	if err != nil {
		return nil, fmt.Errorf("--archive-index-key: %w", err)
	}
	policies, err := proxy.ParseFailurePolicies(c.failurePolicy)
	if err != nil {
		return nil, fmt.Errorf("--summarizer-failure-policy: %w", err)
	}
	foreign, err := proxy.ParseForeignItems(c.foreignItems)
	if err != nil {
		return nil, fmt.Errorf("--foreign-items: %w", err)
	}
	var tenants *proxy.Tenants
	if c.tenantsFile != "" {
		if tenants, err = proxy.LoadTenants(c.tenantsFile); err != nil {
			return nil, err
		}
		log.Info("proxy authentication on", "tenants_file", c.tenantsFile)
	}
	pc := proxy.Config{
		Tenants:              tenants,
		MaxHeaderBytes:       c.maxHeaderBytes,
		ItemMaxAge:           c.itemMaxAge,
		FailurePolicies:      policies,
		CompactionTimeout:    offAsNegative(c.compactionTimeout),
		Speculative:          c.speculative,
		LedgerBytes:          c.ledgerBytes,
		CompactionMinSaving:  c.minSaving,
		MaxSummaryTokens:     c.summarizerMaxOutput + c.summarizerMaxOutput/4,
		GapCheck:             c.gapCheck,
		NoMemo:               !c.memo,
		MemoOptions:          archive.MemoOptions{TTL: c.memoTTL, MaxPerTenant: c.memoMax},
		NoAgentCompaction:    !c.upgradeAgentCompaction,
		AgentSummarizer:      main[1],
		Archive:              store,
		ArchiveRetention:     archive.Retention{MaxAge: c.archiveMaxAge, MaxBytes: c.archiveMaxBytes, MaxTotalBytes: c.archiveMaxTotalBytes},
		Recall:               c.recallConfig,
		AdminToken:           c.adminToken,
		Upstream:             up,
		AnthropicUpstream:    antUp,
		AnthropicApplyEdits:  c.anthropicApplyEdits,
		AllowEditedSummaries: c.allowEditedSummaries,
		ForeignItems:         foreign,
		Transport:            c.upstreamTransport(transport),
		Sealer:               ring,
		OwnerKey:             ownerKey,
		Summarizer:           main[0],
		Counter:              counter,
		Policy:               compact.Policy{Threshold: c.compactThreshold.threshold, Routes: c.compactThreshold.routes, Override: c.policyOverride, DefaultClientThreshold: c.defaultClientThreshold},
		RetainTokens:         c.retainTokens,
		MaxBodyBytes:         c.maxBodyBytes,
		MaxInflightBodyBytes: budget,
		SkimCacheBytes:       skimCache,
		EarlyForwardBytes:    c.earlyForwardBytes,
		BodyReadTimeout:      offAsNegative(c.bodyReadTimeout),
		StreamWriteTimeout:   offAsNegative(c.streamWriteTimeout),
		KeepAlive:            c.keepAlive,
		StripCodexFields:     c.stripCodexFields,
		Logger:               log,
	}
	pc.MessagesSummarizer, pc.MessagesAgentSummarizer = messagesSum, messagesAgentSum
	return c.obs.newServer(pc)
}

// upstreamTransport is what calls the upstreams of turns (--upstream-client).
func (c *serveConfig) upstreamTransport(std *http.Transport) http.RoundTripper {
	if c.upstreamClient == "go" {
		return std
	}
	return proxy.UpstreamTransport(std)
}

func runServe(args []string) error {
	c, warnings, err := parseServeFlags(args)
	if err != nil {
		return err
	}
	// The log is buffered (serve_obs.go): one write per request to stderr was a syscall on every
	// request's path. Flushed every second, on warnings, and when serve returns.
	logBuf := newLogBuffer(os.Stderr, logFlushInterval)
	defer logBuf.Close()
	log, err := newLogger(logBuf, logBuf, c.logFormat, c.logLevel)
	if err != nil {
		return usageErrorf("serve", "%v", err)
	}
	for _, w := range warnings {
		log.Warn("deprecated setting: " + w)
	}
	handler, err := c.build(log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: c.readHeaderTimeout,
		// Twice compactd's own limit: requests in between get a 431 in their API's dialect
		// from the proxy instead of net/http's plain-text one.
		MaxHeaderBytes: 2 * c.maxHeaderBytes,
		IdleTimeout:    c.idleTimeout,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ConnContext:    proxy.ConnContext, // large bodies are read with fewer wake-ups (proxy/lowat.go)
	}
	stopOps, err := c.obs.serveOps(handler, log)
	if err != nil {
		return err
	}
	defer stopOps()
	err = serveUntilSignal(srv, ln, c.shutdownGrace, log, func() {
		log.Info("compactd listening", "addr", ln.Addr().String(), "upstream", c.upstream)
		logBuf.Flush() // supervisors and tests wait for this line
	})
	// No request is served any more: stop speculation and archive retention, and close the
	// archive, waiting up to another grace period for running background summaries to end.
	cctx, cancel := context.WithTimeout(context.Background(), c.shutdownGrace)
	defer cancel()
	if cerr := handler.Close(cctx); cerr != nil {
		log.Warn("shutdown: background work did not stop cleanly", "err", cerr)
	}
	return err
}

// serveUntilSignal serves until SIGINT or SIGTERM, then stops accepting connections and gives
// in-flight requests (streams included) up to grace to finish. It calls listening once the
// signals are caught: a supervisor that sends SIGTERM as soon as it reads "listening" gets a
// graceful shutdown, not the default disposition's abrupt exit.
func serveUntilSignal(srv *http.Server, ln net.Listener, grace time.Duration, log *slog.Logger, listening func()) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	listening()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: draining in-flight requests", "grace", grace)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		log.Warn("grace period over: closing remaining connections")
		return srv.Close()
	}
	if e := <-errc; e != nil && !errors.Is(e, http.ErrServerClosed) {
		return e
	}
	return err
}

// thresholdFlag is --compact-threshold: one token count for every route, or one per route
// (compact.ParseThresholds); a malformed or negative value is refused when the flag is parsed.
type thresholdFlag struct {
	text      string
	threshold int
	routes    map[dialect.Name]int
}

func (f *thresholdFlag) String() string {
	if f == nil || f.text == "" {
		return "0"
	}
	return f.text
}

func (f *thresholdFlag) Set(s string) error {
	n, routes, err := compact.ParseThresholds(s)
	if err != nil {
		return err
	}
	f.text, f.threshold, f.routes = s, n, routes
	return nil
}
