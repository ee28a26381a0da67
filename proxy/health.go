package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/compactd/compactd/internal/crypto"
)

// ops is the Server's operational surface: /healthz, /readyz and /metrics.
type ops struct {
	metrics http.Handler // nil without a registry
}

// setupObservability wraps the upstream transport and the summariser in their instrumented
// decorators and makes the logger add request ids. New calls it before building the reverse
// proxies, which take the transport from s.cfg.
func (s *Server) setupObservability() {
	s.logHandler = s.log.Handler()
	s.log = slog.New(ctxHandler{s.logHandler})
	s.cfg.Transport = &instrumentedTransport{next: s.cfg.Transport, m: s.metrics}
	if s.cfg.Summarizer != nil {
		s.cfg.Summarizer = newInstrumentedSummarizer(s.cfg.Summarizer, s.metrics, s.live)
	}
	if s.cfg.MessagesSummarizer != nil {
		s.cfg.MessagesSummarizer = newInstrumentedSummarizer(s.cfg.MessagesSummarizer, s.metrics, s.live)
	}
	s.ops = &ops{}
	if s.cfg.Registry != nil {
		h := promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{
			Registry:          s.cfg.Registry, // promhttp_metric_handler_errors_total
			EnableOpenMetrics: true,           // exemplars and _created where supported
		})
		s.ops.metrics = s.OpsGuard(h)
	}
}

// routeObservability installs the operational routes on r. The middleware (instrumenting
// outermost, then the gate, server.go, that every request passes before routing) wraps the
// router instead of being installed in it: see Server.handler.
func (s *Server) routeObservability(r chi.Router) {
	r.HandleFunc("/healthz", handleHealthz)
	r.HandleFunc("/readyz", readyz(s.cfg.Sealer, s.cfg.Tenant, s.cfg.ReadyUpstreams))
	if s.ops.metrics != nil && !s.cfg.MetricsSeparate {
		r.Handle("/metrics", s.ops.metrics)
	}
}

// OpsHandler serves /metrics, /healthz and /readyz, for a separate admin listener
// (--ops-listen) that keeps scrapes and probes off the API port, and, with Config.Console, the
// operator console under /console/: only here, never on the API handler. Admin requests are
// not counted in the request metrics.
func (s *Server) OpsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", handleHealthz)
	mux.HandleFunc("/readyz", readyz(s.cfg.Sealer, s.cfg.Tenant, s.cfg.ReadyUpstreams))
	if s.ops.metrics != nil {
		mux.Handle("/metrics", s.ops.metrics)
	}
	if h := s.consoleHandler(); h != nil {
		mux.Handle("/console/", h)
		mux.Handle("/console", http.RedirectHandler("/console/", http.StatusSeeOther))
	}
	return mux
}

// handleHealthz is liveness: the process serves HTTP. It checks nothing else on purpose, so an
// upstream outage never gets compactd restarted.
func handleHealthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte("ok\n"))
}

// readyTimeout bounds each readiness check (an upstream dial).
const readyTimeout = 2 * time.Second

// readyz is readiness: the keyring seals and opens (so compaction items can be issued and
// read), and, when Config.ReadyUpstreams is set, each upstream accepts a TCP connection. The
// answer is JSON naming each check; 503 when any fails.
func readyz(sealer crypto.Sealer, tenant string, upstreams []*url.URL) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { serveReadyz(w, r, sealer, tenant, upstreams) }
}

func serveReadyz(w http.ResponseWriter, r *http.Request, sealer crypto.Sealer, tenant string, upstreams []*url.URL) {
	checks := map[string]string{"keys": checkKeys(sealer, tenant)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, u := range upstreams {
		wg.Go(func() {
			addr := hostPort(u)
			res := dialCheck(r.Context(), addr)
			mu.Lock()
			checks["upstream "+addr] = res
			mu.Unlock()
		})
	}
	wg.Wait()
	status, code := "ok", http.StatusOK
	for _, v := range checks {
		if v != "ok" {
			status, code = "unavailable", http.StatusServiceUnavailable
		}
	}
	body, _ := json.Marshal(map[string]any{"status": status, "checks": checks})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}

// checkKeys seals and opens a probe value with the active key: a loaded, usable keyring.
func checkKeys(sealer crypto.Sealer, tenant string) string {
	if sealer == nil {
		return "no keyring loaded"
	}
	b := crypto.Binding{Kind: "compactd.readyz", ItemID: "readyz", Tenant: tenant}
	blob, err := sealer.Seal([]byte("ready"), b)
	if err == nil {
		_, err = sealer.Open(blob, b)
	}
	if err != nil {
		return "keyring cannot seal and open: " + crypto.Reason(err)
	}
	return "ok"
}

// hostPort is the dial address of an upstream URL, with the scheme's default port.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "443"
	if u.Scheme == "http" {
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

func dialCheck(ctx context.Context, addr string) string {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "unreachable"
	}
	_ = c.Close()
	return "ok"
}

// OpsGuard wraps h in the guard of /metrics: the bearer token (Config.MetricsToken) or the
// basic-auth credentials (MetricsUser, MetricsPassword). serve puts the profiler (--pprof)
// behind it on the ops listener. With neither configured it returns h as it is.
func (s *Server) OpsGuard(h http.Handler) http.Handler {
	return metricsAuth(h, s.cfg.MetricsToken, s.cfg.MetricsUser, s.cfg.MetricsPassword)
}

// metricsAuth guards h with a bearer token or basic-auth credentials. Comparisons are of SHA-256
// digests in constant time, so neither content nor length leaks through timing.
func metricsAuth(h http.Handler, token, user, pass string) http.Handler {
	if token == "" && user == "" && pass == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := false
		if token != "" {
			if t, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found {
				ok = secretEqual(t, token)
			}
		}
		if !ok && (user != "" || pass != "") {
			if u, p, found := r.BasicAuth(); found {
				// Both compared always: no early exit on a wrong user name.
				uok, pok := secretEqual(u, user), secretEqual(p, pass)
				ok = uok && pok
			}
		}
		if !ok {
			if user != "" || pass != "" {
				w.Header().Set("WWW-Authenticate", `Basic realm="compactd metrics"`)
			} else {
				w.Header().Set("WWW-Authenticate", `Bearer realm="compactd metrics"`)
			}
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func secretEqual(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}
