package proxy

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"testing"
)

// TestRewrittenTurnsDropAcceptEncoding: a turn whose answer compactd rewrites must let the
// transport negotiate compression itself (and undo it), or an upstream that gzips its answer
// hands the rewriter compressed bytes; an answer passed on as it came keeps the client's header.
func TestRewrittenTurnsDropAcceptEncoding(t *testing.T) {
	target, _ := url.Parse("http://127.0.0.1:9")
	for _, tc := range []struct {
		name      string
		compacted bool
		want      string
	}{
		{"rewritten", true, ""},
		{"passed on", false, "gzip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, _ := http.NewRequest(http.MethodPost, "http://compactd/v1/responses", nil)
			in.Header.Set("Accept-Encoding", "gzip")
			out := in.Clone(withFlight(in.Context(), responsesFlight(t, tc.compacted)))
			rewriteTo(target, false)(&httputil.ProxyRequest{In: in, Out: out})
			if got := out.Header.Get("Accept-Encoding"); got != tc.want {
				t.Errorf("Accept-Encoding = %q, want %q", got, tc.want)
			}
		})
	}
}
