package proxy_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

// openAIShim stands in front of compactd and, while acting, makes compactd look like OpenAI to
// Codex: every encrypted_content compactd returns goes out as an OpenAI-looking token ("gAAAA"
// + base64url of compactd's string, so nothing has to be remembered), and every such token
// Codex sends comes back translated. Once act is turned off, Codex talks to compactd as it is:
// a provider switch, with Codex's history still holding "OpenAI's" compaction items. It records
// what Codex sent and what it got back.
type openAIShim struct {
	act bool

	mu        sync.Mutex
	issued    int // compaction items that went out as foreign ones
	requests  [][]byte
	responses []shimResponse
}

type shimResponse struct {
	status int
	header http.Header
	body   []byte
}

const shimTokenPrefix = "gAAAAB"

var (
	compactdEC = regexp.MustCompile(`"encrypted_content":"(cmp_[^"]*)"`)
	shimEC     = regexp.MustCompile(`"encrypted_content":"` + shimTokenPrefix + `([A-Za-z0-9_-]*)"`)
)

func (s *openAIShim) start(t *testing.T, target string) string {
	t.Helper()
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.act {
			body = compactdEC.ReplaceAllFunc(body, func(m []byte) []byte {
				s.issued++
				ec := compactdEC.FindSubmatch(m)[1]
				return []byte(`"encrypted_content":"` + shimTokenPrefix + base64.RawURLEncoding.EncodeToString(ec) + `"`)
			})
		}
		s.responses = append(s.responses, shimResponse{resp.StatusCode, resp.Header.Clone(), body})
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.requests = append(s.requests, bytes.Clone(body))
		if s.act {
			body = shimEC.ReplaceAllFunc(body, func(m []byte) []byte {
				ec, err := base64.RawURLEncoding.DecodeString(string(shimEC.FindSubmatch(m)[1]))
				if err != nil {
					return m
				}
				return []byte(`"encrypted_content":"` + string(ec) + `"`)
			})
		}
		s.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

func (s *openAIShim) switchProvider() {
	s.mu.Lock()
	s.act = false
	s.mu.Unlock()
}

func (s *openAIShim) counts() (issued, requests int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issued, len(s.requests)
}

// tryCodex runs Codex and returns its output and error (runCodex fails the test instead).
func tryCodex(bin, work string, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = work, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestCodexCLIForeignCompactionItem: the real Codex compacts remotely with "OpenAI" (compactd
// behind the shim), then the session is switched to compactd itself. Codex's history now holds
// a compaction item compactd did not issue. By default compactd drops it and the session goes
// on; with --foreign-items reject the turn is refused with a 400 naming the flag, and nothing
// reaches the upstream.
func TestCodexCLIForeignCompactionItem(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real Codex CLI")
	}
	bin := codexBinary(t)
	for _, tc := range []struct {
		name   string
		policy proxy.ForeignItems
	}{
		{"default drops", ""},
		{"reject refuses", proxy.ForeignReject},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, fakeupstream.Options{}, func(c *proxy.Config) { c.ForeignItems = tc.policy })
			shim := &openAIShim{act: true}
			_, work, env := codexEnv(t, shim.start(t, h.proxyURL))
			resume := []string{"exec", "--skip-git-repo-check", "resume", "--last"}

			// With "OpenAI": turns until it has issued a compaction item.
			runCodex(t, bin, work, env, "exec", "--skip-git-repo-check", "hello first turn")
			for i := 0; i < 3; i++ {
				if issued, _ := shim.counts(); issued > 0 {
					break
				}
				runCodex(t, bin, work, env, append(resume, "turn with OpenAI "+strconv.Itoa(i))...)
			}
			issued, before := shim.counts()
			if issued == 0 {
				t.Fatal("Codex never compacted with the OpenAI stand-in")
			}
			upstreamBefore := len(h.upstream(dialect.Responses))

			// The switch: the same session, now straight to compactd.
			shim.switchProvider()
			out, err := tryCodex(bin, work, env, append(resume, "first turn after the switch")...)

			shim.mu.Lock()
			replayed := shim.requests[before:]
			answers := shim.responses[before:]
			shim.mu.Unlock()
			if len(replayed) == 0 {
				t.Fatalf("Codex sent nothing after the switch: %v\n%s", err, out)
			}
			// What Codex really replays: its first request after the switch holds the item as
			// "OpenAI" returned it.
			var foreign gjson.Result
			for _, it := range gjson.GetBytes(replayed[0], "input").Array() {
				if strings.HasPrefix(it.Get("encrypted_content").Str, shimTokenPrefix) {
					foreign = it
				}
			}
			if !foreign.Exists() {
				t.Fatalf("Codex's first request after the switch replays no foreign compaction item:\n%.2000s", replayed[0])
			}
			var kinds []string
			for _, it := range gjson.GetBytes(replayed[0], "input").Array() {
				kinds = append(kinds, it.Get("type").Str+"/"+it.Get("role").Str)
			}
			t.Logf("Codex replays: item type=%s keys=%v id=%q; input %v", foreign.Get("type").Str, keys(foreign), foreign.Get("id").Str, kinds)

			if tc.policy == proxy.ForeignReject {
				if answers[0].status != http.StatusBadRequest || gjson.GetBytes(answers[0].body, "error.code").Str != "foreign_compaction_item" ||
					!strings.Contains(gjson.GetBytes(answers[0].body, "error.message").Str, "--foreign-items drop") {
					t.Errorf("first answer after the switch: %d %s, want 400 foreign_compaction_item naming the flag", answers[0].status, answers[0].body)
				}
				if n := len(h.upstream(dialect.Responses)); n != upstreamBefore {
					t.Errorf("a refused turn reached the upstream (%d requests, %d before)", n, upstreamBefore)
				}
				t.Logf("Codex after the 400: err=%v, %d requests\n%.600s", err, len(replayed), out)
				return
			}
			if err != nil {
				t.Fatalf("the session did not continue after the switch: %v\n%s", err, out)
			}
			if answers[0].status != http.StatusOK || !strings.Contains(answers[0].header.Get("X-Compactd-Warning"), "foreign compaction item") {
				t.Errorf("first answer after the switch: %d, X-Compactd-Warning %q", answers[0].status, answers[0].header.Get("X-Compactd-Warning"))
			}
			after := h.upstream(dialect.Responses)[upstreamBefore:]
			if len(after) == 0 {
				t.Fatal("no turn after the switch reached the upstream")
			}
			for i, r := range after {
				if bytes.Contains(r.Body, []byte(shimTokenPrefix)) || bytes.Contains(r.Body, []byte(`"type":"compaction"`)) {
					t.Errorf("upstream request %d after the switch carries a compaction item", i)
				}
			}
			if !bytes.Contains(after[len(after)-1].Body, []byte("first turn after the switch")) {
				t.Error("the turn after the switch did not reach the upstream")
			}
			// And the session keeps going.
			runCodex(t, bin, work, env, append(resume, "second turn after the switch")...)
		})
	}
}

func keys(v gjson.Result) []string {
	var out []string
	v.ForEach(func(k, _ gjson.Result) bool {
		out = append(out, k.Str)
		return true
	})
	return out
}
