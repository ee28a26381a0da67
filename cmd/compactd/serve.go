package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/compactd/compactd/compact"
	"github.com/compactd/compactd/compact/summarizer"
	"github.com/compactd/compactd/crypto"
	"github.com/compactd/compactd/proxy"
)

func init() {
	register("serve", "run the proxy (the default command)", runServe)
}

// serveConfig is every setting of `compactd serve`, each a flag and a COMPACTD_* variable.
type serveConfig struct {
	listen   string
	upstream string

	anthropicUpstream                         string
	anthropicApplyEdits, allowEditedSummaries bool

	summarizerURL, summarizerModel, summarizerKey, summarizerAPI string
	summarizerContextTokens, summarizerMaxOutput                 int
	summarizerTimeout                                            time.Duration

	compactThreshold, defaultClientThreshold, retainTokens int
	policyOverride                                         bool

	keys, keyFile, dataDir string

	maxBodyBytes                                   int64
	bodyReadTimeout                                time.Duration
	readHeaderTimeout, idleTimeout, upstreamHeader time.Duration
	keepAlive, shutdownGrace                       time.Duration
	stripCodexFields                               bool

	logFormat, logLevel string
	obs                 obsConfig // metrics, ops listener, readiness (serve_obs.go)

	maxHeaderBytes int
	itemMaxAge     time.Duration
	tenantsFile    string
	failurePolicy  string
	resilience     summarizer.ResilienceConfig
	speculative    proxy.SpeculativeConfig
	ledgerBytes    int
	gapCheck       bool

	archiveDSN, archiveIndexKey string
	archiveMaxAge               time.Duration
	archiveMaxBytes             int64
	adminToken                  string
	recall                      proxy.RecallConfig
}

