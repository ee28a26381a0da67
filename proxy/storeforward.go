package proxy

import (
	"net/http"
	"net/http/httputil"
	"net/url"
)

// StoreAndForward is a reference for benchmarks, not a proxy to deploy: compactd's own body
// read and upstream write with nothing in between. The body is read whole the way a turn reads
// it (one buffer from the body pool, the connection's receive low-water mark raised while it
// arrives: readAllSized), and forwarded the way a pass-through turn forwards it (a ReverseProxy
// on compactd's transport and upstream client, the body in one write: withBody, bulkconn.go);
// no parse, no MAC, no skim cache, no metrics, no logging.
//
// `compactd bench side-by-side --store-forward` measures it beside the bare proxy and compactd:
// the bare proxy streams a body through a 32 KB buffer, and whatever separates compactd from it
// is either the price of holding a body whole before it goes upstream, which this reference
// pays too, or compactd's own work on it, which this reference does not do.
func StoreAndForward(upstream *url.URL, maxBody int64) http.Handler {
	var pool bodyPool
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(upstream); pr.Out.URL.RawQuery = pr.In.URL.RawQuery },
		Transport: UpstreamTransport(DefaultTransport()),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var lw *lowat
		if r.ContentLength > 2*lowatMin && r.ContentLength <= maxBody {
			lw = newLowat(r)
		}
		body, err := readAllSized(http.MaxBytesReader(w, r.Body, maxBody), r.ContentLength, maxBody, &pool, nil, lw)
		if err != nil {
			http.Error(w, "store-and-forward: reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		out := withBody(r, r.Context(), body)
		rp.ServeHTTP(w, out)
		if out.Body.(*replayBody).done() {
			pool.put(body) // the transport is done with it, as in a pass-through turn
		}
	})
}
