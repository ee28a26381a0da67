package compact

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
)

// MinCompactThreshold is OpenAI's lower bound for context_management[].compact_threshold.
const MinCompactThreshold = 1000

// DefaultClientThreshold applies when a client asks for compaction without a threshold. OpenAI
// leaves its default undocumented; 200000 is the figure in its documentation's example.
const DefaultClientThreshold = 200_000

// Threshold is what the client asked for with `context_management`.
type Threshold struct {
	// Set reports that the client sent context_management (a compaction entry).
	Set bool
	// Tokens is the requested compact_threshold; 0 means the client left it to the default.
	Tokens int
}

// ParamError is a request validation error in OpenAI's terms: the offending parameter path (for
// the error envelope's "param") and a message the client's user can act on.
type ParamError struct {
	Param, Message string
}

func (e *ParamError) Error() string { return e.Message }

// ParseContextManagement validates the value of `context_management` (gjson Raw; empty or null
// when the field is absent) exactly as OpenAI does: a non-empty array of objects whose "type" is
// "compaction" and whose "compact_threshold" is absent, null, or an integer >= 1000 written
// without fraction or exponent (1000.0 and 1e3 are rejected). Unknown fields are allowed. When
// several entries carry thresholds the smallest wins: compacting early is the safe reading.
func ParseContextManagement(raw []byte) (Threshold, error) {
	v := gjson.ParseBytes(trimJSON(raw))
	if len(trimJSON(raw)) == 0 || v.Type == gjson.Null {
		return Threshold{}, nil
	}
	const param = "context_management"
	if !v.IsArray() {
		return Threshold{}, &ParamError{param, fmt.Sprintf(
			"Invalid type for '%s': expected an array of objects, but got %s instead.", param, jsonKind(v))}
	}
	entries := v.Array()
	if len(entries) == 0 {
		return Threshold{}, &ParamError{param, fmt.Sprintf(
			"Invalid '%s': empty array. Expected an array with minimum length 1, but got an empty array instead.", param)}
	}
	t := Threshold{Set: true}
	for i, e := range entries {
		p := fmt.Sprintf("%s[%d]", param, i)
		if !e.IsObject() {
			return Threshold{}, &ParamError{p, fmt.Sprintf(
				"Invalid type for '%s': expected an object, but got %s instead.", p, jsonKind(e))}
		}
		typ := e.Get("type")
		switch {
		case !typ.Exists():
			return Threshold{}, &ParamError{p + ".type", fmt.Sprintf("Missing required parameter: '%s.type'.", p)}
		case typ.Type != gjson.String:
			return Threshold{}, &ParamError{p + ".type", fmt.Sprintf(
				"Invalid type for '%s.type': expected a string, but got %s instead.", p, jsonKind(typ))}
		case typ.Str != "compaction":
			return Threshold{}, &ParamError{p + ".type", fmt.Sprintf(
				"Invalid value: '%s'. Supported values are: 'compaction'.", typ.Str)}
		}
		ct := e.Get("compact_threshold")
		if !ct.Exists() || ct.Type == gjson.Null {
			continue
		}
		tp := p + ".compact_threshold"
		n, ok := jsonInteger(ct)
		if !ok {
			return Threshold{}, &ParamError{tp, fmt.Sprintf(
				"Invalid type for '%s': expected an integer, but got %s instead.", tp, jsonKind(ct))}
		}
		if n < MinCompactThreshold {
			return Threshold{}, &ParamError{tp, fmt.Sprintf(
				"Invalid '%s': integer below minimum value. Expected a value greater than or equal to %d, but got %d instead.",
				tp, MinCompactThreshold, n)}
		}
		if t.Tokens == 0 || n < t.Tokens {
			t.Tokens = n
		}
	}
	return t, nil
}

// jsonInteger accepts only JSON numbers written as integers that fit an int.
func jsonInteger(v gjson.Result) (int, bool) {
	if v.Type != gjson.Number {
		return 0, false
	}
	for i := 0; i < len(v.Raw); i++ {
		if c := v.Raw[i]; (c < '0' || c > '9') && !(i == 0 && c == '-') {
			return 0, false
		}
	}
	n, err := strconv.Atoi(v.Raw)
	return n, err == nil
}