func (c *serveConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&c.upstream, "upstream", "https://api.openai.com", "Responses API upstream base URL (without /v1)")
	fs.StringVar(&c.anthropicUpstream, "anthropic-upstream", "https://api.anthropic.com", "Messages API upstream base URL (without /v1); /v1/messages* goes there")
	fs.BoolVar(&c.anthropicApplyEdits, "anthropic-apply-edits", false, "apply clear_thinking/clear_tool_uses context edits in compactd (for Messages upstreams without context editing) instead of forwarding them")
	fs.BoolVar(&c.allowEditedSummaries, "allow-edited-summaries", false, "accept Anthropic compaction blocks whose readable summary the client edited (otherwise 400 compaction_content_mismatch)")
	fs.StringVar(&c.summarizerURL, "summarizer-url", "", "summariser base URL including /v1 (default: the upstream's /v1)")
	fs.StringVar(&c.summarizerModel, "summarizer-model", "", "summariser model (default: the request's own model)")
	fs.StringVar(&c.summarizerKey, "summarizer-key", "", "summariser API key (default: forward the caller's credentials)")
	fs.StringVar(&c.summarizerAPI, "summarizer-api", "responses", "summariser wire API: responses or chat")
	fs.IntVar(&c.summarizerContextTokens, "summarizer-context-tokens", 128000, "summariser context window; longer histories are summarised in chunks")
	fs.IntVar(&c.summarizerMaxOutput, "summarizer-max-output-tokens", 8192, "summary length cap in tokens")
	fs.DurationVar(&c.summarizerTimeout, "summarizer-timeout", 2*time.Minute, "timeout of one summariser call")
	fs.IntVar(&c.compactThreshold, "compact-threshold", 0, "server-side policy: compact requests without context_management past this many input tokens (0: off)")
	fs.BoolVar(&c.policyOverride, "policy-override", false, "apply --compact-threshold even to requests that send their own context_management")
	fs.IntVar(&c.defaultClientThreshold, "default-client-threshold", 200000, "threshold used when a client sends compact_threshold: null")
	fs.IntVar(&c.retainTokens, "retain-tokens", 64000, "budget of newest user messages kept verbatim across a compaction")
	fs.StringVar(&c.keys, "keys", "", "keyring text: id:secret entries, first active, rest retired (prefer the env variable)")
	fs.StringVar(&c.keyFile, "key-file", "", "path of a keyring file (same format as --keys, mode 0600)")
	fs.StringVar(&c.dataDir, "data-dir", crypto.DefaultDataDir(), "where a generated keyring (and the archive) live")
	fs.Int64Var(&c.maxBodyBytes, "max-body-bytes", 32<<20, "largest request body compactd reads")
	fs.DurationVar(&c.bodyReadTimeout, "body-read-timeout", 5*time.Minute, "time allowed to receive a request body after its headers; 408 past it (responses are not limited; negative: no limit)")
	fs.DurationVar(&c.readHeaderTimeout, "read-header-timeout", 10*time.Second, "time allowed to read request headers")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", 2*time.Minute, "keep-alive connection idle timeout")
	fs.DurationVar(&c.upstreamHeader, "upstream-header-timeout", 10*time.Minute, "time to wait for the upstream's response headers (streams themselves have no timeout)")
	fs.DurationVar(&c.keepAlive, "keepalive", 5*time.Second, "while summarising a streamed turn, commit the stream and send keep-alives after this long")
	fs.DurationVar(&c.shutdownGrace, "shutdown-grace", 30*time.Second, "on SIGTERM, how long in-flight requests and streams may take to finish")
	fs.BoolVar(&c.stripCodexFields, "strip-codex-fields", false, "remove Codex-only fields (client_metadata, internal_chat_message_metadata_passthrough) for strict upstreams")
	fs.StringVar(&c.archiveDSN, "archive", "", "archive of replaced history: \"\" = SQLite in the data dir, a .db path, postgres://…, or \"off\"")
	fs.StringVar(&c.archiveIndexKey, "archive-index-key", "", "key id the archive's search index is derived from (default: the active key; pin it before rotating keys)")
	fs.DurationVar(&c.archiveMaxAge, "archive-max-age", 0, "delete archived history older than this (0: keep)")
	fs.Int64Var(&c.archiveMaxBytes, "archive-max-bytes", 0, "delete the oldest archived history past this many bytes (0: unlimited)")
	fs.StringVar(&c.adminToken, "admin-token", "", "bearer token for compactd's admin API (/v1/compactd/…); the API is off without it")
	fs.BoolVar(&c.recall.Disabled, "recall-off", false, "do not offer the model the recall tool after a compaction")
	fs.StringVar(&c.recall.ToolName, "recall-tool-name", "compactd_recall", "name of the recall tool")
	fs.StringVar(&c.recall.Description, "recall-tool-description", "", "description of the recall tool (default: built in)")
	fs.IntVar(&c.recall.MaxRounds, "recall-max-rounds", 3, "recall rounds per turn")
	fs.IntVar(&c.recall.TopK, "recall-top-k", 5, "excerpts per recall search")
	fs.IntVar(&c.recall.ExcerptBytes, "recall-excerpt-bytes", 1200, "bytes per recall excerpt")
	fs.IntVar(&c.maxHeaderBytes, "max-header-bytes", 1<<20, "largest request header block; larger ones get a 431 in the API's dialect")
	fs.DurationVar(&c.itemMaxAge, "item-max-age", 0, "refuse compaction items older than this (0: no limit)")
	fs.StringVar(&c.tenantsFile, "tenants-file", "", "YAML/JSON tenants file: client keys (hashed) -> tenant, upstream credentials by env var, rate limits; enables proxy authentication")
	fs.Float64Var(&c.speculative.Fraction, "speculative-fraction", 0.85, "start summarising in the background past this fraction of the threshold (negative: off)")
	fs.IntVar(&c.speculative.MaxConcurrent, "speculative-max-concurrent", 2, "background summarisations at once")
	fs.DurationVar(&c.speculative.TTL, "speculative-ttl", 15*time.Minute, "how long an unused speculative summary is kept")
	fs.StringVar(&c.failurePolicy, "summarizer-failure-policy", "fail", "when the summariser fails: fail, passthrough or extractive, or per route: responses=…,messages=…")
	fs.IntVar(&c.resilience.MaxAttempts, "summarizer-retries", 3, "attempts per summarisation (retries on 429/5xx with exponential backoff and jitter, honouring Retry-After)")
	fs.IntVar(&c.resilience.BreakerFailures, "breaker-failures", 5, "consecutive failed summarisations that open the circuit breaker (negative: no breaker)")
	fs.DurationVar(&c.resilience.BreakerCooldown, "breaker-cooldown", 30*time.Second, "how long the breaker stays open before one probe")
	fs.IntVar(&c.resilience.MaxConcurrent, "max-concurrent-compactions", 8, "summarisations in flight at once (0: unlimited)")
	fs.IntVar(&c.resilience.MaxQueue, "compaction-queue", 32, "compactions allowed to wait for a slot; past it the turn gets a 429")
	fs.IntVar(&c.ledgerBytes, "ledger-bytes", 6144, "facts ledger sealed with each summary, in bytes (-1: none)")
	fs.BoolVar(&c.gapCheck, "gap-check", false, "second summariser pass that adds facts the summary and ledger still miss")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	c.obs.flags(fs)
}

