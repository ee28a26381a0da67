package console

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/console/consoletest"
	"github.com/compactd/compactd/internal/dialect"
)

const testToken = "console-admin-token"

// testSealer seals with a fixed XOR: the console tests care about what is shown, not about
// the cipher (the archive's own tests cover the keyring sealer).
type testSealer struct{}

func (testSealer) SealArchive(p []byte, id, tenant string) (string, error) {
	return tenant + "|" + id + "|" + string(p), nil
}

func (testSealer) OpenArchive(blob, id, tenant string) ([]byte, error) {
	rest, ok := strings.CutPrefix(blob, tenant+"|"+id+"|")
	if !ok {
		return nil, archive.ErrIntegrity
	}
	return []byte(rest), nil
}

func (testSealer) IndexKey() []byte { return bytes.Repeat([]byte{7}, 32) }

// fakeBackend is a Backend over a real SQLite archive and event log.
type fakeBackend struct {
	st      archive.Store
	ev      *archive.EventLog
	mu      sync.Mutex
	fails   int // failed CheckToken calls
	deleted []string
}

func (b *fakeBackend) CheckToken(r *http.Request, token string) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fails >= 3 {
		return false, 5 * time.Second
	}
	if token != testToken {
		b.fails++
		return false, 0
	}
	return true, 0
}
func (b *fakeBackend) DefaultTenant() string                { return "default" }
func (b *fakeBackend) Tenants(ctx context.Context) []string { t, _ := b.ev.Tenants(ctx); return t }
func (b *fakeBackend) Archive() archive.Store               { return b.st }
func (b *fakeBackend) Events() *archive.EventLog            { return b.ev }
func (b *fakeBackend) ExcerptBytes() int                    { return 400 }
func (b *fakeBackend) Live() Live                           { return Live{Time: time.Now(), Breaker: "closed"} }
func (b *fakeBackend) Delete(ctx context.Context, tenant, conv string) (int, error) {
	b.mu.Lock()
	b.deleted = append(b.deleted, tenant+"/"+conv)
	b.mu.Unlock()
	return b.st.DeleteConversation(ctx, tenant, conv)
}

// hostile is a conversation id and text that would run script if it were not escaped.
const hostile = `<script>alert(1)</script>"'&`

