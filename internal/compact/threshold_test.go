package compact

import (
	"errors"
	"testing"

	"github.com/compactd/compactd/internal/dialect"
)

func TestParseContextManagement(t *testing.T) {
	cases := []struct {
		name      string
		raw       string
		want      Threshold
		wantParam string // "" = valid
	}{
		{"absent", ``, Threshold{}, ""},
		{"null field", `null`, Threshold{}, ""},
		{"threshold absent", `[{"type":"compaction"}]`, Threshold{Set: true}, ""},
		{"threshold null", `[{"type":"compaction","compact_threshold":null}]`, Threshold{Set: true}, ""},
		{"1000 is the minimum", `[{"type":"compaction","compact_threshold":1000}]`, Threshold{true, 1000}, ""},
		{"documented example", `[{"type":"compaction","compact_threshold":200000}]`, Threshold{true, 200000}, ""},
		{"extra fields allowed", `[{"type":"compaction","compact_threshold":5000,"future":{"x":1}}]`, Threshold{true, 5000}, ""},
		{"smallest of several wins", `[{"type":"compaction","compact_threshold":9000},{"type":"compaction","compact_threshold":3000},{"type":"compaction"}]`, Threshold{true, 3000}, ""},
		{"not an array", `{"type":"compaction"}`, Threshold{}, "context_management"},
		{"string", `"compaction"`, Threshold{}, "context_management"},
		{"empty array", `[]`, Threshold{}, "context_management"},
		{"entry not an object", `["compaction"]`, Threshold{}, "context_management[0]"},
		{"missing type", `[{"compact_threshold":2000}]`, Threshold{}, "context_management[0].type"},
		{"wrong type", `[{"type":"compact_20260112"}]`, Threshold{}, "context_management[0].type"},
		{"type not a string", `[{"type":1}]`, Threshold{}, "context_management[0].type"},
		{"999 below minimum", `[{"type":"compaction","compact_threshold":999}]`, Threshold{}, "context_management[0].compact_threshold"},
		{"negative", `[{"type":"compaction","compact_threshold":-5000}]`, Threshold{}, "context_management[0].compact_threshold"},
		{"fraction", `[{"type":"compaction","compact_threshold":1000.5}]`, Threshold{}, "context_management[0].compact_threshold"},
		{"integral fraction", `[{"type":"compaction","compact_threshold":1000.0}]`, Threshold{}, "context_management[0].compact_threshold"},
		{"exponent 1e4", `[{"type":"compaction","compact_threshold":1e4}]`, Threshold{}, "context_management[0].compact_threshold"},
		{"string number", `[{"type":"compaction","compact_threshold":"2000"}]`, Threshold{}, "context_management[0].compact_threshold"},
		{"overflow", `[{"type":"compaction","compact_threshold":99999999999999999999999}]`, Threshold{}, "context_management[0].compact_threshold"},
		{"second entry reported by index", `[{"type":"compaction"},{"type":"compaction","compact_threshold":10}]`, Threshold{}, "context_management[1].compact_threshold"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseContextManagement([]byte(tc.raw))
			if tc.wantParam == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				if got != tc.want {
					t.Errorf("got %+v, want %+v", got, tc.want)
				}
				return
			}
			var pe *ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("got %+v, %v; want a *ParamError", got, err)
			}
			if pe.Param != tc.wantParam {
				t.Errorf("param %q, want %q", pe.Param, tc.wantParam)
			}
			if pe.Message == "" {
				t.Error("empty message")
			}
		})
	}
}

func TestPolicyEffective(t *testing.T) {
	client := Threshold{Set: true, Tokens: 50_000}
	clientDefault := Threshold{Set: true}
	none := Threshold{}
	cases := []struct {
		name    string
		p       Policy
		t       Threshold
		tokens  int
		trigger string
	}{
		{"off, client silent", Policy{}, none, 0, ""},
		{"off, client threshold", Policy{}, client, 50_000, "threshold"},
		{"off, client null uses 200000", Policy{}, clientDefault, DefaultClientThreshold, "threshold"},
		{"custom client default", Policy{DefaultClientThreshold: 120_000}, clientDefault, 120_000, "threshold"},
		{"policy, client silent", Policy{Threshold: 150_000}, none, 150_000, "policy"},
		{"policy yields to client", Policy{Threshold: 150_000}, client, 50_000, "threshold"},
		{"policy yields to client default", Policy{Threshold: 150_000}, clientDefault, DefaultClientThreshold, "threshold"},
		{"override beats client", Policy{Threshold: 150_000, Override: true}, client, 150_000, "policy"},
		{"override, client silent", Policy{Threshold: 150_000, Override: true}, none, 150_000, "policy"},
		{"override without threshold leaves client", Policy{Override: true}, client, 50_000, "threshold"},
		{"override without threshold, client silent", Policy{Override: true}, none, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tokens, trigger := tc.p.Effective(tc.t)
			if tokens != tc.tokens || trigger != tc.trigger {
				t.Errorf("Effective = (%d,%q), want (%d,%q)", tokens, trigger, tc.tokens, tc.trigger)
			}
		})
	}
}

