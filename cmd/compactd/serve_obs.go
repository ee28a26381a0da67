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
	"strings"
	"time"

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
}

func (o *obsConfig) flags(fs *flag.FlagSet) {
	fs.BoolVar(&o.metrics, "metrics", true, "serve Prometheus metrics on /metrics")
	fs.StringVar(&o.opsListen, "ops-listen", "", "separate ops listener for /metrics, /healthz and /readyz, e.g. 127.0.0.1:9464 (default: all on the main listener; the admin API stays there)")
	deprecate(fs, "admin-listen", "ops-listen")
	fs.StringVar(&o.metricsToken, "metrics-token", "", "bearer token required on /metrics (prefer the env variable)")
	fs.StringVar(&o.metricsBasicAuth, "metrics-basic-auth", "", "user:password required on /metrics as basic auth (prefer the env variable)")
	fs.StringVar(&o.metricModels, "metric-models", "", "comma-separated model names always kept as gen_ai_request_model label values (others: the first 32 seen, then \"other\")")
	fs.BoolVar(&o.readyCheckUpstream, "ready-check-upstream", false, "/readyz also dials the upstreams (TCP) and reports not ready when one is unreachable")
	fs.BoolVar(&o.logContent, "log-content", false, "DEBUG ONLY: log the head of every request body (prompts!) at debug level; needs --log-level debug")
}

// newServer completes cfg with the observability settings and builds the proxy.
func (o *obsConfig) newServer(cfg proxy.Config) (*proxy.Server, error) {
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
	if o.opsListen == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", o.opsListen)
	if err != nil {
		return nil, fmt.Errorf("--ops-listen: %w", err)
	}
	srv := &http.Server{Handler: s.OpsHandler(), ReadHeaderTimeout: defaultReadHeaderTimeout,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { _ = srv.Serve(ln) }()
	log.Info("ops listener (metrics, health)", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
