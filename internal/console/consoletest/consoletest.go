// Package consoletest is a browser-like client of the operator console for tests: a cookie jar,
// form posts, redirects not followed (a test checks the 303 and its Location itself), and the
// CSRF token read from a page's form. The console's own handler tests and the proxy's tests of
// the console on a real ops listener share it.
package consoletest

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// Client talks to a console served at Base.
type Client struct {
	T    testing.TB
	Base string // scheme and host, e.g. an httptest.Server's URL
	HC   *http.Client
}

// New returns a client of the console at base with an empty cookie jar.
func New(t testing.TB, base string) *Client {
	jar, _ := cookiejar.New(nil)
	return &Client{T: t, Base: base, HC: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Do sends one request (form, when not nil, as an urlencoded body) and returns its status,
// headers and body; a transport error fails the test.
func (c *Client) Do(method, path string, form url.Values) (int, http.Header, string) {
	c.T.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.Base+path, body)
	if err != nil {
		c.T.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.HC.Do(req)
	if err != nil {
		c.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// Login posts token to the login form and returns the status (303 when it was taken).
func (c *Client) Login(token string) int {
	c.T.Helper()
	code, _, _ := c.Do("POST", "/console/login", url.Values{"token": {token}})
	return code
}

// CSRFRe finds the CSRF token in a page's forms.
var CSRFRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// CSRF reads the CSRF token from page's form; a page without one fails the test.
func (c *Client) CSRF(page string) string {
	c.T.Helper()
	_, _, body := c.Do("GET", page, nil)
	m := CSRFRe.FindStringSubmatch(body)
	if m == nil {
		c.T.Fatalf("no CSRF token on %s:\n%.500s", page, body)
	}
	return m[1]
}
