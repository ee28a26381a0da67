package bench

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/compactd/compactd/proxy"
)

// ServeBareProxy serves the side-by-side run's floor on listen until SIGINT or SIGTERM: a bare
// httputil.ReverseProxy to upstream as anyone would write it (stdlib defaults: no flush
// interval, no buffer pool), on compactd's DefaultTransport so that both proxies keep the same
// pool of upstream connections (http.DefaultTransport's two idle connections per host would
// make the floor churn connections at 32 clients, flattering compactd). It logs its address as
// "bare proxy listening addr=…".
func ServeBareProxy(listen, upstream string) error {
	u, err := url.Parse(upstream)
	if err != nil {
		return err
	}
	return serveReference(listen, "bare proxy", &http.Server{Handler: bareProxy(u), ReadHeaderTimeout: 10 * time.Second})
}

// ServeStoreForwardProxy serves the side-by-side run's optional store-and-forward reference
// (proxy.StoreAndForward: compactd's body read and upstream write, nothing else) on listen until
// SIGINT or SIGTERM. It logs its address as "store-and-forward proxy listening addr=…".
func ServeStoreForwardProxy(listen, upstream string) error {
	u, err := url.Parse(upstream)
	if err != nil {
		return err
	}
	return serveReference(listen, "store-and-forward proxy", &http.Server{Handler: proxy.StoreAndForward(u, 64<<20),
		ReadHeaderTimeout: 10 * time.Second, ConnContext: proxy.ConnContext})
}

// serveReference serves srv on listen until SIGINT or SIGTERM, logging "<name> listening addr=…".
func serveReference(listen, name string, srv *http.Server) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	slog.New(slog.NewTextHandler(os.Stderr, nil)).Info(name+" listening", "addr", ln.Addr().String())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// bareProxy is the floor's handler: httputil.ReverseProxy to u, in full duplex.
func bareProxy(u *url.URL) http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.Out.URL.RawQuery = pr.In.URL.RawQuery },
		Transport: proxy.DefaultTransport(),
	}
	// Full duplex: by default an HTTP/1 server drains and closes the request body when the
	// handler writes the response headers, and the transport, still streaming the body upstream,
	// reads it once more after Content-Length (to check it ends there), fails on the closed body
	// and tears down the upstream connection in the middle of the response it is relaying
	// (golang/go#40747). An SSE response, whose headers ReverseProxy flushes at once, lost that
	// race on a few percent of 128 KB requests: the floor cut streams ("unexpected EOF") and its
	// figures left those requests out. compactd reads the body whole before it forwards it, so
	// it never races.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	})
}
