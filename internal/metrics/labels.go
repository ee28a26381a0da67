package metrics

import (
	"strconv"
	"sync"

	dialectname "github.com/compactd/compactd/internal/dialect"
)

// Label keeps a client-supplied value only if it looks like an enum word (lower-case letters,
// digits and underscores, at most 32 bytes), so clients cannot blow up label cardinality: ""
// stays "", anything else is "other".
func Label(s string) string {
	if s == "" {
		return ""
	}
	if len(s) > 32 {
		return "other"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return "other"
		}
	}
	return s
}

// metricAPINames is the api label's values: one per dialect, its name (dialectname.All), as in
// the logs. Every api label is a dialect's String().
func metricAPINames() []string {
	out := make([]string, len(dialectname.All))
	for i, n := range dialectname.All {
		out[i] = string(n)
	}
	return out
}

// methodLabel clamps the HTTP method: pass-through routes accept any method a client invents.
func methodLabel(m string) string {
	switch m {
	case "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS":
		return m
	}
	return "other"
}

// statusClass is "2xx" for 200 … 299 and so on, without formatting a string per call.
func statusClass(code int) string {
	switch code / 100 {
	case 1:
		return "1xx"
	case 2:
		return "2xx"
	case 3:
		return "3xx"
	case 4:
		return "4xx"
	case 5:
		return "5xx"
	}
	return strconv.Itoa(code/100) + "xx"
}

func codeLabel(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code)
}

// maxModelLabels caps how many distinct model names become gen_ai_request_model values beyond
// the configured ones; later names are "other".
const maxModelLabels = 32

// modelLabels keeps gen_ai_request_model bounded: configured models always keep their name, the
// first max other names seen keep theirs, everything after that (and anything that does not
// look like a model name) is "other".
type modelLabels struct {
	mu   sync.RWMutex
	seen map[string]bool
	max  int
}

func newModelLabels(configured []string, max int) *modelLabels {
	ml := &modelLabels{seen: map[string]bool{}, max: max}
	for _, m := range configured {
		if ModelNameOK(m) {
			ml.seen[m] = true
		}
	}
	ml.max += len(ml.seen)
	return ml
}

func (ml *modelLabels) label(model string) string {
	if model == "" {
		return "unknown"
	}
	if !ModelNameOK(model) {
		return "other"
	}
	ml.mu.RLock()
	ok, n := ml.seen[model], len(ml.seen)
	ml.mu.RUnlock()
	if ok {
		return model
	}
	if n >= ml.max {
		return "other"
	}
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if len(ml.seen) >= ml.max {
		return "other"
	}
	ml.seen[model] = true
	return model
}

// ModelNameOK reports whether s looks like a model name, the only ones that become
// gen_ai_request_model values: it accepts what model names look like (gpt-5.1-codex, claude-sonnet-4-5@20250929,
// models/gemini-2.5-pro, org/model:tag) and at most 64 bytes.
func ModelNameOK(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':' || c == '/' || c == '@') {
			return false
		}
	}
	return true
}
