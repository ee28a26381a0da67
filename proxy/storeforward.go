package proxy

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/url"
)

// StoreAndForward is a reference for benchmarks, not a proxy to deploy: compactd's own body
// read and upstream write with nothing in between. The body is read whole the way a turn reads
// it (one buffer from the body pool, the connection's receive low-water mark raised while it
// arrives: readAllSized), and forwarded the way a pass-through turn forwards it (a ReverseProxy
// on compactd's transport and upstream client, the body in one write: withBody, and the body put
// back in place of the ReverseProxy's wrapper of it before the transport sees it, as
// instrumentedTransport does; bulkconn.go); no parse, no MAC, no skim cache, no metrics, no
// logging.
//
// `compactd bench side-by-side --store-forward` measures it beside the bare proxy and compactd:
// the bare proxy streams a body through a 32 KB buffer, and whatever separates compactd from it
// is either the price of holding a body whole before it goes upstream, which this reference
// pays too, or compactd's own work on it, which this reference does not do.
func StoreAndForward(upstream *url.URL, maxBody int64) http.Handler {
	var pool bodyPool
	rp := &httputil.ReverseProxy{
		Rewrite:   rewriteTo(upstream, false), // a pass-through turn's
		Transport: ownBody{UpstreamTransport(DefaultTransport())},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := readAllSized(http.MaxBytesReader(w, r.Body, maxBody), r.ContentLength, maxBody, &pool, nil, bodyLowat(r, maxBody))
		if err != nil {
			http.Error(w, "store-and-forward: reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		out := withBody(r, r.Context(), body)
		out = out.WithContext(context.WithValue(out.Context(), ownBodyKey{}, out.Body))
		rp.ServeHTTP(w, out)
		if out.Body.(*replayBody).done() {
			pool.put(body) // the transport is done with it, as in a pass-through turn
		}
	})
}

// ownBody is StoreAndForward's transport: the forward's own body in place of the ReverseProxy's
// wrapper of it (which hides the body from compactd's client and from bulkConn, so that net/http
// would copy it through a 32 KB buffer), as instrumentedTransport does for a turn.
type ownBody struct{ next http.RoundTripper }

type ownBodyKey struct{}

func (t ownBody) RoundTrip(req *http.Request) (*http.Response, error) {
	if b, ok := req.Context().Value(ownBodyKey{}).(*replayBody); ok && req.Body != nil && req.ContentLength == int64(len(b.body)) {
		r2 := *req
		r2.Body = b
		req = &r2
	}
	return t.next.RoundTrip(req)
}
