package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

func TestHealthcheckTarget(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"default", nil, nil, "http://127.0.0.1:8080/healthz"},
		{"image env: wildcard v4 is probed on loopback", nil, map[string]string{"COMPACTD_LISTEN": "0.0.0.0:8080"}, "http://127.0.0.1:8080/healthz"},
		{"empty host", []string{"--listen", ":9000"}, nil, "http://127.0.0.1:9000/healthz"},
		{"wildcard v6", []string{"--listen", "[::]:9000"}, nil, "http://[::1]:9000/healthz"},
		{"specific host", []string{"--listen", "10.1.2.3:80"}, nil, "http://10.1.2.3:80/healthz"},
		{"ops listener wins", nil, map[string]string{"COMPACTD_LISTEN": "0.0.0.0:8080", "COMPACTD_OPS_LISTEN": "0.0.0.0:9100"}, "http://127.0.0.1:9100/healthz"},
		{"deprecated COMPACTD_ADMIN_LISTEN still works", nil, map[string]string{"COMPACTD_LISTEN": "0.0.0.0:8080", "COMPACTD_ADMIN_LISTEN": "0.0.0.0:9100"}, "http://127.0.0.1:9100/healthz"},
		{"COMPACTD_OPS_LISTEN beats the deprecated variable", nil, map[string]string{"COMPACTD_OPS_LISTEN": ":9200", "COMPACTD_ADMIN_LISTEN": ":9100"}, "http://127.0.0.1:9200/healthz"},
		{"deprecated --admin-listen still works", []string{"--admin-listen", ":9300"}, nil, "http://127.0.0.1:9300/healthz"},
		{"healthcheck's own flags read no environment", nil, map[string]string{"COMPACTD_URL": "http://h:1/x", "COMPACTD_PATH": "/readyz"}, "http://127.0.0.1:8080/healthz"},
		{"readiness", []string{"--path", "/readyz"}, nil, "http://127.0.0.1:8080/readyz"},
		{"flag beats env", []string{"--listen", "127.0.0.1:1"}, map[string]string{"COMPACTD_LISTEN": "0.0.0.0:8080"}, "http://127.0.0.1:1/healthz"},
		{"url overrides all", []string{"--url", "http://h:1/x"}, map[string]string{"COMPACTD_OPS_LISTEN": ":9100"}, "http://h:1/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"COMPACTD_LISTEN", "COMPACTD_OPS_LISTEN", "COMPACTD_ADMIN_LISTEN", "COMPACTD_URL", "COMPACTD_PATH"} {
				t.Setenv(k, tt.env[k])
				if _, set := tt.env[k]; !set {
					unsetenv(t, k)
				}
			}
			var c healthcheckConfig
			var err error
			stderr := captureStderr(t, func() { c, err = parseHealthcheckFlags(tt.args) })
			if err != nil {
				t.Fatal(err)
			}
			if deprecated := strings.Contains(tt.name, "deprecated") && !strings.Contains(tt.name, "beats"); deprecated != strings.Contains(stderr, "deprecated") {
				t.Errorf("stderr = %q; want a deprecation warning: %v", stderr, deprecated)
			}
			got, err := c.target()
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("target = %q, want %q", got, tt.want)
			}
		})
	}
	var c healthcheckConfig
	c.listen = "no-port"
	if _, err := c.target(); err == nil {
		t.Error("an address without a port was accepted")
	}
}

func TestHealthcheckProbe(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(hang)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/healthz"
	ln.Close()

	tests := []struct {
		name    string
		status  int
		url     string
		wantErr string
	}{
		{"healthy", http.StatusOK, srv.URL + "/healthz", ""},
		{"204 is healthy", http.StatusNoContent, srv.URL + "/healthz", ""},
		{"unhealthy", http.StatusServiceUnavailable, srv.URL + "/healthz", "unhealthy: 503"},
		{"wrong path", http.StatusOK, srv.URL + "/nope", "unhealthy: 404"},
		{"down", http.StatusOK, dead, "unreachable"},
		{"hangs", http.StatusOK, slow.URL + "/healthz", "no answer within"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status = tt.status
			_, err := probe(tt.url, 200*time.Millisecond)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("probe: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("probe err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func unsetenv(t *testing.T, k string) {
	t.Helper()
	t.Setenv(k, "") // registers restoration of the old value
	if err := os.Unsetenv(k); err != nil {
		t.Fatal(err)
	}
}
