package proxy

import (
	"strings"
	"testing"
)

// The fast path of canonicalPath (plainPath) must agree with the full resolution, and odd input
// must neither panic nor escape the root.
func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{
		"/", "", "/v1/responses", "/v1/Responses", "/v1//messages", "/v1/messages/", "/a/../../b",
		"/v1/%72esponses", "/v1/%2572", "/%zz/%4", `/v1\x`, "/v1/a;b/c", "/a%00b/c", "/x. /y",
		"/v1/mesſages", "/v1/K", "/v1/compactd/conversations/a%2Fb/search", "/v1/messages/%62atches", "/v1/messages/batches/msgbatch_01ABC", "//", "/.", "/..",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, fold := range []bool{false, true} {
			got := canonicalPath(raw, fold)
			full := "/" + strings.Join(canonicalSegments(raw, fold), "/")
			if got != full {
				t.Fatalf("canonicalPath(%q, %v) = %q, full resolution %q", raw, fold, got, full)
			}
			if !strings.HasPrefix(got, "/") || strings.Contains(got, "//") || (len(got) > 1 && strings.HasSuffix(got, "/")) {
				t.Fatalf("canonicalPath(%q, %v) = %q is not a clean absolute path", raw, fold, got)
			}
		}
		// Every spelling compactd accepts for one of its exact routes is that route itself, and
		// below /v1/messages/ only the plain spelling passes.
		ok, route := spelledExactly(raw, canonicalPath(raw, true))
		if ok && route != "" && raw != route && (!strings.HasPrefix(route, "/v1/compactd/") || !strings.HasPrefix(raw, "/v1/compactd/")) {
			t.Fatalf("%q accepted as %s", raw, route)
		}
	})
}
