package proxy_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/console/consoletest"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/proxy"
)

const consoleToken = "console-admin-token"

// consoleClient is a console client on an ops listener, logged in with consoleToken.
type consoleClient struct{ *consoletest.Client }

func newConsoleClient(t *testing.T, base string) *consoleClient {
	return &consoleClient{consoletest.New(t, base)}
}

func (c *consoleClient) login() {
	c.T.Helper()
	if code := c.Login(consoleToken); code != http.StatusSeeOther {
		c.T.Fatalf("console login: %d", code)
	}
}

// waitFor polls the page until it contains every one of want (the event log is written in the
// background), and returns it.
func (c *consoleClient) waitFor(path string, want ...string) string {
	c.T.Helper()
	var body string
	for range 200 {
		_, _, body = c.Do("GET", path, nil)
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(body, w)
		}
		if ok {
			return body
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.T.Fatalf("%s never showed all of %q:\n%s", path, want, body)
	return ""
}

// waitForMatch polls path until its body matches re, and fails the test with the last body if
// it never does.
func (c *consoleClient) waitForMatch(path string, re *regexp.Regexp) string {
	c.T.Helper()
	var body string
	for range 200 {
		if _, _, body = c.Do("GET", path, nil); re.MatchString(body) {
			return body
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.T.Fatalf("%s never matched %s:\n%s", path, re, body)
	return ""
}

// consoleHarness is compactd with an archive, an admin token and the console, the console's
// ops handler served beside the API.
func consoleHarness(t *testing.T, content bool, more func(*proxy.Config)) (*harness, *consoleClient, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	h := newHarness(t, fakeupstream.Options{}, withArchive(t, func(c *proxy.Config) {
		c.AdminToken, c.Console = consoleToken, &proxy.ConsoleConfig{Content: content}
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		if more != nil {
			more(c)
		}
	}))
	ops := httptest.NewServer(h.srv.OpsHandler())
	t.Cleanup(ops.Close)
	return h, newConsoleClient(t, ops.URL), logs
}

// A real compaction and a real recall round through compactd reach the console's timeline:
// the compaction's figures always, its handoff text and the recall query only with content on,
// and each view of content in the log.
func TestConsoleShowsRealCompactionsAndRecalls(t *testing.T) {
	for _, content := range []bool{false, true} {
		t.Run(fmt.Sprintf("content=%v", content), func(t *testing.T) {
			h, c, logs := consoleHarness(t, content, nil)
			next := compactThenAsk(t, h)
			if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel}, option.WithJSONSet("input", next)); err != nil {
				t.Fatal(err)
			}
			c.login()
			// The archive records the conversation before its kind, API and compaction count: wait
			// for the whole row, not its first appearance.
			c.waitForMatch("/console/conversations", regexp.MustCompile(`(?s)conv-recall</a>.*?<td>sdk</td><td>responses</td>\s*<td class="n">1</td>`))
			tl := c.waitFor("/console/conversation?id=conv-recall", "Recall search", "Compaction</strong>")
			for _, want := range []string{"threshold (client&#39;s context_management)", "/v1/responses", "seg_", "cmp_"} {
				if !strings.Contains(tl, want) {
					t.Errorf("the timeline lacks %q", want)
				}
			}
			hasQuery := strings.Contains(tl, "ZETA-PLANT port")
			hasSummary := strings.Contains(tl, `class="handoff-summary"`)
			hasReplaced := strings.Contains(tl, "ZETA-PLANT config") // the planted fact, in the replaced items and the excerpts
			viewed := strings.Contains(logs.String(), "console content viewed")
			if hasQuery != content || hasSummary != content || hasReplaced != content || viewed != content {
				t.Errorf("content=%v: query shown %v, summary shown %v, replaced items shown %v, view logged %v",
					content, hasQuery, hasSummary, hasReplaced, viewed)
			}
			if content && strings.Contains(logs.String(), "ZETA-PLANT") {
				t.Error("the log holds conversation content")
			}
		})
	}
}

// The console is on the ops handler only: the API handler forwards /console/ like any path it
// does not serve, and answers nothing of the console's.
func TestConsoleNotOnTheAPIListener(t *testing.T) {
	h, c, _ := consoleHarness(t, true, nil)
	for _, p := range []string{"/console/login", "/console/", "/console/conversations"} {
		resp, err := http.Get(h.proxyURL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "Operator console") || resp.Header.Get("Content-Security-Policy") != "" {
			t.Errorf("the API listener served the console at %s: %d %s", p, resp.StatusCode, b)
		}
	}
	if code, _, body := c.Do("GET", "/console/login", nil); code != 200 || !strings.Contains(body, "Operator console") {
		t.Errorf("the ops handler does not serve the console: %d", code)
	}
	// Without Config.Console the ops handler has no console either.
	plain := newHarness(t, fakeupstream.Options{}, withArchive(t, func(c *proxy.Config) { c.AdminToken = consoleToken }))
	ops := httptest.NewServer(plain.srv.OpsHandler())
	defer ops.Close()
	if code, _, _ := newConsoleClient(t, ops.URL).Do("GET", "/console/login", nil); code != http.StatusNotFound {
		t.Errorf("console off: /console/login answered %d, want 404", code)
	}
	// And it needs the admin token.
	sum, _ := summarizer.New(summarizer.Config{BaseURL: plain.upURL + "/v1", API: "responses"})
	_, err := proxy.New(proxy.Config{Sealer: testRing(t, "k"), Summarizer: sum, Console: &proxy.ConsoleConfig{}})
	if err == nil || !strings.Contains(err.Error(), "AdminToken") {
		t.Errorf("a console without an admin token: %v", err)
	}
}

// The console's login and the admin API share one budget of failed attempts per address.
func TestConsoleLoginSharesTheAdminThrottle(t *testing.T) {
	h, c, _ := consoleHarness(t, false, nil)
	for range proxy.AdminFailureBurst {
		if code, _, _ := c.Do("POST", "/console/login", url.Values{"token": {"guess"}}); code != http.StatusUnauthorized {
			t.Fatalf("a wrong token: %d, want 401", code)
		}
	}
	if code, h, _ := c.Do("POST", "/console/login", url.Values{"token": {consoleToken}}); code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Errorf("the console after its failed attempts: %d, want 429 with Retry-After", code)
	}
	if code, _, _ := adminDo(t, h.proxyURL, "GET", "/v1/compactd/conversations/c/search?q=x", consoleToken); code != http.StatusTooManyRequests {
		t.Errorf("the admin API after the console's failed attempts: %d, want 429 (one throttle)", code)
	}
}

