package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/compactd/compactd/internal/skimcache"
	"github.com/compactd/compactd/proxy"
)

// obsConfig is the observability part of `compactd serve`: metrics, the ops listener, readiness
// and content logging. It lives apart from serveConfig's other settings so the two grow
// independently.
type obsConfig struct {
	metrics            bool
	opsListen          string
	metricsToken       string
	metricsBasicAuth   string
	metricModels       string
	readyCheckUpstream bool
	logContent         bool
	pprof              bool
	console            bool
	consoleContent     bool
}

func (o *obsConfig) flags(fs *flag.FlagSet) {
	fs.BoolVar(&o.metrics, "metrics", true, "serve Prometheus metrics on /metrics")
	fs.StringVar(&o.opsListen, "ops-listen", "", "separate ops listener for /metrics, /healthz and /readyz, e.g. 127.0.0.1:9464 (default: all on the main listener; the admin API stays there)")
	deprecate(fs, "admin-listen", "ops-listen")
	fs.StringVar(&o.metricsToken, "metrics-token", "", "bearer token required on /metrics (prefer the env variable)")
	fs.StringVar(&o.metricsBasicAuth, "metrics-basic-auth", "", "user:password required on /metrics as basic auth (prefer the env variable)")
	fs.StringVar(&o.metricModels, "metric-models", "", "comma-separated model names always kept as gen_ai_request_model label values (others: the first 32 seen, then \"other\")")
	fs.BoolVar(&o.readyCheckUpstream, "ready-check-upstream", false, "/readyz also dials the upstreams (TCP) and reports not ready when one is unreachable")
	fs.BoolVar(&o.pprof, "pprof", false, "serve Go's profiler (net/http/pprof) under /debug/pprof/ on the ops listener, behind the guard of /metrics; needs --ops-listen (never on the API listener) and --metrics-token or --metrics-basic-auth")
	fs.BoolVar(&o.console, "console", false, "serve the operator console (conversations, compaction timelines, search, delete, live view) under /console/ on the ops listener, logged in with the admin token; needs --ops-listen (never on the API listener) and --admin-token. Off by default: it shows every tenant's conversation metadata")
	fs.BoolVar(&o.consoleContent, "console-content", false, "let the console show content (handoff texts, the items they replaced, recall queries and excerpts, search excerpts), every view written to the log; needs --console (without it the console shows only counts, sizes and times)")
	fs.BoolVar(&o.logContent, "log-content", false, "DEBUG ONLY: log the head of every request body (prompts!) at debug level; needs --log-level debug")
}

// checkPprof refuses --pprof where it would not be guarded: it is served on the ops listener
// only, under the credentials of /metrics, so it needs both. Unguarded, anyone who reaches the
// ops address could profile the process at will (a CPU profile or an execution trace is load on
// demand), read its goroutine stacks and symbols, and see how it is built.
func (o *obsConfig) checkPprof() error {
	switch {
	case !o.pprof:
		return nil
	case o.opsListen == "":
		return usageErrorf("serve", "--pprof needs --ops-listen: the profiler is never served on the API listener")
	case o.metricsToken == "" && o.metricsBasicAuth == "":
		return usageErrorf("serve", "--pprof needs --metrics-token or --metrics-basic-auth (COMPACTD_METRICS_TOKEN, COMPACTD_METRICS_BASIC_AUTH): the profiler is served behind the guard of /metrics, never without one")
	}
	return nil
}

// checkConsole refuses --console where it would not be guarded or would be on the API listener:
// it is served on the ops listener only and its login is the admin token, so it needs both.
// It is opt-in because it shows every tenant's conversation ids, clients, sizes and times to
// whoever holds the admin token, from a browser; content is a second opt-in (--console-content).
func (o *obsConfig) checkConsole(adminToken string) error {
	switch {
	case o.consoleContent && !o.console:
		return usageErrorf("serve", "--console-content needs --console")
	case !o.console:
		return nil
	case o.opsListen == "":
		return usageErrorf("serve", "--console needs --ops-listen: the console is never served on the API listener")
	case adminToken == "":
		return usageErrorf("serve", "--console needs --admin-token (COMPACTD_ADMIN_TOKEN): the console's login is the admin token")
	}
	return nil
}