// jsonKind names a JSON value's type the way OpenAI's messages do.
func jsonKind(v gjson.Result) string {
	switch {
	case v.Type == gjson.String:
		return "a string"
	case v.Type == gjson.Number:
		if _, ok := jsonInteger(v); ok {
			return "an integer"
		}
		return "a decimal"
	case v.Type == gjson.True || v.Type == gjson.False:
		return "a boolean"
	case v.Type == gjson.Null:
		return "null"
	case v.IsArray():
		return "an array"
	case v.IsObject():
		return "an object"
	}
	return "an invalid value"
}

// Over is the one threshold rule, on every route and for every kind of threshold (a client's
// compact_threshold or compact_20260112 trigger, the operator's policy): a request compacts when
// its input exceeds the limit, never at it, and never with no limit (0 or less).
func Over(total, limit int) bool { return limit > 0 && total > limit }

// Policy is the operator's server-side default for compaction.
type Policy struct {
	// Threshold compacts every request past this many input tokens; 0 turns the policy off.
	Threshold int
	// Routes overrides Threshold for one route, by its dialect's name (dialect.Responses,
	// Messages, Chat; dialect.Chat is POST /v1/chat/completions, where a compaction is
	// transparent: Chat Completions has no compaction item, so the upstream sees the compacted
	// conversation, the client its usual answer). The APIs serve models with different context
	// windows, so one number rarely fits both. A route absent from it uses Threshold; 0 turns the
	// policy off for that route.
	Routes map[dialect.Name]int
	// Override applies Threshold even when the client sent its own context_management.
	Override bool
	// DefaultClientThreshold is used when the client asked for compaction without a threshold
	// (0 = DefaultClientThreshold, 200000).
	DefaultClientThreshold int
}

// ForRoute is the policy as it applies to one route: Threshold is the route's own when Routes
// names it.
func (p Policy) ForRoute(route dialect.Name) Policy {
	if n, ok := p.Routes[route]; ok {
		p.Threshold = n
	}
	p.Routes = nil
	return p
}

// ParseThresholds reads --compact-threshold: "N" (every route: responses, messages and chat) or
// "responses=N,messages=M,chat=C" (a route left out gets 0, off). Thresholds must not be
// negative; 0 is off. Plain N covers chat too: it is the same OpenAI-compatible upstream and
// models as responses, and an operator who sets one number means "compact past it" everywhere.
func ParseThresholds(s string) (threshold int, routes map[dialect.Name]int, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil, nil
	}
	num := func(v string) (int, error) {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return 0, fmt.Errorf("compact threshold %q: want a token count of 0 (off) or more", strings.TrimSpace(v))
		}
		return n, nil
	}
	if !strings.Contains(s, "=") {
		n, err := num(s)
		return n, nil, err
	}
	routes = map[dialect.Name]int{}
	for _, part := range strings.Split(s, ",") {
		name, v, _ := strings.Cut(part, "=")
		k, err := dialect.Parse(name)
		if err != nil {
			return 0, nil, fmt.Errorf("compact threshold route %q: want responses, messages or chat", strings.TrimSpace(name))
		}
		if _, dup := routes[k]; dup {
			return 0, nil, fmt.Errorf("compact threshold route %q given twice", k)
		}
		n, err := num(v)
		if err != nil {
			return 0, nil, err
		}
		routes[k] = n
	}
	return 0, routes, nil
}

// Effective returns the threshold that applies to a request and what set it: "threshold" (the
// client's context_management), "policy" (the operator's), or "" with 0 tokens when compaction
// is off for this request. A client's own threshold wins unless the operator set Override; an
// Override policy with Threshold 0 has nothing to impose and leaves the client's choice alone.
func (p Policy) Effective(t Threshold) (tokens int, trigger string) {
	if p.Threshold > 0 && (!t.Set || p.Override) {
		return p.Threshold, "policy"
	}
	if !t.Set {
		return 0, ""
	}
	if t.Tokens > 0 {
		return t.Tokens, "threshold"
	}
	if p.DefaultClientThreshold > 0 {
		return p.DefaultClientThreshold, "threshold"
	}
	return DefaultClientThreshold, "threshold"
}
