package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/compactd/compactd/internal/fault"
)

// Request limits that must answer in the dialect of the route. net/http answers an oversized
// header block itself, in plain text, before any handler runs; so serve gives the http.Server
// twice this limit and this check answers everything between in the API's own envelope.

// headerBytes is the size of a request's header block as sent (near enough: names, values,
// separators and the request line).
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// checkHeaders answers 431 when the header block exceeds Config.MaxHeaderBytes.
func (s *Server) checkHeaders(w http.ResponseWriter, r *http.Request, d dialect) bool {
	if s.cfg.MaxHeaderBytes <= 0 || headerBytes(r) <= s.cfg.MaxHeaderBytes {
		return true
	}
	writeFault(w, d, &fault.Fault{Kind: fault.HeadersTooLarge, Code: fault.CodeHeadersTooLarge,
		Message: fmt.Sprintf("The request headers exceed compactd's limit of %d bytes; raise --max-header-bytes (COMPACTD_MAX_HEADER_BYTES) if this is expected.", s.cfg.MaxHeaderBytes)})
	return false
}

// Request bodies. Every body, on every route, is bounded in size (Config.MaxBodyBytes) and in
// the time it may take to arrive (Config.BodyReadTimeout).

// DefaultBodyReadTimeout is generous enough for a 32 MiB body (the default size limit) at about
// 110 KB/s, a poor mobile link, while bounding how long a client that drips its body (a
// slowloris) holds a request, a goroutine and its buffers. One flat deadline rather than a
// minimum-rate rule: one number an operator can reason about, and it does not penalise links
// that stall for a while and then catch up.
const DefaultBodyReadTimeout = 5 * time.Minute

// bodyTooLarge is the 413 past the body size limit.
func bodyTooLarge(limit int64) *fault.Fault {
	return &fault.Fault{Kind: fault.TooLarge, Code: fault.CodeRequestTooLarge, Close: true,
		Message: fmt.Sprintf("The request body exceeds compactd's limit of %d bytes; raise --max-body-bytes (COMPACTD_MAX_BODY_BYTES) if this is expected.", limit)}
}

// bodyTimeout is the 408 past the body read deadline.
func bodyTimeout(d time.Duration) *fault.Fault {
	return &fault.Fault{Kind: fault.BodyTimeout, Code: fault.CodeBodyTimeout, Close: true,
		Message: fmt.Sprintf("compactd did not receive the whole request body within %s of its headers; send it faster, or raise --body-read-timeout (COMPACTD_BODY_READ_TIMEOUT).", d)}
}

// checkDeclaredLength refuses a body whose declared Content-Length exceeds the limit, before
// anything reads it: net/http answers Expect: 100-continue with 100 Continue on the first Read,
// and a refusal must come instead of that invitation to upload, not after it.
func (s *Server) checkDeclaredLength(w http.ResponseWriter, r *http.Request, d dialect) bool {
	if r.ContentLength <= s.cfg.MaxBodyBytes {
		return true
	}
	writeFault(w, d, bodyTooLarge(s.cfg.MaxBodyBytes))
	return false
}

// guardBody bounds the body of r (a chunked one is cut at the size limit) and arms its read
// deadline. g.finish must be called when the handler returns (g is nil, and finish a no-op, for
// a bodiless request). The guard lives in the request's reqState when there is one, so it costs
// no allocation of its own.
func (s *Server) guardBody(w http.ResponseWriter, r *http.Request) (_ *http.Request, g *bodyGuard) {
	if r.Body == nil || r.Body == http.NoBody {
		return r, nil
	}
	if st := stateFrom(r.Context()); st != nil {
		g = &st.guardBuf
		st.guard = g
	} else {
		g = &bodyGuard{}
	}
	g.rc, g.left = r.Body, r.ContentLength
	if s.cfg.BodyReadTimeout > 0 {
		g.ctl = *http.NewResponseController(w)
		g.deadline = time.Now().Add(s.cfg.BodyReadTimeout)
		// HTTP/1 and HTTP/2 both support it; where not, the body simply has no deadline.
		g.armed = g.ctl.SetReadDeadline(g.deadline) == nil
	}
	r.Body = http.MaxBytesReader(w, g, s.cfg.MaxBodyBytes)
	return r, g
}

// boundedBody is r's body under the size limit: as the gate left it, which guarded it already
// (guardBody), or else under a limit of its own.
func (s *Server) boundedBody(w http.ResponseWriter, r *http.Request) io.Reader {
	if st := stateFrom(r.Context()); st != nil && st.guard != nil {
		return r.Body
	}
	return http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
}

// errBodyReadTimeout is what reading a body returns once its read deadline has passed.
var errBodyReadTimeout = errors.New("compactd: the request body did not arrive within the body read timeout")

// bodyGuard is a request body under a read deadline. The deadline is on the connection (via
// http.ResponseController), so it is lifted the moment the body has been read: a response
// streamed for an hour after a body read in a second is never cut by it.
type bodyGuard struct {
	rc io.ReadCloser

	mu       sync.Mutex
	ctl      http.ResponseController // a value: NewResponseController's result, copied in
	deadline time.Time
	armed    bool  // the deadline is set and still ours to lift
	left     int64 // declared bytes not yet read (-1: chunked)
	timedOut bool
}

func (g *bodyGuard) Read(p []byte) (int, error) {
	n, err := g.rc.Read(p)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil && isTimeout(err) {
		g.timedOut, g.armed = true, false
		return n, errBodyReadTimeout
	}
	if g.left > 0 {
		g.left -= int64(n)
	}
	if g.armed && (err != nil || g.left == 0) {
		// The whole body is in (or the client is gone): lift the deadline before anything waits
		// on the response.
		g.armed = false
		_ = g.ctl.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (g *bodyGuard) Close() error { return g.rc.Close() }

// finish runs when the handler returns: the ResponseController may not be used after that (a
// reverse-proxy transport can still be reading the body), and net/http sets the connection's
// deadlines afresh for the next request.
func (g *bodyGuard) finish() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.armed = false
	g.mu.Unlock()
}

// expired reports whether the body's read deadline fired before the body was read. Also true
// when the deadline has passed with the body unfinished but no Read has returned yet: the
// failed read cancels the request context first, so a reverse proxy can report the
// cancellation before the guard sees the timeout.
func (g *bodyGuard) expired() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.timedOut || g.armed && !g.deadline.IsZero() && !time.Now().Before(g.deadline)
}

func isTimeout(err error) bool {
	if err == io.EOF {
		return false // the end of every body: no errors.As (whose target escapes) for it
	}
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// bodyTimedOut reports whether the request's body read deadline fired before its body was in.
func bodyTimedOut(ctx context.Context) bool {
	st := stateFrom(ctx)
	return st != nil && st.guard != nil && st.guard.expired()
}

const expiredMessage = "The compaction item is older than this compactd accepts (--item-max-age); start a new conversation, or compact it again before it expires."
