package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/proxy"
)

func TestObsConfigNewServer(t *testing.T) {
	info := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		name    string
		obs     obsConfig
		wantErr string
		// metrics: expected /metrics status without and with credentials (0: not checked)
		anon, authed int
		auth         func(*http.Request)
	}{
		{name: "bad basic auth", obs: obsConfig{metrics: true, metricsBasicAuth: "nopassword"}, wantErr: "user:password"},
		{name: "log content needs debug", obs: obsConfig{logContent: true}, wantErr: "--log-level debug"},
		{name: "open metrics", obs: obsConfig{metrics: true}, anon: 200},
		{name: "token", obs: obsConfig{metrics: true, metricsToken: "t0k"}, anon: 401, authed: 200,
			auth: func(r *http.Request) { r.Header.Set("Authorization", "Bearer t0k") }},
		{name: "basic", obs: obsConfig{metrics: true, metricsBasicAuth: "prom:s3cret"}, anon: 401, authed: 200,
			auth: func(r *http.Request) { r.SetBasicAuth("prom", "s3cret") }},
		{name: "separate ops listener", obs: obsConfig{metrics: true, opsListen: "127.0.0.1:0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c serveConfig
			c.obs = tt.obs
			s, err := c.obs.newServer(proxyConfigForTest(info))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			get := func(h http.Handler, auth func(*http.Request)) int {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest("GET", "/metrics", nil)
				if auth != nil {
					auth(req)
				}
				h.ServeHTTP(rec, req)
				return rec.Code
			}
			if tt.anon != 0 {
				if got := get(s, nil); got != tt.anon {
					t.Errorf("anonymous /metrics = %d, want %d", got, tt.anon)
				}
			}
			if tt.authed != 0 {
				if got := get(s, tt.auth); got != tt.authed {
					t.Errorf("authenticated /metrics = %d, want %d", got, tt.authed)
				}
			}
			if tt.obs.opsListen != "" {
				if got := get(s.OpsHandler(), nil); got != 200 {
					t.Errorf("ops /metrics = %d, want 200", got)
				}
				if got := get(s, nil); got == 200 {
					t.Error("API handler serves /metrics although an ops listener is configured")
				}
			}
		})
	}
}

// proxyConfigForTest is a proxy configuration that reaches nothing: /metrics is served by
// compactd itself, so no upstream is needed.
func proxyConfigForTest(log *slog.Logger) proxy.Config {
	u, _ := url.Parse("http://127.0.0.1:1")
	key, err := crypto.GenerateKey()
	if err != nil {
		panic(err)
	}
	ring, err := crypto.NewKeyring(key)
	if err != nil {
		panic(err)
	}
	// proxy.New needs a summariser; this one is never called (nothing is compacted here).
	sum, err := summarizer.New(summarizer.Config{BaseURL: "http://127.0.0.1:1/v1"})
	if err != nil {
		panic(err)
	}
	return proxy.Config{Upstream: u, AnthropicUpstream: u, Sealer: ring, Summarizer: sum, Logger: log}
}

// --pprof serves the profiler on the ops listener only, and refuses to start without one.
func TestServeOpsPprof(t *testing.T) {
	info := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range []struct {
		name      string
		obs       obsConfig
		wantErr   string
		wantPprof int // status of /debug/pprof/cmdline on the ops listener
	}{
		{name: "off", obs: obsConfig{metrics: true, opsListen: "127.0.0.1:0"}, wantPprof: http.StatusNotFound},
		{name: "on", obs: obsConfig{metrics: true, opsListen: "127.0.0.1:0", pprof: true}, wantPprof: http.StatusOK},
		{name: "without an ops listener", obs: obsConfig{metrics: true, pprof: true}, wantErr: "--pprof needs --ops-listen"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.obs.newServer(proxyConfigForTest(info))
			if err != nil {
				t.Fatal(err)
			}
			o := tt.obs
			// serveOps listens on opsListen; find the address it took from the log.
			var logBuf strings.Builder
			log := slog.New(slog.NewTextHandler(&logBuf, nil))
			stop, err := o.serveOps(s, log)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			_, rest, ok := strings.Cut(logBuf.String(), "addr=")
			if !ok {
				t.Fatalf("no ops address in the log: %q", logBuf.String())
			}
			addr := strings.Fields(rest)[0]
			for path, want := range map[string]int{"/debug/pprof/cmdline": tt.wantPprof, "/metrics": http.StatusOK} {
				resp, err := http.Get("http://" + addr + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("ops %s = %d, want %d", path, resp.StatusCode, want)
				}
			}
		})
	}
}