func newLogger(format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %v", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, not %q", format)
}

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
	sumURL := c.summarizerURL
	if sumURL == "" {
		sumURL = strings.TrimRight(c.upstream, "/") + "/v1"
	}
	counter := compact.NewCounter(compact.CounterOptions{Background: true})
	sum, err := summarizer.New(summarizer.Config{
		BaseURL: sumURL, APIKey: c.summarizerKey, Model: c.summarizerModel, API: c.summarizerAPI,
		ContextTokens: c.summarizerContextTokens, MaxOutputTokens: c.summarizerMaxOutput,
		Timeout: c.summarizerTimeout, HTTPClient: &http.Client{Transport: transport},
		CountTokens: counter.Text,
	})
	if err != nil {
		return nil, err
	}
	store, err := c.openArchive(ring, log)
	if err != nil {
		return nil, err
	}
	policies, err := proxy.ParseFailurePolicies(c.failurePolicy)
	if err != nil {
		return nil, fmt.Errorf("--summarizer-failure-policy: %w", err)
	}
	var tenants *proxy.Tenants
	if c.tenantsFile != "" {
		if tenants, err = proxy.LoadTenants(c.tenantsFile); err != nil {
			return nil, err
		}
		log.Info("proxy authentication on", "tenants_file", c.tenantsFile)
	}
	return c.obs.newServer(proxy.Config{
		Tenants:              tenants,
		MaxHeaderBytes:       c.maxHeaderBytes,
		ItemMaxAge:           c.itemMaxAge,
		FailurePolicies:      policies,
		Speculative:          c.speculative,
		LedgerBytes:          c.ledgerBytes,
		GapCheck:             c.gapCheck,
		Archive:              store,
		Recall:               c.recall,
		AdminToken:           c.adminToken,
		Upstream:             up,
		AnthropicUpstream:    antUp,
		AnthropicApplyEdits:  c.anthropicApplyEdits,
		AllowEditedSummaries: c.allowEditedSummaries,
		Transport:            transport,
		Sealer:               ring,
		Summarizer:           summarizer.NewResilient(sum, c.resilience),
		Counter:              counter,
		Policy:               compact.Policy{Threshold: c.compactThreshold, Override: c.policyOverride, DefaultClientThreshold: c.defaultClientThreshold},
		RetainTokens:         c.retainTokens,
		MaxBodyBytes:         c.maxBodyBytes,
		BodyReadTimeout:      c.bodyReadTimeout,
		KeepAlive:            c.keepAlive,
		StripCodexFields:     c.stripCodexFields,
		Logger:               log,
	})
}

func runServe(args []string) error {
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.flags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(c.logFormat, c.logLevel)
	if err != nil {
		return err
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
	}
	stopOps, err := c.obs.serveOps(handler, log)
	if err != nil {
		return err
	}
	defer stopOps()
	log.Info("compactd listening", "addr", ln.Addr().String(), "upstream", c.upstream)
	return serveUntilSignal(srv, ln, c.shutdownGrace, log)
}

// serveUntilSignal serves until SIGINT or SIGTERM, then stops accepting connections and gives
// in-flight requests (streams included) up to grace to finish.
func serveUntilSignal(srv *http.Server, ln net.Listener, grace time.Duration, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
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
