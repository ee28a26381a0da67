package proxy

import (
	"io"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"
)

// The JSON usage scan finds the top-level "usage" object as the body streams past, in any
// chunking, and nothing else: not a nested "usage", not the word inside a string.
func TestUsageScan(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       string // the usage object found, "" for none
	}{
		{"last", `{"id":"r","output":[{"usage":{"input_tokens":9}}],"usage":{"input_tokens":3,"output_tokens":4}}`, `{"input_tokens":3,"output_tokens":4}`},
		{"first", `{"usage":{"input_tokens":1,"x":{"y":[1,{"z":2}]}},"id":"r"}`, `{"input_tokens":1,"x":{"y":[1,{"z":2}]}}`},
		{"spaces", "{ \"usage\" :\n { \"output_tokens\" : 2 } }", `{ "output_tokens" : 2 }`},
		{"in a string", `{"text":"\"usage\":{\"input_tokens\":5}","n":1}`, ""},
		{"escaped key", `{"us\"age":{"a":1},"usage":{"b":2}}`, `{"b":2}`},
		{"nested only", `{"response":{"usage":{"input_tokens":5}}}`, ""},
		{"not an object", `[{"usage":{"a":1}}]`, ""},
		{"usage not an object", `{"usage":[{"a":1}],"b":{"c":2}}`, ""},
		{"braces in strings", `{"usage":{"k":"}{]\"[","n":1},"z":0}`, `{"k":"}{]\"[","n":1}`},
	} {
		for _, chunk := range []int{1, 3, 7, len(tc.body)} {
			var u usageScan
			for i := 0; i < len(tc.body); i += chunk {
				u.write([]byte(tc.body[i:min(i+chunk, len(tc.body))]))
			}
			got := ""
			if u.found() {
				got = string(u.obj)
			}
			if got != tc.want {
				t.Errorf("%s (chunks of %d): found %q, want %q", tc.name, chunk, got, tc.want)
			}
		}
	}
}

// A usage object larger than the cap is given up on rather than kept.
func TestUsageScanCap(t *testing.T) {
	var u usageScan
	u.write([]byte(`{"usage":{"pad":"` + strings.Repeat("x", usageObjectCap) + `"}}`))
	if u.found() {
		t.Fatal("kept a usage object past the cap")
	}
}

// The counts come out of a streamed JSON body whatever its size: the scan keeps only the usage
// object (before, a body past 8 MiB reported no tokens).
func TestUpstreamBodyCountsLargeJSON(t *testing.T) {
	body := `{"output":"` + strings.Repeat("y", 9<<20) + `","usage":{"input_tokens":11,"output_tokens":7}}`
	b := &upstreamBody{turn: true, scan: true}
	for i := 0; i < len(body); i += 32 << 10 {
		b.feed([]byte(body[i:min(i+32<<10, len(body))]))
	}
	if !b.json.found() {
		t.Fatal("usage not found")
	}
	b.count(gjson.ParseBytes(b.json.obj))
	if b.in != 11 || b.out != 7 {
		t.Errorf("counts %d/%d, want 11/7", b.in, b.out)
	}
}

// The per-request metric calls use series resolved once: after the first request of a label set
// they allocate nothing (before, every call formatted the code and hashed the labels into the
// vector's map; strconv of a status code alone allocated).
func TestRequestMetricsPreResolved(t *testing.T) {
	m := newMetrics(Config{Registry: prometheus.NewRegistry()})
	calls := map[string]func(){
		"request":  func() { m.request("/v1/responses", "POST", 200, 0.01, 0.0001) },
		"upstream": func() { m.upstreamRoundTrip("openai", 200, 0.01) },
		"canceled": func() { m.upstreamCanceled("anthropic", 0.01) },
		"stream":   func() { m.streamOpened("/v1/responses"); m.streamClosed("/v1/responses") },
		"genai":    func() { m.genAI("chat", "openai", "gpt-5.4", 0.1, 10, 5) },
	}
	for name, f := range calls {
		f()
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %.1f allocations per call, want 0", name, n)
		}
	}
}

// The body tap finds the model in the head of the body and stops copying once it has it; a value
// cut by a read boundary is not taken until the rest of it arrives.
func TestBodyTapModel(t *testing.T) {
	pad := strings.Repeat("x", 200<<10)
	for _, tc := range []struct {
		name  string
		body  string
		chunk int
		want  string
		kept  bool // the head is still held after the whole body was read
	}{
		{"model first", `{"model":"gpt-5.4","input":"` + pad + `"}`, 32 << 10, "gpt-5.4", false},
		{"cut inside the value", `{"model":"gpt-5.4","input":"` + pad + `"}`, 14, "gpt-5.4", false},
		{"cut right after the value", `{"model":"gpt-5.4"}`, 18, "gpt-5.4", false},
		{"after other members", `{"input":[{"model":"not this"}],"model":"claude-x","pad":"` + pad + `"}`, 7, "claude-x", false},
		{"no model", `{"input":"` + pad + `"}`, 32 << 10, "", true},
		{"model past the cap", `{"input":"` + pad + `","model":"late"}`, 32 << 10, "", true},
	} {
		tap := &bodyTap{rc: io.NopCloser(strings.NewReader(tc.body)), max: bodyCapture}
		buf := make([]byte, tc.chunk)
		for {
			if _, err := tap.Read(buf); err != nil {
				break
			}
		}
		kept := tap.buf != nil
		if got := tap.model(); got != tc.want {
			t.Errorf("%s: model %q, want %q", tc.name, got, tc.want)
		}
		if kept != tc.kept {
			t.Errorf("%s: head kept = %v, want %v", tc.name, kept, tc.kept)
		}
	}
}
