package eval

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// tap is a recording reverse proxy between an in-process compactd and the model's upstream (the
// built-in fake or the --upstream URL): while armed it keeps the bodies of the requests compactd
// sends the model, which is what the model was given on a question turn (the grep column,
// grep.go). Disarmed it only forwards. The summariser does not go through it: its calls carry
// the replaced transcript, which the answering model is never given.
type tap struct {
	rp        *httputil.ReverseProxy
	transport *http.Transport
	srv       *http.Server
	served    chan struct{}
	base      string

	limit int // maxTapBytes; tests lower it

	mu     sync.Mutex
	armed  bool
	bodies [][]byte
	size   int
}

// maxTapBytes bounds what one question turn may record; past it the turn's later requests are
// forwarded unrecorded, and that turn's grep reads what was kept.
const maxTapBytes = 64 << 20

// startTap serves a tap in front of upstream on a loopback port.
func startTap(upstream string) (*tap, error) {
	target, err := url.Parse(upstream)
	if err != nil || target.Scheme == "" || target.Host == "" {
		return nil, errors.New("upstream " + upstream + " is not an absolute URL")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t := &tap{transport: tr, served: make(chan struct{}), limit: maxTapBytes}
	t.rp = &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) }, // the target's Host; no X-Forwarded-* added
		Transport:     tr,
		FlushInterval: -1, // a stream goes through as it comes
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t.srv = &http.Server{Handler: t, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(t.served)
		_ = t.srv.Serve(ln)
	}()
	t.base = "http://" + ln.Addr().String()
	return t, nil
}

func (t *tap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t.mu.Lock()
	room := t.limit - t.size
	armed := t.armed && room > 0
	t.mu.Unlock()
	if armed && r.Method == http.MethodPost {
		body, err := io.ReadAll(io.LimitReader(r.Body, int64(room)+1))
		if err != nil {
			http.Error(w, "compactd eval: reading the request: "+err.Error(), http.StatusBadGateway)
			return
		}
		if len(body) > room { // too large to keep: forwarded whole, unrecorded
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		} else {
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			t.mu.Lock()
			if t.armed && t.size+len(body) <= t.limit {
				t.bodies = append(t.bodies, body)
				t.size += len(body)
			}
			t.mu.Unlock()
		}
	}
	// Full duplex: an HTTP/1 server otherwise drains and closes a request body it is still
	// streaming upstream once a streamed answer's headers go out, which cuts the answer
	// (golang/go#40747).
	_ = http.NewResponseController(w).EnableFullDuplex()
	t.rp.ServeHTTP(w, r)
}

// arm starts recording (and forgets what an earlier arming kept).
func (t *tap) arm() {
	t.mu.Lock()
	t.armed, t.bodies, t.size = true, nil, 0
	t.mu.Unlock()
}

// disarm stops recording and returns the bodies recorded since arm, in arrival order.
func (t *tap) disarm() [][]byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.bodies
	t.armed, t.bodies, t.size = false, nil, 0
	return out
}

// close stops the tap: its listener, its connections, and its idle connections upstream.
func (t *tap) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if t.srv.Shutdown(ctx) != nil {
		_ = t.srv.Close()
	}
	<-t.served
	t.transport.CloseIdleConnections()
}
