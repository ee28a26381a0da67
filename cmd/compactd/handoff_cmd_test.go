package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/session"
)

const (
	codexLog  = "../../internal/session/testdata/sessions/codex-rollout.jsonl"
	claudeLog = "../../internal/session/testdata/sessions/claude-session.jsonl"
)

func TestParseHandoffFlags(t *testing.T) {
	t.Setenv("COMPACTD_SUMMARIZER_KEY", "sk-env")
	t.Setenv("COMPACTD_SUMMARIZER_MODEL", "")
	tests := []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, c handoffConfig)
	}{
		{name: "flags after files", args: []string{"a.jsonl", "-o", "out.md", "b.jsonl", "--format", "claude"}, check: func(t *testing.T, c handoffConfig) {
			if strings.Join(c.files, ",") != "a.jsonl,b.jsonl" || c.out != "out.md" || c.format != session.FormatClaude {
				t.Errorf("config = %+v", c)
			}
			if c.sumKey != "sk-env" {
				t.Error("summariser key not taken from the environment")
			}
		}},
		{name: "watch defaults", args: []string{"--watch", "dir", "--idle", "2s"}, check: func(t *testing.T, c handoffConfig) {
			if c.watch != "dir" || c.idle != 2*time.Second || c.poll != 500*time.Millisecond {
				t.Errorf("config = %+v", c)
			}
		}},
		{name: "no input", args: nil, wantErr: "no session logs"},
		{name: "bad format", args: []string{"--format", "gemini", "a.jsonl"}, wantErr: "unknown session format"},
		{name: "gap check without model", args: []string{"--gap-check", "3", "a.jsonl"}, wantErr: "summarizer-model"},
		{name: "watch and files", args: []string{"--watch", "d", "a.jsonl"}, wantErr: "directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseHandoffFlags(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestHandoffOnce(t *testing.T) {
	out := filepath.Join(t.TempDir(), "resume.md")
	c, err := parseHandoffFlags([]string{codexLog, claudeLog, "-o", out})
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if err := handoffOnce(context.Background(), c, nil, io.Discard, &stderr); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(md), session.ResumeHeader) {
		t.Error("resume does not start with the fixed header")
	}
	line := stderr.String()
	if !strings.Contains(line, "bytes") || !strings.Contains(line, "tokens (−9") {
		t.Errorf("reduction line = %q", line)
	}
}

// TestHandoffGapCheckCLI runs --gap-check 3 against a local stand-in summariser.
func TestHandoffGapCheckCLI(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m",
			"output":[{"type":"message","id":"msg_1","role":"assistant","status":"completed",
			"content":[{"type":"output_text","annotations":[],"text":"- pageSize stays 500: the cursor API caps pages at 500"}]}],
			"parallel_tool_calls":false,"tool_choice":"auto","tools":[]}`)
	}))
	defer srv.Close()
	c, err := parseHandoffFlags([]string{"--gap-check", "3", "--summarizer-url", srv.URL, "--summarizer-model", "m", claudeLog})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := handoffOnce(context.Background(), c, session.NewOpenAIGapChecker(c.sumURL, "k", c.sumModel), &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	md := stdout.String()
	if calls < 3 || !strings.Contains(md, "## Gap check findings") || strings.Count(md, "pageSize stays 500") != 1 {
		t.Errorf("calls=%d; findings section:\n%s", calls, md[strings.Index(md, "## Last assistant"):])
	}
}

// TestHandoffWatch starts a real watch with a short idle time on a temp dir and waits for the
// resume to appear (the wait is a generous deadline, not a timing assertion).
func TestHandoffWatch(t *testing.T) {
	dir := t.TempDir()
	c, err := parseHandoffFlags([]string{"--watch", dir, "--idle", "50ms", "--poll", "10ms"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stderr syncBuffer
	go func() { done <- watchHandoff(ctx, c, nil, &stderr) }()

	data, err := os.ReadFile(claudeLog)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "-home-dev-reports", "7c2f0a9e.jsonl")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	resume := filepath.Join(dir, "-home-dev-reports", "7c2f0a9e.resume.md")
	deadline := time.Now().Add(30 * time.Second)
	var md []byte
	for time.Now().Before(deadline) {
		if md, err = os.ReadFile(resume); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch returned %v after cancel", err)
	}
	if md == nil {
		t.Fatalf("no resume written; stderr:\n%s", stderr.String())
	}
	if !strings.HasPrefix(string(md), session.ResumeHeader) || !strings.Contains(string(md), "streaming CSV export") {
		t.Error("resume content unexpected")
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
