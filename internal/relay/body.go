package relay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/sse"
)

// IsEventStream reports whether a response's Content-Type is an event stream (sse.IsStream).
func IsEventStream(h http.Header) bool { return sse.IsStream(h.Get("Content-Type")) }

// ReadJSON reads, and closes, a JSON body compactd is to rewrite. why says, for the client, what
// is wrong with it, worded to follow "the upstream's response " ("" when it is whole, valid
// JSON within jsonx's depth bound and at most MaxJSON bytes); err is set only when the client
// went away (resp.Request's context ended) while it was read.
func ReadJSON(resp *http.Response) (body []byte, why string, err error) {
	body, err = io.ReadAll(io.LimitReader(resp.Body, MaxJSON+1))
	resp.Body.Close()
	switch {
	case err != nil && resp.Request.Context().Err() != nil:
		return nil, "", err
	case err != nil:
		return nil, "was cut off before its end", nil
	case int64(len(body)) > MaxJSON:
		return nil, fmt.Sprintf("is larger than the %d MiB compactd reads to rewrite a response", MaxJSON>>20), nil
	}
	if verr := jsonx.Valid(body); verr != nil {
		if errors.Is(verr, jsonx.ErrTooDeep) {
			return nil, "nests JSON more than " + strconv.Itoa(jsonx.MaxDepth) + " levels deep", nil
		}
		return nil, "is not valid JSON (truncated or corrupt)", nil
	}
	return body, "", nil
}

// ReplaceBody makes body resp's whole body: its Content-Length is set to match and any
// Content-Encoding removed (body is what the client gets, as it is). The old body is not closed.
func ReplaceBody(resp *http.Response, body []byte) {
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	resp.Header.Del("Content-Encoding")
}
