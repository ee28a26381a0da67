package main

import (
	"context"
	"errors"
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

// --pprof serves the profiler on the ops listener only, behind the guard of /metrics (a token
// or basic auth, one of which it needs), and never serves /debug/pprof/cmdline, which would
// show secrets given as flags (--admin-token opens the admin API).
func TestServeOpsPprof(t *testing.T) {
	info := slog.New(slog.NewTextHandler(io.Discard, nil))
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer m-t0k") }
	basic := func(r *http.Request) { r.SetBasicAuth("prom", "s3cret") }
	for _, tt := range []struct {
		name    string
		obs     obsConfig
		wantErr string
		auth    func(*http.Request) // the right credentials; nil: pprof is off
	}{
		{name: "off", obs: obsConfig{metrics: true, opsListen: "127.0.0.1:0"}},
		{name: "token", obs: obsConfig{metrics: true, opsListen: "127.0.0.1:0", metricsToken: "m-t0k", pprof: true}, auth: bearer},
		{name: "basic auth", obs: obsConfig{metrics: true, opsListen: "127.0.0.1:0", metricsBasicAuth: "prom:s3cret", pprof: true}, auth: basic},
		{name: "metrics off", obs: obsConfig{opsListen: "127.0.0.1:0", metricsToken: "m-t0k", pprof: true}, auth: bearer},
		{name: "without a guard", obs: obsConfig{metrics: true, opsListen: "127.0.0.1:0", pprof: true}, wantErr: "--pprof needs --metrics-token or --metrics-basic-auth"},
		{name: "without an ops listener", obs: obsConfig{metrics: true, metricsToken: "m-t0k", pprof: true}, wantErr: "--pprof needs --ops-listen"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.obs.newServer(proxyConfigForTest(info))
			if err == nil {
				defer s.Close(context.Background())
				// serveOps listens on opsListen; find the address it took from the log.
				var logBuf strings.Builder
				var stop func()
				if stop, err = tt.obs.serveOps(s, slog.New(slog.NewTextHandler(&logBuf, nil))); err == nil {
					defer stop()
					_, rest, ok := strings.Cut(logBuf.String(), "addr=")
					if !ok {
						t.Fatalf("no ops address in the log: %q", logBuf.String())
					}
					tt.obs.opsListen = strings.Fields(rest)[0]
				}
			}
			if tt.wantErr != "" {
				var ue *usageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want a usage error %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			get := func(path string, auth func(*http.Request)) (int, string) {
				req, _ := http.NewRequest("GET", "http://"+tt.obs.opsListen+path, nil)
				if auth != nil {
					auth(req)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			type check struct {
				path string
				auth func(*http.Request)
				want int
			}
			checks := []check{{"/healthz", nil, 200}, {"/debug/pprof/", nil, 404}, {"/debug/pprof/cmdline", nil, 404}}
			if tt.auth != nil {
				wrong := func(r *http.Request) { r.Header.Set("Authorization", "Bearer wrong") }
				checks = []check{
					{"/healthz", nil, 200}, // probes stay open
					{"/debug/pprof/", nil, 401}, {"/debug/pprof/", wrong, 401}, {"/debug/pprof/heap?debug=1", nil, 401},
					{"/debug/pprof/goroutine?debug=1", nil, 401}, {"/debug/pprof/symbol", nil, 401}, {"/debug/pprof/cmdline", nil, 401},
					{"/debug/pprof/", tt.auth, 200}, {"/debug/pprof/heap?debug=1", tt.auth, 200}, {"/debug/pprof/symbol", tt.auth, 200},
					{"/debug/pprof/cmdline", tt.auth, 404},
				}
			}
			for i, c := range checks {
				code, body := get(c.path, c.auth)
				if code != c.want {
					t.Errorf("ops %s (check %d) = %d, want %d", c.path, i, code, c.want)
				}
				if strings.Contains(body, "m-t0k") || strings.Contains(body, "s3cret") {
					t.Errorf("ops %s discloses a secret: %.200s", c.path, body)
				}
			}
		})
	}
}

// --console serves the console on the ops listener under /console/ (and nothing of it on the
// API listener); it needs the ops listener and the admin token, --console-content needs it.
func TestServeOpsConsole(t *testing.T) {
	info := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range []struct {
		name    string
		obs     obsConfig
		token   string
		wantErr string
	}{
		{name: "on", obs: obsConfig{opsListen: "127.0.0.1:0", console: true}, token: "adm"},
		{name: "content", obs: obsConfig{opsListen: "127.0.0.1:0", console: true, consoleContent: true}, token: "adm"},
		{name: "no ops listener", obs: obsConfig{console: true}, token: "adm", wantErr: "--console needs --ops-listen"},
		{name: "no admin token", obs: obsConfig{opsListen: "127.0.0.1:0", console: true}, wantErr: "--console needs --admin-token"},
		{name: "content without the console", obs: obsConfig{opsListen: "127.0.0.1:0", consoleContent: true}, token: "adm", wantErr: "--console-content needs --console"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.obs.checkConsole(tt.token); tt.wantErr != "" {
				var ue *usageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want a usage error %q", err, tt.wantErr)
				}
				return
			} else if err != nil {
				t.Fatal(err)
			}
			cfg := proxyConfigForTest(info)
			cfg.AdminToken = tt.token
			s, err := tt.obs.newServer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			var logBuf strings.Builder
			stop, err := tt.obs.serveOps(s, slog.New(slog.NewTextHandler(&logBuf, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			_, rest, _ := strings.Cut(logBuf.String(), "addr=")
			addr := strings.Fields(rest)[0]
			resp, err := http.Get("http://" + addr + "/console/login")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(b), "Operator console") || resp.Header.Get("Content-Security-Policy") == "" {
				t.Errorf("the ops listener's /console/login: %d", resp.StatusCode)
			}
			if got := strings.Contains(logBuf.String(), "--console-content is on"); got != tt.obs.consoleContent {
				t.Errorf("content warning logged = %v, want %v", got, tt.obs.consoleContent)
			}
		})
	}
}
