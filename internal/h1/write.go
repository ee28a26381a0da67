package h1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
)

// BodyWriter is a request body held in memory that writes itself: at most n bytes of what is
// left of it, to w, one Write per piece it holds (a piece larger than the write buffer goes to
// the connection in one system call, not through a 32 KiB copy buffer). The bytes it writes
// count as read.
type BodyWriter interface {
	WriteBodyTo(w io.Writer, n int64) (int64, error)
}

// writeResult is what writing a request came to.
type writeResult struct {
	written int64 // bytes the connection took
	err     error // the first error: the connection's, or the body's (then also bodyErr)
	bodyErr error // the request body's own read error (the client's failure, not the upstream's)
}

// writeBufferSize holds the head and a small body, sent in one system call.
const writeBufferSize = 32 << 10

var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufferSize) }}

// writeRequest writes req to nc as (*http.Request).Write would, minus what a client transport
// adds of its own (no Accept-Encoding: answers are passed on as the upstream sends them).
// cw is the connection's own counting writer (no allocation a request).
func writeRequest(cw *countWriter, req *http.Request, tg target, close bool) writeResult {
	cw.n = 0
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(cw)
	defer func() {
		bw.Reset(nil)
		writers.Put(bw)
	}()
	res := writeResult{}
	res.err, res.bodyErr = writeTo(bw, req, tg, close)
	if res.err == nil {
		res.err = bw.Flush()
	}
	res.written = cw.n
	if res.err == nil {
		closeBody(req)
	}
	return res
}

// writeTo writes the request line, the headers and the body to bw.
// close asks for "Connection: close" whatever req.Close says (the Transport's DisableKeepAlives).
func writeTo(bw *bufio.Writer, req *http.Request, tg target, close bool) (err, bodyErr error) {
	host, ruri := tg.host, tg.uri
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}

	body, length := req.Body, req.ContentLength
	if body == http.NoBody {
		body = nil
	}
	if body == nil {
		length = 0
	}
	if body != nil && length == 0 {
		// Zero with a body is "unknown" for a client request. As net/http: chunked, but for a
		// method that usually has no body, whose one byte is looked for first (a body direct
		// requests carry is in memory: the look never waits).
		length = -1
		if usuallyLacksBody(method) {
			var first [1]byte
			n, rerr := body.Read(first[:])
			switch {
			case n == 0 && rerr == io.EOF:
				body, length = nil, 0
			case n == 0 && rerr != nil:
				return rerr, rerr
			default:
				body = struct {
					io.Reader
					io.Closer
				}{io.MultiReader(bytes.NewReader([]byte{first[0]}), body), body}
			}
		}
	}

	bw.WriteString(method)
	bw.WriteByte(' ')
	bw.WriteString(ruri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	ua := "Go-http-client/1.1"
	if _, ok := req.Header["User-Agent"]; ok {
		ua = req.Header.Get("User-Agent")
	}
	if ua != "" {
		bw.WriteString("User-Agent: ")
		bw.WriteString(strings.ReplaceAll(strings.ReplaceAll(ua, "\r", " "), "\n", " "))
		bw.WriteString("\r\n")
	}
	if (req.Close || close) && !httpguts.HeaderValuesContainsToken(req.Header["Connection"], "close") {
		bw.WriteString("Connection: close\r\n")
	}
	switch {
	case length > 0:
		bw.WriteString("Content-Length: ")
		var num [20]byte
		bw.Write(strconv.AppendInt(num[:0], length, 10))
		bw.WriteString("\r\n")
	case length < 0:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
		if len(req.Trailer) > 0 {
			keys := make([]string, 0, len(req.Trailer))
			for k := range req.Trailer {
				keys = append(keys, http.CanonicalHeaderKey(k))
			}
			slices.Sort(keys)
			bw.WriteString("Trailer: ")
			bw.WriteString(strings.Join(keys, ","))
			bw.WriteString("\r\n")
		}
	case body == nil && (method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch):
		bw.WriteString("Content-Length: 0\r\n") // as net/http declares the empty body of these methods
	}
	if err := req.Header.WriteSubset(bw, excludedHeaders); err != nil {
		return err, nil
	}
	if _, err := bw.WriteString("\r\n"); err != nil {
		return err, nil
	}
	if body == nil {
		return nil, nil
	}

	if length > 0 {
		var n int64
		if b, ok := body.(BodyWriter); ok {
			n, err = b.WriteBodyTo(bw, length)
		} else {
			rec := &readRecorder{r: body}
			n, err = io.Copy(bw, io.LimitReader(rec, length))
			bodyErr = rec.err
		}
		if err == nil && n < length {
			err = fmt.Errorf("http: ContentLength=%d with Body length %d", length, n)
			bodyErr = err
		}
		if bodyErr != nil {
			err = bodyErr
		}
		return err, bodyErr
	}
	// Unknown length: chunked, then the trailer.
	rec := &readRecorder{r: body}
	chunked := httputil.NewChunkedWriter(bw)
	_, err = io.Copy(chunked, rec)
	if rec.err != nil {
		return rec.err, rec.err
	}
	if err == nil {
		err = chunked.Close()
	}
	if err == nil && len(req.Trailer) > 0 {
		err = req.Trailer.Write(bw)
	}
	if err == nil {
		_, err = bw.WriteString("\r\n")
	}
	return err, nil
}