func newFake(t *testing.T) *fakeBackend {
	t.Helper()
	ctx := context.Background()
	st, err := archive.Open(ctx, filepath.Join(t.TempDir(), "a.db"), testSealer{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ev, err := archive.NewEventLog(st, archive.EventOptions{})
	if err != nil {
		t.Fatal(err)
	}
	item := func(role, text string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"type": "message", "role": role, "content": text})
		return b
	}
	for _, c := range []struct{ tenant, conv string }{{"default", "conv-a"}, {"default", hostile}, {"acme", "conv-acme"}} {
		ref, err := st.Put(ctx, archive.Segment{Tenant: c.tenant, Conversation: c.conv, Owner: "owner1",
			Items: []json.RawMessage{item("user", "we decided: use port 7431 (SECRET_FACT_PORT=7431) for "+c.conv), item("assistant", "ok")}})
		if err != nil {
			t.Fatal(err)
		}
		if err := ev.Append(ctx, []archive.Event{
			{Tenant: c.tenant, Conversation: c.conv, Owner: "owner1", Kind: archive.EventCompaction, API: "responses", Route: "/v1/responses",
				Client: "codex", Trigger: "threshold", Outcome: "ok", Model: "m", Item: "cmp_1", Segment: ref.ID, Before: 9000, After: 900, Items: 2,
				Latency: time.Second, Content: &archive.EventContent{Summary: "SUMMARY-OF-" + c.conv + " " + hostile, Ledger: "## Facts ledger\n### Values\n- `SECRET_FACT_PORT=7431`"}},
			{Tenant: c.tenant, Conversation: c.conv, Owner: "owner1", Kind: archive.EventRecall, API: "responses", Client: "codex", Items: 1,
				Content: &archive.EventContent{Query: "QUERY-" + c.conv, Excerpts: []archive.EventExcerpt{{Segment: ref.ID, Text: "EXCERPT-" + c.conv}}}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	return &fakeBackend{st: st, ev: ev}
}

// client is a console client with the log the console under test writes to.
type client struct {
	*consoletest.Client
	log *bytes.Buffer
}

// newConsole serves the console over b at a test server and returns a client of it.
func newConsole(t *testing.T, b Backend, o Options) *client {
	t.Helper()
	var logBuf bytes.Buffer
	var mu sync.Mutex
	o.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logBuf}, nil))
	mux := http.NewServeMux()
	mux.Handle(Prefix, New(b, o))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return &client{Client: consoletest.New(t, ts.URL), log: &logBuf}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestConsoleAuth(t *testing.T) {
	b := newFake(t)
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c := newConsole(t, b, Options{SessionTTL: time.Hour, Now: clock})

	// No session: every page sends to the login form, the JSON endpoint and posts are 401.
	for _, p := range []string{"/console/", "/console/conversations", "/console/conversation?id=conv-a", "/console/live", "/console/search?q=port"} {
		code, h, _ := c.Do("GET", p, nil)
		if code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/console/login") {
			t.Errorf("GET %s without a session: %d Location %q, want 303 to the login form", p, code, h.Get("Location"))
		}
	}
	if code, _, _ := c.Do("GET", "/console/live.json", nil); code != http.StatusUnauthorized {
		t.Errorf("live.json without a session: %d, want 401", code)
	}
	if code, _, _ := c.Do("POST", "/console/delete", url.Values{"id": {"conv-a"}, "confirm": {"delete"}}); code != http.StatusUnauthorized {
		t.Errorf("delete without a session: %d, want 401", code)
	}
	// Every answer carries the strict headers.
	code, h, body := c.Do("GET", "/console/login", nil)
	if code != 200 || h.Get("Content-Security-Policy") != csp || h.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(body, `name="token"`) {
		t.Fatalf("login form: %d %v", code, h)
	}
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:", "form-action 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("the CSP lacks %q", want)
		}
	}

	// A wrong token: 401, no cookie.
	if code := c.Login("wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", code)
	}
	if code, _, _ := c.Do("GET", "/console/conversations", nil); code != http.StatusSeeOther {
		t.Errorf("after a wrong token the console is open: %d", code)
	}
	// The right token: a session cookie with the attributes.
	req, _ := http.NewRequest("POST", c.Base+"/console/login", strings.NewReader(url.Values{"token": {testToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.HC.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ck := resp.Header.Get("Set-Cookie")
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(ck, CookieName+"=") || !strings.Contains(ck, "HttpOnly") ||
		!strings.Contains(ck, "SameSite=Strict") || !strings.Contains(ck, "Max-Age=3600") || strings.Contains(ck, "Secure") {
		t.Fatalf("login: %d Set-Cookie %q; want HttpOnly, SameSite=Strict, Max-Age, no Secure over plain HTTP", resp.StatusCode, ck)
	}
	if code, _, body := c.Do("GET", "/console/conversations", nil); code != 200 || !strings.Contains(body, "conv-a") {
		t.Fatalf("after login: %d\n%.300s", code, body)
	}

	// CSRF: a delete without the token, or with another, is refused and deletes nothing.
	for _, tok := range []string{"", "not-the-token"} {
		code, _, _ := c.Do("POST", "/console/delete", url.Values{"csrf": {tok}, "id": {"conv-a"}, "confirm": {"delete"}})
		if code != http.StatusForbidden {
			t.Errorf("delete with csrf %q: %d, want 403", tok, code)
		}
	}
	if len(b.deleted) != 0 {
		t.Fatalf("a request without the CSRF token deleted %v", b.deleted)
	}
	// A logout without it is refused too.
	if code, _, _ := c.Do("POST", "/console/logout", url.Values{}); code != http.StatusForbidden {
		t.Errorf("logout without csrf: %d, want 403", code)
	}

	// The session expires: the cookie is still sent, the server no longer knows it.
	mu.Lock()
	now = now.Add(time.Hour + time.Second)
	mu.Unlock()
	if code, h, _ := c.Do("GET", "/console/conversations", nil); code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/console/login") {
		t.Errorf("expired session: %d %q, want 303 to the login form", code, h.Get("Location"))
	}

	// Logout ends the session server-side.
	if c.Login(testToken) != http.StatusSeeOther {
		t.Fatal("login failed")
	}
	tok := c.CSRF("/console/conversations")
	if code, _, _ := c.Do("POST", "/console/logout", url.Values{"csrf": {tok}}); code != http.StatusSeeOther {
		t.Fatalf("logout: %d", code)
	}
	if code, _, _ := c.Do("GET", "/console/conversations", nil); code != http.StatusSeeOther {
		t.Errorf("after logout the session still works: %d", code)
	}

	// Throttled: the backend says retry; the console answers 429 with Retry-After.
	for range 3 {
		c.Login("wrong")
	}
	req, _ = http.NewRequest("POST", c.Base+"/console/login", strings.NewReader(url.Values{"token": {testToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = c.HC.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "5" {
		t.Errorf("throttled login: %d Retry-After %q, want 429 and 5", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// An open redirect through ?next= is not possible: only console paths are followed.
func TestConsoleLoginNext(t *testing.T) {
	for next, want := range map[string]string{
		"/console/conversation?id=x": "/console/conversation?id=x",
		"https://evil.example/":      "/console/conversations",
		"//evil.example/console/":    "/console/conversations",
		"/metrics":                   "/console/conversations",
		"/console/login":             "/console/conversations",
	} {
		if got := safeNext(next); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}
}

func TestConsoleContentAndTenants(t *testing.T) {
	for _, content := range []bool{false, true} {
		t.Run(map[bool]string{false: "content off", true: "content on"}[content], func(t *testing.T) {
			b := newFake(t)
			c := newConsole(t, b, Options{Content: content})
			if c.Login(testToken) != http.StatusSeeOther {
				t.Fatal("login failed")
			}
			// The default tenant lists its conversations and not acme's, and acme's the other way.
			_, _, def := c.Do("GET", "/console/conversations", nil)
			_, _, acme := c.Do("GET", "/console/conversations?tenant=acme", nil)
			if !strings.Contains(def, ">conv-a<") || strings.Contains(def, "conv-acme") {
				t.Errorf("default tenant's list:\n%s", def)
			}
			if !strings.Contains(acme, ">conv-acme<") || strings.Contains(acme, ">conv-a<") {
				t.Errorf("acme's list:\n%s", acme)
			}
			// acme's conversation read as the default tenant's shows nothing of it.
			_, _, cross := c.Do("GET", "/console/conversation?id=conv-acme", nil)
			if strings.Contains(cross, "SUMMARY-OF-conv-acme") || strings.Contains(cross, "QUERY-conv-acme") || strings.Contains(cross, "Compaction</strong>") {
				t.Errorf("acme's events shown under the default tenant:\n%s", cross)
			}
			c.log.Reset()
			code, _, tl := c.Do("GET", "/console/conversation?tenant=acme&id=conv-acme", nil)
			if code != 200 || !strings.Contains(tl, "Compaction</strong>") || !strings.Contains(tl, "9,000 → 900") {
				t.Fatalf("acme's timeline: %d\n%s", code, tl)
			}
			shown := strings.Contains(tl, "SUMMARY-OF-conv-acme") && strings.Contains(tl, "QUERY-conv-acme") &&
				strings.Contains(tl, "EXCERPT-conv-acme") && strings.Contains(tl, "use port 7431")
			none := !strings.Contains(tl, "SUMMARY-OF") && !strings.Contains(tl, "QUERY-") && !strings.Contains(tl, "EXCERPT-") && !strings.Contains(tl, "use port 7431")
			audit := c.log.String()
			if content {
				if !shown {
					t.Errorf("content on: the timeline lacks the summary, query, excerpt or replaced items:\n%s", tl)
				}
				if !strings.Contains(tl, "kept by the summary") {
					t.Errorf("content on: no facts check")
				}
				if !strings.Contains(audit, "console content viewed") || !strings.Contains(audit, "tenant=acme") || !strings.Contains(audit, "conversation=conv-acme") ||
					!strings.Contains(audit, "viewed=timeline") || !strings.Contains(audit, "session=") || strings.Contains(audit, "SUMMARY-OF") {
					t.Errorf("content on: the audit log line is missing or holds content:\n%s", audit)
				}
			} else {
				if !none {
					t.Errorf("content off: the timeline shows content:\n%s", tl)
				}
				if strings.Contains(audit, "console content viewed") {
					t.Errorf("content off: a content view was logged:\n%s", audit)
				}
			}
			// Search: hits either way, excerpts only with content.
			c.log.Reset()
			_, _, sr := c.Do("GET", "/console/search?tenant=acme&q=SECRET_FACT_PORT", nil)
			if !strings.Contains(sr, "conv-acme") {
				t.Errorf("search found nothing:\n%s", sr)
			}
			if got := strings.Contains(sr, "use port 7431"); got != content {
				t.Errorf("search excerpt shown = %v, want %v", got, content)
			}
			if got := strings.Contains(c.log.String(), "viewed=search"); got != content {
				t.Errorf("search audit logged = %v, want %v", got, content)
			}
		})
	}
}

// Hostile text — a conversation id and a summary with markup — is escaped everywhere.
func TestConsoleEscapes(t *testing.T) {
	b := newFake(t)
	c := newConsole(t, b, Options{Content: true})
	c.Login(testToken)
	for _, p := range []string{"/console/conversations", "/console/conversation?id=" + url.QueryEscape(hostile),
		"/console/search?q=SECRET_FACT_PORT", "/console/delete?id=" + url.QueryEscape(hostile)} {
		code, _, body := c.Do("GET", p, nil)
		if code != 200 {
			t.Errorf("%s: %d", p, code)
		}
		if strings.Contains(body, "<script>alert") {
			t.Errorf("%s: unescaped markup from a client:\n%s", p, body)
		}
	}
}

func TestConsoleDelete(t *testing.T) {
	b := newFake(t)
	c := newConsole(t, b, Options{})
	c.Login(testToken)
	// The confirmation page names what goes, and deleting needs its confirm button too.
	_, _, confirm := c.Do("GET", "/console/delete?id=conv-a", nil)
	if !strings.Contains(confirm, "1 archived segment") || !strings.Contains(confirm, "2 event log rows") {
		t.Errorf("confirmation page:\n%s", confirm)
	}
	tok := consoletest.CSRFRe.FindStringSubmatch(confirm)[1]
	if code, _, _ := c.Do("POST", "/console/delete", url.Values{"csrf": {tok}, "id": {"conv-a"}}); code != http.StatusBadRequest || len(b.deleted) != 0 {
		t.Errorf("delete without the confirmation: %d, deleted %v", code, b.deleted)
	}
	code, h, _ := c.Do("POST", "/console/delete", url.Values{"csrf": {tok}, "id": {"conv-a"}, "tenant": {"default"}, "confirm": {"delete"}})
	if code != http.StatusSeeOther || !strings.Contains(h.Get("Location"), "deleted=conv-a") {
		t.Fatalf("delete: %d %q", code, h.Get("Location"))
	}
	if len(b.deleted) != 1 || b.deleted[0] != "default/conv-a" {
		t.Errorf("deleted %v, want default/conv-a", b.deleted)
	}
	if evs, _ := b.ev.List(context.Background(), "default", "conv-a", false); len(evs) != 0 {
		t.Errorf("%d events left after the delete", len(evs))
	}
	_, _, list := c.Do("GET", h.Get("Location"), nil)
	if strings.Contains(list, ">conv-a<") || !strings.Contains(list, "Deleted conversation") {
		t.Errorf("list after delete:\n%s", list)
	}
	// Other tenants' conversations of the same label are untouched.
	if evs, _ := b.ev.List(context.Background(), "acme", "conv-acme", false); len(evs) != 2 {
		t.Errorf("acme lost events: %d", len(evs))
	}
}

func TestConsoleLiveJSON(t *testing.T) {
	c := newConsole(t, newFake(t), Options{})
	c.Login(testToken)
	code, h, body := c.Do("GET", "/console/live.json", nil)
	var v struct{ HTML string }
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "application/json") || json.Unmarshal([]byte(body), &v) != nil ||
		!strings.Contains(v.HTML, "summariser breaker") || !strings.Contains(v.HTML, "<svg") {
		t.Errorf("live.json: %d %s", code, body)
	}
	// The static assets are served from the binary with their types.
	for p, typ := range map[string]string{"/console/static/console.css": "text/css", "/console/static/console.js": "text/javascript"} {
		code, h, _ := c.Do("GET", p, nil)
		if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), typ) {
			t.Errorf("%s: %d %q", p, code, h.Get("Content-Type"))
		}
	}
}

// The API filter offers the dialects' names (internal/dialect), and event rows written before
// the dialects had one name ("openai" for Responses, "anthropic" for Messages) read as theirs:
// listed, filtered and shown under responses and messages, not as a fourth and fifth API.
func TestConsoleAPINames(t *testing.T) {
	b := newFake(t)
	ctx := context.Background()
	if err := b.ev.Append(ctx, []archive.Event{
		{Tenant: "default", Conversation: "conv-old-responses", Owner: "owner1", Kind: archive.EventCompaction, API: "openai", Route: "/v1/responses", Client: "codex", Before: 10, After: 5},
		{Tenant: "default", Conversation: "conv-old-messages", Owner: "owner1", Kind: archive.EventCompaction, API: "anthropic", Route: "/v1/messages", Client: "claude_code", Before: 10, After: 5},
		{Tenant: "default", Conversation: "conv-chat", Owner: "owner1", Kind: archive.EventCompaction, API: "chat", Route: "/v1/chat/completions", Client: "chat_agent", Before: 10, After: 5},
	}); err != nil {
		t.Fatal(err)
	}
	c := newConsole(t, b, Options{})
	if c.Login(testToken) != http.StatusSeeOther {
		t.Fatal("login failed")
	}
	_, _, all := c.Do("GET", "/console/conversations", nil)
	for _, n := range dialect.All {
		if !strings.Contains(all, `<option value="`+string(n)+`"`) {
			t.Errorf("the API filter does not offer %q", n)
		}
	}
	for _, old := range []string{"openai", "anthropic"} {
		if strings.Contains(all, `value="`+old+`"`) || strings.Contains(all, "<td>"+old+"</td>") {
			t.Errorf("the list shows the old name %q", old)
		}
	}
	for _, tt := range []struct {
		api       dialect.Name
		want, not []string
	}{
		{dialect.Responses, []string{">conv-old-responses<", ">conv-a<"}, []string{"conv-old-messages", "conv-chat"}},
		{dialect.Messages, []string{">conv-old-messages<"}, []string{"conv-old-responses", ">conv-a<", "conv-chat"}},
		{dialect.Chat, []string{">conv-chat<"}, []string{"conv-old-responses", "conv-old-messages", ">conv-a<"}},
	} {
		_, _, list := c.Do("GET", "/console/conversations?api="+string(tt.api), nil)
		for _, w := range tt.want {
			if !strings.Contains(list, w) {
				t.Errorf("api=%s: the list lacks %s", tt.api, w)
			}
		}
		for _, n := range tt.not {
			if strings.Contains(list, n) {
				t.Errorf("api=%s: the list holds %s", tt.api, n)
			}
		}
	}
	_, _, tl := c.Do("GET", "/console/conversation?id=conv-old-messages", nil)
	if !strings.Contains(tl, "<dd>messages <code>/v1/messages</code>") || strings.Contains(tl, "anthropic <code>") {
		t.Errorf("an old Messages event's API is not shown as messages:\n%s", tl)
	}
}