func TestParseThresholds(t *testing.T) {
	for _, tt := range []struct {
		in        string
		threshold int
		routes    map[dialect.Name]int
		wantErr   bool
	}{
		{"", 0, nil, false},
		{"150000", 150000, nil, false},
		{" 0 ", 0, nil, false},
		{"responses=150000,messages=120000", 0, map[dialect.Name]int{dialect.Responses: 150000, dialect.Messages: 120000}, false},
		{"messages=120000", 0, map[dialect.Name]int{dialect.Messages: 120000}, false},
		{"responses = 1000 , messages=0", 0, map[dialect.Name]int{dialect.Responses: 1000, dialect.Messages: 0}, false},
		{"-1", 0, nil, true},
		{"abc", 0, nil, true},
		{"chat=1000", 0, map[dialect.Name]int{dialect.Chat: 1000}, false},
		{"responses=2000,messages=3000,chat=1000", 0, map[dialect.Name]int{dialect.Responses: 2000, dialect.Messages: 3000, dialect.Chat: 1000}, false},
		{"chat=1000,chat=2000", 0, nil, true},
		{"completions=1000", 0, nil, true},
		{"openai=1000", 0, nil, true}, // a provider, not a route
		{"anthropic=1000", 0, nil, true},
		{"messages=1000,messages=2000", 0, nil, true},
		{"messages=-5", 0, nil, true},
		{"messages", 0, nil, true},
	} {
		n, routes, err := ParseThresholds(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseThresholds(%q) err = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && (n != tt.threshold || len(routes) != len(tt.routes)) {
			t.Errorf("ParseThresholds(%q) = %d %v, want %d %v", tt.in, n, routes, tt.threshold, tt.routes)
		}
		for k, v := range tt.routes {
			if got, ok := routes[k]; !ok || got != v {
				t.Errorf("ParseThresholds(%q)[%s] = %d, %v; want %d", tt.in, k, got, ok, v)
			}
		}
	}
}

func TestPolicyForRoute(t *testing.T) {
	p := Policy{Threshold: 100_000, Routes: map[dialect.Name]int{dialect.Messages: 80_000, dialect.Responses: 0}, Override: true}
	for _, tt := range []struct {
		route dialect.Name
		want  int
	}{{dialect.Messages, 80_000}, {dialect.Responses, 0}, {"other", 100_000}} {
		got := p.ForRoute(tt.route)
		if got.Threshold != tt.want || !got.Override || got.Routes != nil {
			t.Errorf("ForRoute(%s) = %+v, want threshold %d", tt.route, got, tt.want)
		}
	}
	// The single-number form applies to every route, chat included.
	if one := (Policy{Threshold: 5000}); one.ForRoute(dialect.Messages).Threshold != 5000 || one.ForRoute(dialect.Responses).Threshold != 5000 ||
		one.ForRoute(dialect.Chat).Threshold != 5000 {
		t.Error("a single threshold does not apply to every route")
	}
	// The per-route form leaves chat off unless it names it.
	if _, routes, _ := ParseThresholds("responses=1000"); (Policy{Routes: routes}).ForRoute(dialect.Chat).Threshold != 0 {
		t.Error("a per-route threshold that does not name chat turns chat on")
	}
}

func TestOver(t *testing.T) {
	for _, tc := range []struct {
		total, limit int
		want         bool
	}{
		{100, 99, true}, {100, 100, false}, {99, 100, false}, {100, 0, false}, {100, -1, false}, {0, 0, false},
	} {
		if got := Over(tc.total, tc.limit); got != tc.want {
			t.Errorf("Over(%d, %d) = %v, want %v", tc.total, tc.limit, got, tc.want)
		}
	}
}
