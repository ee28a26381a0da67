package pathcanon

import (
	"strings"
	"testing"
)

// compactd's routes (proxy's ownRoutes).
var routes = Routes{
	Exact: []string{
		"/v1/responses", "/v1/responses/compact", "/v1/messages", "/v1/messages/count_tokens",
		"/v1/chat/completions", "/v1/compactd", "/healthz", "/readyz", "/metrics",
	},
	Prefixes: []Prefix{{Path: "/v1/messages/"}, {Path: "/v1/compactd/", Escaped: true}},
}

// The fast path of Canonical (plainPath) must agree with the full resolution, and odd input
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
			got := Canonical(raw, fold)
			full := "/" + strings.Join(canonicalSegments(raw, fold), "/")
			if got != full {
				t.Fatalf("Canonical(%q, %v) = %q, full resolution %q", raw, fold, got, full)
			}
			if !strings.HasPrefix(got, "/") || strings.Contains(got, "//") || (len(got) > 1 && strings.HasSuffix(got, "/")) {
				t.Fatalf("Canonical(%q, %v) = %q is not a clean absolute path", raw, fold, got)
			}
		}
		// Every spelling compactd accepts for one of its exact routes is that route itself, and
		// below /v1/messages/ only the plain spelling passes.
		ok, route := routes.SpelledExactly(raw, Canonical(raw, true))
		if ok && route != "" && raw != route && (!strings.HasPrefix(route, "/v1/compactd/") || !strings.HasPrefix(raw, "/v1/compactd/")) {
			t.Fatalf("%q accepted as %s", raw, route)
		}
	})
}

func TestCanonical(t *testing.T) {
	for _, tc := range []struct {
		raw        string
		fold, want string // Canonical(raw, true), Canonical(raw, false)
	}{
		{"/v1/responses", "/v1/responses", "/v1/responses"},
		{"/v1/Responses", "/v1/responses", "/v1/Responses"},
		{"/v1//responses/", "/v1/responses", "/v1/responses"},
		{"/v1/./x/../responses", "/v1/responses", "/v1/responses"},
		{"/../../v1/responses", "/v1/responses", "/v1/responses"},
		{"/v1/%72esponses", "/v1/responses", "/v1/responses"},
		{"/v1/%2572esponses", "/v1/responses", "/v1/responses"},
		{`/v1\responses`, "/v1/responses", "/v1/responses"},
		{"/v1/responses;x=1", "/v1/responses", "/v1/responses"},
		{"/v1/responses%00.json", "/v1/responses", "/v1/responses"},
		{"/v1/responses. ", "/v1/responses", "/v1/responses"},
		{"/v1/mesſages", "/v1/messages", "/v1/mesſages"},
		{"/v1/%zz/%4", "/v1/%zz/%4", "/v1/%zz/%4"},
		{"", "/", "/"},
	} {
		if got := Canonical(tc.raw, true); got != tc.fold {
			t.Errorf("Canonical(%q, true) = %q, want %q", tc.raw, got, tc.fold)
		}
		if got := Canonical(tc.raw, false); got != tc.want {
			t.Errorf("Canonical(%q, false) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

func TestSpelledExactly(t *testing.T) {
	for _, tc := range []struct {
		raw   string
		ok    bool
		route string
	}{
		{"/v1/responses", true, "/v1/responses"},
		{"/v1/Responses", false, "/v1/responses"},
		{"/v1/responses/", false, "/v1/responses"},
		{"/v1/%72esponses", false, "/v1/responses"},
		{"/v1/messages/batches/msgbatch_01ABC", true, "/v1/messages/batches/msgbatch_01ABC"},
		{"/v1/messages//batches", false, "/v1/messages/batches"},
		{"/v1/messages/%62atches", false, "/v1/messages/batches"},
		{"/v1/Messages/batches/ID", false, "/v1/messages/batches/ID"},
		{"/v1/compactd/conversations/a%2Fb/search", true, "/v1/compactd/conversations/a/b/search"},
		{"/v1//compactd/conversations/x/search", false, "/v1/compactd/conversations/x/search"},
		{"/v1/files", true, ""},
		{"/v1//files/", true, ""},
	} {
		ok, route := routes.SpelledExactly(tc.raw, Canonical(tc.raw, true))
		if ok != tc.ok || route != tc.route {
			t.Errorf("SpelledExactly(%q) = %v, %q; want %v, %q", tc.raw, ok, route, tc.ok, tc.route)
		}
	}
}