// usuallyLacksBody is net/http's list of methods whose unknown-length body is looked into.
func usuallyLacksBody(method string) bool {
	switch method {
	case "GET", "HEAD", "DELETE", "OPTIONS", "PROPFIND", "SEARCH":
		return true
	}
	return false
}

// excludedHeaders are written by writeTo itself, as (*http.Request).Write excludes them.
var excludedHeaders = map[string]bool{
	"Host":              true,
	"User-Agent":        true,
	"Content-Length":    true,
	"Transfer-Encoding": true,
	"Trailer":           true,
}

// target is what the request line and the Host header say: worked out once, by validate.
type target struct{ host, uri string }

// validate makes net/http's Transport's checks of a request before anything is sent, and returns
// its target.
func validate(req *http.Request) (target, error) {
	if req.URL.Host == "" {
		return target{}, errors.New("http: no Host in request URL")
	}
	if req.Method != "" && !validMethod(req.Method) {
		return target{}, fmt.Errorf("net/http: invalid method %q", req.Method)
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return target{}, fmt.Errorf("net/http: invalid header field name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return target{}, fmt.Errorf("net/http: invalid header field value for %q", k) // the value may be a secret
			}
		}
	}
	host, err := hostHeader(req)
	if err != nil {
		return target{}, err
	}
	uri := req.URL.RequestURI()
	if strings.ContainsFunc(uri, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return target{}, errors.New("net/http: can't write control character in Request.URL")
	}
	for k := range req.Trailer {
		if !httpguts.ValidTrailerHeader(k) || !httpguts.ValidHeaderFieldName(k) {
			return target{}, fmt.Errorf("net/http: invalid trailer field name %q", k)
		}
	}
	return target{host: host, uri: uri}, nil
}

// validMethod reports whether m is a token (RFC 9110, section 9.1).
func validMethod(m string) bool {
	return len(m) > 0 && strings.IndexFunc(m, func(r rune) bool { return !httpguts.IsTokenRune(r) }) < 0
}

// hostHeader is the Host header of req: req.Host or the URL's, in punycode, without an IPv6
// zone. net/http sends an empty Host in place of an invalid one; this refuses the request.
func hostHeader(req *http.Request) (string, error) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	host, err := httpguts.PunycodeHostPort(host)
	if err != nil {
		return "", err
	}
	if !httpguts.ValidHostHeader(host) {
		return "", errors.New("http: invalid Host header")
	}
	return removeZone(host), nil
}

// removeZone drops an IPv6 zone from a Host header, as net/http does ("[fe80::1%en0]:80").
func removeZone(host string) string {
	if !strings.HasPrefix(host, "[") {
		return host
	}
	i := strings.LastIndex(host, "]")
	if i < 0 {
		return host
	}
	j := strings.LastIndex(host[:i], "%")
	if j < 0 {
		return host
	}
	return host[:j] + host[i:]
}

// countWriter counts what the connection took.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// readRecorder keeps a body's read error apart from the connection's write errors.
type readRecorder struct {
	r   io.Reader
	err error
}

func (r *readRecorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}