// newServer completes cfg with the observability settings and builds the proxy.
func (o *obsConfig) newServer(cfg proxy.Config) (*proxy.Server, error) {
	if err := o.checkPprof(); err != nil {
		return nil, err
	}
	if o.metrics {
		cfg.Registry = proxy.NewRegistry()
	}
	cfg.MetricsSeparate = o.opsListen != ""
	cfg.MetricsToken = o.metricsToken
	if o.metricsBasicAuth != "" {
		u, p, ok := strings.Cut(o.metricsBasicAuth, ":")
		if !ok || u == "" || p == "" {
			return nil, errors.New("--metrics-basic-auth must be user:password")
		}
		cfg.MetricsUser, cfg.MetricsPassword = u, p
	}
	for _, m := range strings.Split(o.metricModels, ",") {
		if m = strings.TrimSpace(m); m != "" {
			cfg.MetricModels = append(cfg.MetricModels, m)
		}
	}
	if o.readyCheckUpstream {
		seen := map[string]bool{}
		for _, u := range []*url.URL{cfg.Upstream, cfg.AnthropicUpstream} {
			if u != nil && !seen[u.Host] {
				seen[u.Host] = true
				cfg.ReadyUpstreams = append(cfg.ReadyUpstreams, u)
			}
		}
	}
	if err := o.checkConsole(cfg.AdminToken); err != nil {
		return nil, err
	}
	if o.console {
		cfg.Console = &proxy.ConsoleConfig{Content: o.consoleContent}
	}
	cfg.LogContent = o.logContent
	if o.logContent && cfg.Logger != nil {
		if !cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
			return nil, errors.New("--log-content needs --log-level debug")
		}
		cfg.Logger.Warn("--log-content is on: request bodies, prompts included, are logged at debug level")
	}
	return proxy.New(cfg)
}