// Deleting from the console is the admin DELETE: the archive, the memo (the next transparent
// turn is not handed the deleted compaction) and the event log.
func TestConsoleDeleteIsTheAdminDelete(t *testing.T) {
	h, c, _ := consoleHarness(t, false, func(cfg *proxy.Config) {
		cfg.Policy = compact.Policy{Routes: map[dialect.Name]int{dialect.Responses: 8_000}}
		cfg.Speculative.Fraction = -1
	})
	input := toAny(history(4, 400))
	turn := func(i int) string {
		input = append(input, map[string]any{"type": "message", "role": "user", "content": fmt.Sprintf("turn %d: %s", i, strings.Repeat("go on with the parser ", 120))})
		var hr *http.Response
		if _, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
			option.WithJSONSet("input", input), option.WithHeader("X-Compactd-Session", "conv-del"), option.WithResponseInto(&hr)); err != nil {
			t.Fatal(err)
		}
		return hr.Header.Get("X-Compactd-Compaction")
	}
	compacted := -1
	for i := 0; i < 12 && compacted < 0; i++ {
		if strings.HasPrefix(turn(i), "compacted;") {
			compacted = i
		}
	}
	if compacted < 0 {
		t.Fatal("no turn compacted")
	}
	if st := turn(compacted + 1); !strings.HasPrefix(st, "applied;") {
		t.Fatalf("the turn after the compaction: %q, want the memo applied", st)
	}
	c.login()
	c.waitFor("/console/conversation?id=conv-del", "Memo applied", "policy (transparent")
	_, _, form := c.Do("GET", "/console/delete?id=conv-del", nil)
	m := consoletest.CSRFRe.FindStringSubmatch(form)
	if m == nil {
		t.Fatalf("no confirmation form:\n%s", form)
	}
	if code, _, _ := c.Do("POST", "/console/delete", url.Values{"csrf": {m[1]}, "tenant": {"default"}, "id": {"conv-del"}, "confirm": {"delete"}}); code != http.StatusSeeOther {
		t.Fatalf("delete: %d", code)
	}
	if st := turn(compacted + 2); strings.HasPrefix(st, "applied;") {
		t.Errorf("after the delete the memo still applied the deleted compaction: %q", st)
	}
	if _, _, tl := c.Do("GET", "/console/conversation?id=conv-del", nil); strings.Contains(tl, "Memo applied") {
		t.Errorf("the deleted conversation's events are still shown:\n%s", tl)
	}
}

// A compaction that fails is on the timeline too, with what the failure policy made of it.
func TestConsoleShowsFailedCompactions(t *testing.T) {
	h, c, _ := consoleHarness(t, true, func(cfg *proxy.Config) {
		sum, err := summarizer.New(summarizer.Config{BaseURL: "http://127.0.0.1:9/v1", API: "responses"}) // nothing listens there
		if err != nil {
			t.Fatal(err)
		}
		cfg.Summarizer = sum
	})
	_, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel},
		option.WithJSONSet("input", recallHistory()), threshold(2000), option.WithHeader("X-Compactd-Session", "conv-fail"))
	if err == nil {
		t.Fatal("the turn succeeded without a summariser")
	}
	c.login()
	tl := c.waitFor("/console/conversation?id=conv-fail", "Compaction failed")
	if !strings.Contains(tl, "<dt>Failure policy</dt><dd>fail</dd>") || !strings.Contains(tl, `class="errtext"`) {
		t.Errorf("the failed compaction lacks its outcome or error:\n%s", tl)
	}
	if _, _, list := c.Do("GET", "/console/conversations", nil); !strings.Contains(list, `<span class="bad">1</span>`) {
		t.Errorf("the list does not count the failure:\n%s", list)
	}
}
