package eval

import (
	"regexp"
	"strings"
)

// question templates, one per fact kind: the subject is the backticked part.
var questionRes = []struct {
	re    *regexp.Regexp
	value func(subject string) *regexp.Regexp
}{
	{regexp.MustCompile("^What does the function `([^`]+)` return\\?"), func(s string) *regexp.Regexp {
		return regexp.MustCompile(`func ` + regexp.QuoteMeta(s) + `\([^)]*\) (\([^)\n]*\)|[^\s{` + "`" + `]+)`)
	}},
	{regexp.MustCompile("^Where is the function `([^`]+)` defined\\?"), func(s string) *regexp.Regexp {
		return regexp.MustCompile(`([\w./-]+\.go:\d+):\s*func ` + regexp.QuoteMeta(s) + `\(`)
	}},
	{regexp.MustCompile("^What is `([^`]+)` set to in "), func(s string) *regexp.Regexp {
		return regexp.MustCompile(`(?:^|[^\w])` + regexp.QuoteMeta(s) + `:[ \t]*([^\s` + "`" + `,]+)`)
	}},
	{regexp.MustCompile("^What exact error did `([^`]+)` fail with\\?"), func(s string) *regexp.Regexp {
		return regexp.MustCompile(regexp.QuoteMeta(s) + `: error: ([^\n` + "`" + `]+)`)
	}},
	{regexp.MustCompile("^Why was `([^`]+)` rejected\\?"), func(s string) *regexp.Regexp {
		return regexp.MustCompile(regexp.QuoteMeta(s) + `(?: and rejected it)?: ([^.\n` + "`" + `]+)`)
	}},
	{regexp.MustCompile("^What did the user say the batch limit for `([^`]+)` must be\\?"), func(s string) *regexp.Regexp {
		return regexp.MustCompile(`batch limit for ` + regexp.QuoteMeta(s) + ` must be ([^,.\s` + "`" + `]+)`)
	}},
}

// Answer is the fake model's reading of a context (fakeupstream.Answerer): for a question this
// package asks, the value stated in context for the question's subject (the newest statement
// wins, so a user's correction beats what it corrected), or "" and the subject to search for.
// It knows only the question and the context, never the planted facts, so a score built on it
// measures what compactd delivered upstream.
func Answer(question, context string) (answer, query string, ok bool) {
	question = strings.TrimSpace(question)
	for _, q := range questionRes {
		m := q.re.FindStringSubmatch(question)
		if m == nil {
			continue
		}
		// The question itself is in the context; it holds the subject but never the value, and
		// no value pattern matches it.
		all := q.value(m[1]).FindAllStringSubmatch(context, -1)
		if len(all) == 0 {
			return "", m[1], true
		}
		return strings.TrimSpace(all[len(all)-1][1]), m[1], true
	}
	return "", "", false
}

// Normalize strips what models wrap around an exact value: surrounding whitespace, quotes or
// backticks, one trailing period and an "Answer:" label.
func Normalize(s string) string {
	s = strings.TrimSpace(s)
	for _, p := range []string{"Answer:", "answer:", "A:"} {
		s = strings.TrimSpace(strings.TrimPrefix(s, p))
	}
	for {
		t := strings.TrimSpace(strings.TrimSuffix(s, "."))
		if len(t) >= 2 && (t[0] == '`' || t[0] == '"' || t[0] == '\'') && t[len(t)-1] == t[0] {
			t = t[1 : len(t)-1]
		}
		if t == s {
			return s
		}
		s = t
	}
}

// Correct reports whether an answer is the planted value: exact match after Normalize.
func Correct(answer, want string) bool { return Normalize(answer) == Normalize(want) }