// serveOps starts the ops listener when --ops-listen is set and returns its stop function.
func (o *obsConfig) serveOps(s *proxy.Server, log *slog.Logger) (stop func(), err error) {
	if err := o.checkPprof(); err != nil {
		return nil, err
	}
	if o.opsListen == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", o.opsListen)
	if err != nil {
		return nil, fmt.Errorf("--ops-listen: %w", err)
	}
	var h http.Handler = s.OpsHandler()
	if o.pprof {
		h = withPprof(h, s.OpsGuard)
		log.Warn("--pprof is on: the ops listener serves Go's profiler under /debug/pprof/ (behind the metrics credentials); keep it on a private address")
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: defaultReadHeaderTimeout,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { _ = srv.Serve(ln) }()
	log.Info("ops listener (metrics, health)", "addr", ln.Addr().String())
	if o.console {
		log.Info("operator console", "url", "http://"+ln.Addr().String()+"/console/", "content", o.consoleContent)
		if o.consoleContent {
			log.Warn("--console-content is on: the console shows conversation content to whoever logs in with the admin token; every view is logged")
		}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// Memory: the runtime's memory limit and the in-flight body budget (internal/budget).

// memoryLimitHeadroom is the share of a container's memory limit left outside the Go heap's soft
// limit for what the runtime does not count (thread stacks, the binary, kernel buffers): the
// default limit is 90% of the cgroup's.
const memoryLimitHeadroom = 10

// budgetMemoryHeadroom is what the default memory limit adds to the in-flight body budget when
// nothing else sets a limit (no GOMEMLIMIT, no --memory-limit, no cgroup limit): the Go heap's
// room for everything that is not a request body (caches, connections, stacks). Without a limit
// the runtime lets the heap grow to twice what is live (GOGC=100) before it collects, so freed
// bodies of a burst stay resident while the next burst is read, and a budget of bodies does not
// bound RSS; with it, the collector runs early instead. The limit is soft: a heap that needs more
// still gets it (the runtime caps the collector's share of CPU), so it never fails a request.
// 32 MiB: RSS runs a few tens of MiB above the runtime's limit (the binary, allocations made
// during a collection), and 100 x 20 MB bodies under a 1 GiB budget peaked 56 MB over the limit
// at 64 MiB of headroom (BENCHMARKS.md).

const budgetMemoryHeadroom = 32 << 20

// memConfig is --memory-limit and --max-inflight-body-bytes, each "auto" or a size.
type memConfig struct {
	memoryLimit   string
	inflightBytes string
	skimCache     string
}

func (m *memConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&m.memoryLimit, "memory-limit", "auto", "soft memory limit of the Go runtime (bytes, or KiB/MiB/GiB); auto: GOMEMLIMIT when set, else 90% of the container's cgroup memory limit, else the in-flight body budget plus 32 MiB (0: none)")
	fs.StringVar(&m.inflightBytes, "max-inflight-body-bytes", "auto", "bytes of request bodies compactd holds at once across all requests (the routes it parses); past it a request gets a 503 with Retry-After in its API's dialect (auto: a quarter of the memory limit, 1 GiB without one, at least --max-body-bytes; 0: no budget)")
	fs.StringVar(&m.skimCache, "skim-cache-bytes", "auto", "bytes of remembered skims: per tenant and API, what the skim learnt of a conversation's last request, so the next one (the same bytes plus new items, proved by a keyed MAC) is validated only past them (auto: 64 MiB; 0: no cache)")
}

// check refuses a value that is neither auto nor a size, when the flags are parsed, and a budget
// smaller than the largest body allowed: such a body could never fit, and would be answered
// "retry shortly" forever.
func (m *memConfig) check(maxBody int64) error {
	for _, f := range []struct{ name, v string }{{"memory-limit", m.memoryLimit}, {"max-inflight-body-bytes", m.inflightBytes}, {"skim-cache-bytes", m.skimCache}} {
		if v := strings.TrimSpace(f.v); v != "auto" && v != "" {
			n, err := parseByteSize(v)
			if err != nil {
				return usageErrorf("serve", "--%s: %v", f.name, err)
			}
			if f.name == "max-inflight-body-bytes" && n > 0 && n < maxBody {
				return usageErrorf("serve", "--max-inflight-body-bytes (%d) must be at least --max-body-bytes (%d), or 0 for no budget", n, maxBody)
			}
		}
	}
	return nil
}

// apply sets the runtime's memory limit and returns the proxy's MaxInflightBodyBytes and
// SkimCacheBytes (negative: none) and what was decided, for the startup log.
func (m *memConfig) apply(maxBody int64) (budget, skim int64, attrs []any, err error) {
	skim = proxy.DefaultSkimCacheBytes
	if v := strings.TrimSpace(m.skimCache); v != "auto" && v != "" {
		n, err := parseByteSize(v)
		if err != nil {
			return 0, 0, nil, usageErrorf("serve", "--skim-cache-bytes: %v", err)
		}
		skim = n
		if n == 0 {
			skim = -1
		}
	}
	limit, source := int64(0), "none"
	autoNone := false // auto, and nothing sets a limit
	switch v := strings.TrimSpace(m.memoryLimit); v {
	case "auto", "":
		autoNone = true
		if os.Getenv("GOMEMLIMIT") != "" {
			limit, source, autoNone = debug.SetMemoryLimit(-1), "GOMEMLIMIT", false // the runtime read it at start
		} else if cg := cgroupMemoryLimit(); cg > 0 {
			limit, source, autoNone = cg/100*(100-memoryLimitHeadroom), "cgroup", false
			debug.SetMemoryLimit(limit)
		}
	default:
		n, err := parseByteSize(v)
		if err != nil {
			return 0, 0, nil, usageErrorf("serve", "--memory-limit: %v", err)
		}
		limit, source = n, "flag"
		if n == 0 {
			source = "none"
			n = math.MaxInt64
		}
		debug.SetMemoryLimit(n)
	}
	switch v := strings.TrimSpace(m.inflightBytes); v {
	case "auto", "":
		budget = proxy.InflightBodyBytesFor(limit, maxBody)
	default:
		n, err := parseByteSize(v)
		if err != nil {
			return 0, 0, nil, usageErrorf("serve", "--max-inflight-body-bytes: %v", err)
		}
		budget = n
		if n == 0 {
			budget = -1
		}
	}
	if autoNone && budget > 0 {
		// auto found no limit: bound the heap by the budget and the skim cache's, plus room for
		// the rest.
		limit, source = budget+max(skim, 0)+budgetMemoryHeadroom, "budget"
		debug.SetMemoryLimit(limit)
	}
	return budget, skim, []any{"memory_limit", limit, "memory_limit_source", source, "max_inflight_body_bytes", max(budget, 0),
		"skim_cache_bytes", max(skim, 0), "skim_cache_mac", skimcache.MAC()}, nil
}

// cgroupMemoryLimit is the memory limit of the cgroup compactd runs in (v2 memory.max, else v1
// memory.limit_in_bytes), 0 when there is none. In a container /sys/fs/cgroup is the container's
// own cgroup.
func cgroupMemoryLimit() int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		// cgroup v1 reports "no limit" as a page-rounded MaxInt64.
		if err != nil || n <= 0 || n >= math.MaxInt64/2 {
			return 0
		}
		return n
	}
	return 0
}

