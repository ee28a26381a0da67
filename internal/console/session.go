package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Sessions are server-side, in memory: the cookie holds a random 256-bit id and nothing else,
// so a restart logs everyone out and nothing in the cookie can be forged or replayed past its
// expiry. Each session has its own CSRF token, which every state-changing form carries.

// CookieName is the session cookie.
const CookieName = "compactd_console"

// maxSessions bounds the sessions held; past it the one that expires soonest goes.
const maxSessions = 256

type session struct {
	id, csrf string
	expires  time.Time
}

type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	ttl time.Duration
	now func() time.Time
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{m: map[string]*session{}, ttl: ttl, now: now}
}

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (ss *sessions) create() *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.now()
	for id, s := range ss.m {
		if !now.Before(s.expires) {
			delete(ss.m, id)
		}
	}
	for len(ss.m) >= maxSessions {
		var first *session
		for _, s := range ss.m {
			if first == nil || s.expires.Before(first.expires) {
				first = s
			}
		}
		delete(ss.m, first.id)
	}
	s := &session{id: randomToken(), csrf: randomToken(), expires: now.Add(ss.ttl)}
	ss.m[s.id] = s
	return s
}

// get returns the live session of id; an expired one is deleted.
func (ss *sessions) get(id string) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[id]
	if s == nil {
		return nil
	}
	if !ss.now().Before(s.expires) {
		delete(ss.m, id)
		return nil
	}
	return s
}

func (ss *sessions) remove(id string) {
	ss.mu.Lock()
	delete(ss.m, id)
	ss.mu.Unlock()
}

// authed admits requests with a live session, and for every method but GET a matching CSRF
// token (and, when the browser sends one, an Origin of this host). A request without one is
// sent to the login form (GET) or refused (403).
func (c *console) authed(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var s *session
		if ck, err := r.Cookie(CookieName); err == nil {
			s = c.sessions.get(ck.Value)
		}
		if s == nil {
			if r.Method == http.MethodGet && r.URL.Path != "/console/live.json" {
				next := r.URL.RequestURI()
				http.Redirect(w, r, "/console/login?next="+url.QueryEscape(next), http.StatusSeeOther)
				return
			}
			c.errorPage(w, r, nil, http.StatusUnauthorized, "Your console session has expired or you are not logged in.")
			return
		}
		if r.Method != http.MethodGet {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if o := r.Header.Get("Origin"); o != "" && o != origin(r) {
				c.errorPage(w, r, s, http.StatusForbidden, "This request came from another origin.")
				return
			}
			if got := r.PostFormValue("csrf"); subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) != 1 {
				c.errorPage(w, r, s, http.StatusForbidden, "The form's security token is missing or stale: reload the page and try again.")
				return
			}
		}
		h(w, r, s)
	}
}

func origin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func (c *console) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int, expires time.Time) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: value, Path: Prefix, MaxAge: maxAge, Expires: expires,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// safeNext keeps a post-login destination only when it is a path of the console.
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || len(next) > 2048 ||
		len(u.Path) < len(Prefix) || u.Path[:len(Prefix)] != Prefix || u.Path == "/console/login" {
		return "/console/conversations"
	}
	return u.RequestURI()
}

func (c *console) loginForm(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "login", page{Title: "Log in", Next: safeNext(r.URL.Query().Get("next"))})
}

// login exchanges the admin token for a session. The token goes through the admin API's check:
// the same digest compare and the same failed-attempt throttle per address.
func (c *console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	token, next := r.PostFormValue("token"), safeNext(r.PostFormValue("next"))
	ok, retry := c.b.CheckToken(r, token)
	if retry > 0 {
		secs := max(1, int(math.Ceil(retry.Seconds())))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		c.render(w, r, http.StatusTooManyRequests, "login", page{Title: "Log in", Next: next,
			Error: "Too many failed attempts from this address; try again in " + strconv.Itoa(secs) + " s."})
		return
	}
	if !ok {
		c.log.Warn("console login failed", "remote", r.RemoteAddr)
		c.render(w, r, http.StatusUnauthorized, "login", page{Title: "Log in", Next: next, Error: "That is not the admin token."})
		return
	}
	s := c.sessions.create()
	c.setCookie(w, r, s.id, int(c.o.SessionTTL.Seconds()), s.expires)
	c.log.Info("console login", "session", sessionHash(s.id), "remote", r.RemoteAddr, "expires", s.expires)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *console) logout(w http.ResponseWriter, r *http.Request, s *session) {
	c.sessions.remove(s.id)
	c.setCookie(w, r, "", -1, time.Unix(0, 0))
	c.log.Info("console logout", "session", sessionHash(s.id))
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}

// CSRF is the session's form token (templates put it in every state-changing form).
func (s *session) CSRF() string { return s.csrf }
