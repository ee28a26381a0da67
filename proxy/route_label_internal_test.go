package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/crypto"
)

// Every kind of route gets its chi pattern in the access log (and so in the metrics' route
// label) and the request id on both the response and the log line, now that instrument and the
// gate wrap the router and hand chi its route context (reqCtx) instead of running inside it:
// compactd's own routes, the Messages catch-all, the pass-through, the probes, and the admin
// API's mounted subrouter, whose pattern has two parts.
func TestAccessLogRoutes(t *testing.T) {
	key, _ := crypto.GenerateKey()
	ring, _ := crypto.NewKeyring(key)
	up, _ := url.Parse("http://upstream.invalid")
	sealer, err := archive.KeyringSealer(ring, "")
	if err != nil {
		t.Fatal(err)
	}
	store, err := archive.Open(context.Background(), filepath.Join(t.TempDir(), "archive.db"), sealer)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s, err := New(Config{Upstream: up, AnthropicUpstream: up, Transport: cannedUpstream{}, Sealer: ring,
		Summarizer: instantSummarizer{}, Registry: NewRegistry(), AdminToken: "admin-secret", Archive: store,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeInternal(t, s) })
	for _, tc := range []struct {
		method, path, body, route string
	}{
		{"POST", "/v1/responses", `{"model":"gpt-5.4","input":"hi"}`, "/v1/responses"},
		{"POST", "/v1/messages", `{"model":"claude-x","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, "/v1/messages"},
		{"GET", "/v1/messages/batches/b1", "", "/v1/messages/*"},
		{"GET", "/v1/models", "", "passthrough"},
		{"GET", "/healthz", "", "/healthz"},
		{"DELETE", "/v1/compactd/conversations/c1", "", "/v1/compactd/conversations/{id}"},
	} {
		logs.Reset()
		req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer admin-secret")
		req.Header.Set("X-Request-Id", "rid-"+strings.ReplaceAll(tc.path, "/", "_"))
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		var line map[string]any
		for _, l := range bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n")) {
			var m map[string]any
			if json.Unmarshal(l, &m) == nil && m["msg"] == "request" {
				line = m
			}
		}
		if line == nil {
			t.Errorf("%s %s: no access log line in %s", tc.method, tc.path, logs.Bytes())
			continue
		}
		if line["route"] != tc.route {
			t.Errorf("%s %s: route %v, want %s", tc.method, tc.path, line["route"], tc.route)
		}
		id := req.Header.Get("X-Request-Id")
		if line["request_id"] != id || w.Header().Get("X-Request-Id") != id {
			t.Errorf("%s %s: request id %v in the log, %q on the response, want %q", tc.method, tc.path,
				line["request_id"], w.Header().Get("X-Request-Id"), id)
		}
		if tc.route == "passthrough" && line["path"] != tc.path {
			t.Errorf("%s %s: path %v in the log", tc.method, tc.path, line["path"])
		}
	}
}

// ServeHTTP leaves the request it is handed as it was, body included: net/http looks at its own
// request's body after the handler to decide how to close a connection whose body was not read
// (gracefully, so a client still uploading a refused body reads the 413 instead of a reset).
func TestServeHTTPLeavesRequest(t *testing.T) {
	key, _ := crypto.GenerateKey()
	ring, _ := crypto.NewKeyring(key)
	up, _ := url.Parse("http://upstream.invalid")
	s, err := New(Config{Upstream: up, AnthropicUpstream: up, Transport: cannedUpstream{}, Sealer: ring,
		Summarizer: instantSummarizer{}, Registry: NewRegistry(), MaxBodyBytes: 1 << 10,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeInternal(t, s) })
	for _, tc := range []struct{ name, path, body string }{
		{"refused by the gate", "/v1/responses", strings.Repeat(" ", 2<<10)},
		{"handled", "/v1/responses", `{"model":"gpt-5.4","input":"hi"}`},
		{"passed through", "/v1/files", `{}`},
	} {
		req := httptest.NewRequest("POST", tc.path, strings.NewReader(tc.body))
		body, ctx := req.Body, req.Context()
		s.ServeHTTP(httptest.NewRecorder(), req)
		if req.Body != body || req.Context() != ctx {
			t.Errorf("%s: the request's body or context was replaced", tc.name)
		}
	}
}

func closeInternal(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

var _ http.Handler = (*Server)(nil)
