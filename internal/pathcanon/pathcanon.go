// Package pathcanon resolves a request path the way the most lenient server might, and tells an
// exact spelling of a server's own routes from every other spelling of them.
//
// A proxy that answers some paths itself and picks the upstream of others must not let an odd
// spelling of one of them — doubled or trailing slashes, dot segments, percent-escapes (also
// double ones), backslashes, ";parameters", a NUL, trailing dots or spaces, other letter case —
// slip past it: an upstream, or a proxy in front of it, might normalise it to the route and serve
// what the proxy never inspected. Canonical gives the path such a server would see; Routes says
// whether a path is spelled exactly. Both are linear in the length of the path and allocate
// nothing for a plain one.
package pathcanon

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Canonical is raw, an escaped path, resolved the way the most lenient server might:
// percent-escapes decoded up to three times over (double encoding), '\' read as '/', each
// segment cut at ';' (matrix parameters) or a NUL and stripped of trailing dots and spaces, empty
// and "." segments dropped, ".." resolved (never above the root); with fold, letters folded to
// ASCII lower case where they fold to an ASCII letter at all (ſ to s, K to k). The result is a
// clean absolute path: it begins with "/", has no empty segment and no trailing slash. Linear in
// the length of raw; raw itself when it is already canonical, as most requests are.
func Canonical(raw string, fold bool) string {
	if plainPath(raw, fold) {
		return raw
	}
	return "/" + strings.Join(canonicalSegments(raw, fold), "/")
}

// Routes are a server's own paths, the ones whose spelling SpelledExactly checks.
type Routes struct {
	// Exact are the paths that must be spelled exactly as given.
	Exact []string
	// Prefixes are namespaces: every path below one (in canonical form) must spell the prefix
	// exactly.
	Prefixes []Prefix
}

// Prefix is a namespace of Routes.
type Prefix struct {
	// Path begins and ends with "/", in canonical form: "/v1/messages/".
	Path string
	// Escaped says the server answers every path below Path itself and forwards none, so the
	// segments below it may be percent-escaped (ids that hold a '/'); without it the path is
	// forwarded and every segment must be plain as well.
	Escaped bool
}

// SpelledExactly reports whether raw, an escaped request path with canonical form canon
// (Canonical(raw, true)), is either none of rs or one of them spelled exactly; if not, route is
// the path it should have been (below a prefix, with the case of its segments kept). For a path
// that is none of rs, route is "".
func (rs *Routes) SpelledExactly(raw, canon string) (ok bool, route string) {
	for _, p := range rs.Exact {
		if canon == p {
			return raw == p, p
		}
	}
	for _, p := range rs.Prefixes {
		if !strings.HasPrefix(canon, p.Path) {
			continue
		}
		segs := canonicalSegments(raw, false)
		// The segments below the prefix's, with the case of ids kept.
		depth := strings.Count(p.Path, "/") - 1
		route = p.Path + strings.Join(segs[min(depth, len(segs)):], "/")
		if !strings.HasPrefix(raw, p.Path) {
			return false, route
		}
		// Below an answered prefix nothing is forwarded, so ids may be escaped; below a forwarded
		// one the path must be plain.
		return p.Escaped || "/"+strings.Join(segs, "/") == raw, route
	}
	return true, ""
}

// plainPath reports whether raw is already canonical: lower-case letters (any case without
// fold), digits, '-' and '_' between single slashes, no trailing slash. Most requests are.
func plainPath(raw string, fold bool) bool {
	if raw == "" || raw[0] != '/' || (len(raw) > 1 && raw[len(raw)-1] == '/') {
		return false
	}
	for i := 1; i < len(raw); i++ {
		switch c := raw[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		case c >= 'A' && c <= 'Z':
			if fold {
				return false
			}
		case c == '/':
			if raw[i-1] == '/' {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// canonicalSegments splits raw into the segments a lenient server would see: percent-escapes
// decoded up to three times over (double encoding), '\' read as '/', each segment cut at ';'
// (matrix parameters) or a NUL and stripped of trailing dots and spaces, empty and "." segments
// dropped, ".." resolved; with fold, letters folded to ASCII lower case where they fold to an
// ASCII letter at all (ſ to s, K to k).
func canonicalSegments(raw string, fold bool) []string {
	p := raw
	for range 3 {
		d := unescapeLenient(p)
		if d == p {
			break
		}
		p = d
	}
	segs := strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' })
	out := segs[:0]
	for _, seg := range segs {
		if i := strings.IndexAny(seg, ";\x00"); i >= 0 {
			seg = seg[:i]
		}
		seg = strings.TrimRight(seg, " \t")
		switch seg {
		case "", ".":
			continue
		case "..":
			out = out[:max(0, len(out)-1)]
			continue
		}
		if seg = strings.TrimRight(seg, ". \t"); seg == "" {
			continue
		}
		if fold {
			seg = strings.Map(foldRune, seg)
		}
		out = append(out, seg)
	}
	return out
}

// unescapeLenient decodes every valid %XX in s and leaves anything else as it is, as lenient
// servers do (url.PathUnescape gives up on the whole string at the first bad escape).
func unescapeLenient(s string) string {
	i := strings.IndexByte(s, '%')
	if i < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// foldRune folds r to an ASCII lower-case letter when any case mapping of it is one.
func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f < utf8.RuneSelf {
			return unicode.ToLower(f)
		}
	}
	if u := unicode.ToUpper(r); u < utf8.RuneSelf {
		return unicode.ToLower(u)
	}
	return r
}
