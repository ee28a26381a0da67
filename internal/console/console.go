// Package console is compactd's operator console: a small web UI, served by compactd itself on
// the ops listener under /console/, that shows what each conversation was handed after its
// compactions, and why. It lists a tenant's conversations (filtered by client kind, API and
// time), shows a conversation's timeline — every compaction with its trigger, sizes, model,
// latency and failure-policy outcome, the handoff text beside what it replaced with the facts
// the ledger found and whether the summary kept them, memo applications, recall searches with
// their queries and excerpts — searches the archive, deletes a conversation, and shows a live
// view of the summariser and the proxy's load.
//
// Everything is rendered on the server with html/template (every client-supplied string —
// conversation ids, summaries, excerpts — is hostile text and is escaped), the stylesheet and
// the few lines of JavaScript are embedded in the binary and served from it, and the
// Content-Security-Policy allows nothing else: the page works with no network.
//
// Access: a login form exchanges the admin token (compared as a digest, failed attempts
// throttled per address: the admin API's check, Backend.CheckToken) for a session cookie
// (HttpOnly, SameSite=Strict, Secure over TLS) that expires; sessions live in memory. Every
// state change (delete, logout) carries the session's CSRF token. Content (handoff texts,
// replaced items, recall queries and excerpts, search excerpts) is shown only with
// Options.Content, and every view of it is written to the log at info level with the tenant,
// the conversation, what was viewed and a hash of the session id, never the content.
package console

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/compactd/compactd/internal/archive"
)

// Backend is what the console reads and does. compactd's proxy implements it over the same
// store APIs as its admin API.
type Backend interface {
	// CheckToken checks an admin token presented from r's address: ok, or, when the address
	// has spent its failed attempts, retry > 0 (the token was not compared).
	CheckToken(r *http.Request, token string) (ok bool, retry time.Duration)
	DefaultTenant() string
	Tenants(ctx context.Context) []string
	Archive() archive.Store    // nil: the archive is off
	Events() *archive.EventLog // nil: no event log
	// Delete deletes a conversation as the admin API's DELETE does (archive segments, memo,
	// speculation, event log) and returns how many segments went.
	Delete(ctx context.Context, tenant, conversation string) (int, error)
	ExcerptBytes() int
	Live() Live
}

// Live is what the live view shows.
type Live struct {
	Time                                  time.Time
	Compacting                            int
	Breaker                               string // closed, open, half_open; "" without one
	SummariserInFlight, SummariserWaiting int
	Latency                               []LatencySample
	BodyBytes, BodyLimit                  int64
	MemoHits, MemoMisses                  int64
	SpeculativeHits, SpeculativeMisses    int64
	EventsDropped                         int64
	History                               []Point
}

// LatencySample is one summarisation.
type LatencySample struct {
	At     time.Time
	Took   time.Duration
	Failed bool
}

// Point is the gauges of an earlier moment.
type Point struct {
	At         time.Time
	Compacting int
	BodyBytes  int64
}

// Options configures the console.
type Options struct {
	// Content shows content (--console-content); without it only counts, sizes and times.
	Content bool
	// SessionTTL is how long a login lasts (default DefaultSessionTTL).
	SessionTTL time.Duration
	// Logger receives the audit log (content views, logins, deletes).
	Logger *slog.Logger
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

// DefaultSessionTTL is how long a console login lasts by default.
const DefaultSessionTTL = 8 * time.Hour

// Prefix is where the console is served.
const Prefix = "/console/"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

type console struct {
	b        Backend
	o        Options
	log      *slog.Logger
	sessions *sessions
	tmpl     *template.Template
	mux      *http.ServeMux

	tenantsMu   sync.Mutex
	tenantsList []string
	tenantsAt   time.Time
}

// New returns the console's handler, to be mounted at Prefix.
func New(b Backend, o Options) http.Handler {
	if o.SessionTTL <= 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	c := &console{b: b, o: o, log: o.Logger, sessions: newSessions(o.SessionTTL, o.Now)}
	c.tmpl = template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html"))
	static, _ := fs.Sub(staticFS, "static")
	m := http.NewServeMux()
	m.Handle("GET /console/static/", http.StripPrefix("/console/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /console/login", c.loginForm)
	m.HandleFunc("POST /console/login", c.login)
	m.HandleFunc("POST /console/logout", c.authed(c.logout))
	m.HandleFunc("GET /console/{$}", c.authed(func(w http.ResponseWriter, r *http.Request, s *session) {
		http.Redirect(w, r, "/console/conversations", http.StatusSeeOther)
	}))
	m.HandleFunc("GET /console/conversations", c.authed(c.conversations))
	m.HandleFunc("GET /console/conversation", c.authed(c.conversation))
	m.HandleFunc("GET /console/search", c.authed(c.search))
	m.HandleFunc("GET /console/delete", c.authed(c.deleteForm))
	m.HandleFunc("POST /console/delete", c.authed(c.deleteConversation))
	m.HandleFunc("GET /console/live", c.authed(c.live))
	m.HandleFunc("GET /console/live.json", c.authed(c.liveJSON))
	c.mux = m
	return c
}

// csp allows the console's own stylesheet, script and data: images, and nothing else: no
// inline script or style, no other origin, no framing, forms posting only back here.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func (c *console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	c.mux.ServeHTTP(w, r)
}

// sessionHash names a session in the log without revealing its id.
func sessionHash(id string) string {
	sum := sha256.Sum256([]byte("compactd console session\x00" + id))
	return hex.EncodeToString(sum[:8])
}

// audit writes one content view to the log: who (the session's hash), which tenant and
// conversation, and what was viewed — never the content itself.
func (c *console) audit(r *http.Request, s *session, tenant, conversation, what string, extra ...any) {
	attrs := append([]any{"tenant", tenant, "conversation", conversation, "viewed", what,
		"session", sessionHash(s.id), "remote", r.RemoteAddr}, extra...)
	c.log.InfoContext(r.Context(), "console content viewed", attrs...)
}