// parseByteSize reads a byte count: a bare number, or with a binary unit (KiB, MiB, GiB; KB, MB
// and GB read as the same binary units, as `docker --memory` does).
func parseByteSize(s string) (int64, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	for _, suf := range []struct {
		s string
		m int64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if n, ok := strings.CutSuffix(u, suf.s); ok {
			u, mult = strings.TrimSpace(n), suf.m
			break
		}
	}
	n, err := strconv.ParseInt(u, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a size in bytes (e.g. 536870912, 512MiB, 2GiB; 0: off)", s)
	}
	return n * mult, nil
}

// logBuffer is the log's writer: records are gathered in a buffer and written to the
// underlying writer when it fills, every interval, and on Close, instead of one unbuffered write
// (a syscall) per access-log line. Warnings and errors are written at once (see flushingHandler):
// they must not sit in a buffer if the process dies.
type logBuffer struct {
	mu   sync.Mutex
	w    *bufio.Writer
	stop chan struct{}
	done chan struct{}
}

const logBufferSize = 64 << 10

func newLogBuffer(w io.Writer, interval time.Duration) *logBuffer {
	b := &logBuffer{w: bufio.NewWriterSize(w, logBufferSize), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				b.Flush()
			case <-b.stop:
				return
			}
		}
	}()
	return b
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}

// Flush writes out what is buffered.
func (b *logBuffer) Flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	_ = b.w.Flush()
}

// Close stops the periodic flush and flushes what is left.
func (b *logBuffer) Close() {
	select {
	case <-b.stop:
	default:
		close(b.stop)
		<-b.done
	}
	b.Flush()
}

// flushingHandler flushes the log buffer after every record at warning level or above.
type flushingHandler struct {
	slog.Handler
	buf *logBuffer
}

func (h flushingHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		h.buf.Flush()
	}
	return err
}

func (h flushingHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return flushingHandler{h.Handler.WithAttrs(a), h.buf}
}
func (h flushingHandler) WithGroup(n string) slog.Handler {
	return flushingHandler{h.Handler.WithGroup(n), h.buf}
}

// withPprof serves net/http/pprof under /debug/pprof/ beside ops, every path of it behind guard
// (the credentials of /metrics). It is opt-in and on the ops listener only: a profile of a proxy
// under load is how a slow path is found in the process that has it (the side-by-side
// benchmark's rows). /debug/pprof/cmdline is not served: the command line may hold secrets
// (--admin-token, --metrics-token, --keys), and a profiler is no place to read them back.
func withPprof(ops http.Handler, guard func(http.Handler) http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", ops)
	mux.Handle("/debug/pprof/", guard(http.HandlerFunc(pprof.Index))) // also every named profile: heap, goroutine, …
	mux.Handle("/debug/pprof/cmdline", guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "compactd does not serve its command line: it may hold secrets", http.StatusNotFound)
	})))
	mux.Handle("/debug/pprof/profile", guard(http.HandlerFunc(pprof.Profile)))
	mux.Handle("/debug/pprof/symbol", guard(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("/debug/pprof/trace", guard(http.HandlerFunc(pprof.Trace)))
	return mux
}
