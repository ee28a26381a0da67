package proxy

import (
	"net/http"
	"slices"
	"strings"

	"github.com/compactd/compactd/internal/fault"
)

// Request framing and methods, checked first in the gate (server.go), before anything looks at
// the path's routes or credentials.

// proxiedMethods are the methods compactd serves and forwards: what the LLM APIs and their SDKs
// use (GET, POST and DELETE; HEAD and OPTIONS for probes and browsers' preflights; PUT and PATCH
// for the gateways and provider APIs that update resources with them).
var proxiedMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

const allowHeader = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"

// checkMethod refuses a method compactd does not proxy, in the dialect of the path, so it is
// never forwarded: CONNECT (a tunnel to a host of the client's choosing) and TRACE (which echoes
// the request, credentials included) get a 405 with Allow; anything else — PRI (the HTTP/2
// preface sent to an HTTP/1 listener), WebDAV and made-up methods, other letter case — a 501,
// the answer for a method a server does not implement (RFC 9110 §15.6.2).
func checkMethod(w http.ResponseWriter, r *http.Request, d dialect) bool {
	if slices.Contains(proxiedMethods, r.Method) {
		return true
	}
	f := &fault.Fault{Kind: fault.NotImplemented, Code: fault.CodeMethodNotImplemented, Close: r.ContentLength != 0,
		Message: "compactd does not proxy the " + quoteMethod(r.Method) + " method; it serves " + allowHeader + "."}
	if r.Method == http.MethodConnect || r.Method == http.MethodTrace {
		f.Kind, f.Code = fault.MethodNotAllowed, fault.CodeMethodNotAllowed
		w.Header().Set("Allow", allowHeader)
	}
	writeFault(w, d, f)
	return false
}

// quoteMethod is a method for a message: at most 32 bytes of it (net/http has checked it is a
// token, so it holds no control bytes).
func quoteMethod(m string) string {
	if len(m) > 32 {
		m = m[:32] + "…"
	}
	return strings.ToValidUTF8(m, "")
}

// closeAfterChunked makes the connection close after the response to a chunked HTTP/1 request.
//
// A request with both Content-Length and Transfer-Encoding: chunked is the classic smuggling
// request (RFC 9112 §6.1, §11.2): a front proxy that reads the Content-Length sends one request,
// compactd, which reads the chunked framing (as net/http does and the RFC says it must), sees its
// body end early and the rest of the bytes as another request, which it would answer and forward
// on the same connection. The RFC's remedy is to close the connection after responding. net/http
// deletes the Content-Length header of such a request before any handler sees it, so compactd
// cannot tell it from a chunked request without one: it closes after every chunked HTTP/1
// request. Nothing after the body is read as a request. The cost is one new connection after each
// chunked upload (SDKs send JSON with a Content-Length; HTTP/2 has no chunked framing and is not
// affected).
func closeAfterChunked(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 && slices.Contains(r.TransferEncoding, "chunked") {
		w.Header().Set("Connection", "close")
	}
}
