package metrics

import (
	"strings"
	"testing"
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

// TestUsage feeds usage-bearing bodies to Usage one byte at a time (the worst split) and checks
// the tokens it finds.
func TestUsage(t *testing.T) {
	tests := []struct {
		name    string
		sse     bool
		body    string
		in, out int64
	}{
		{"responses json", false, `{"id":"resp_1","output":[],"usage":{"input_tokens":120,"output_tokens":7}}`, 120, 7},
		{"chat json", false, `{"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":5}}`, 50, 5},
		{"responses sse", true, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":900,\"output_tokens\":40}}}\n\n", 900, 40},
		{"anthropic sse", true, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":90,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":33}}\n\n", 100, 33},
		{"responses sse CRLF", true, "event: response.created\r\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\r\n\r\n" +
			"event: response.completed\r\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":900,\"output_tokens\":40}}}\r\n\r\n", 900, 40},
		{"anthropic sse multi-line data", true, "event: message_start\ndata: {\"type\":\"message_start\",\ndata: \"message\":{\"usage\":{\"input_tokens\":10,\ndata: \"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\ndata: \"usage\":{\"output_tokens\":33}}\n\n", 10, 33},
		{"sse last event without its blank line", true, "data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}", 5, 2},
		{"no usage", true, "data: {\"type\":\"x\"}\n\n", 0, 0},
		{"not json", false, `not json`, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := Usage{SSE: tt.sse}
			for i := range len(tt.body) {
				u.Feed([]byte{tt.body[i]})
			}
			if in, out := u.Finish(true); in != tt.in || out != tt.out {
				t.Errorf("usage = %d in / %d out, want %d / %d", in, out, tt.in, tt.out)
			}
		})
	}
}

// A body that did not reach its end reports only what complete events said: no JSON usage, no
// last event without its blank line.
func TestUsageCutBody(t *testing.T) {
	for _, tc := range []struct {
		name string
		sse  bool
		body string
	}{
		{"json", false, `{"usage":{"input_tokens":3,"output_tokens":4}}`},
		{"sse last event without its blank line", true, "data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}"},
	} {
		u := Usage{SSE: tc.sse}
		u.Feed([]byte(tc.body))
		if in, out := u.Finish(false); in != 0 || out != 0 {
			t.Errorf("%s: usage = %d in / %d out from a body cut short, want none", tc.name, in, out)
		}
	}
}

// The counts come out of a streamed JSON body whatever its size: the scan keeps only the usage
// object (before, a body past 8 MiB reported no tokens).
func TestUsageCountsLargeJSON(t *testing.T) {
	body := `{"output":"` + strings.Repeat("y", 9<<20) + `","usage":{"input_tokens":11,"output_tokens":7}}`
	var u Usage
	for i := 0; i < len(body); i += 32 << 10 {
		u.Feed([]byte(body[i:min(i+32<<10, len(body))]))
	}
	if !u.json.found() {
		t.Fatal("usage not found")
	}
	if in, out := u.Finish(true); in != 11 || out != 7 {
		t.Errorf("counts %d/%d, want 11/7", in, out)
	}
}

// Finding a JSON response's usage allocates the usage object it keeps and nothing more (no
// buffer for the keys it reads).
func TestUsageScanAllocs(t *testing.T) {
	resp := []byte(`{"id":"resp_1","output":[{"type":"message"}],"usage":{"input_tokens":12,"output_tokens":3}}`)
	if n := testing.AllocsPerRun(200, func() {
		var u usageScan
		u.write(resp)
	}); n > 1 {
		t.Errorf("usage scan of a JSON response: %.1f allocations, want at most 1", n)
	}
}

func BenchmarkUsageSSE(b *testing.B) {
	var sb strings.Builder
	for i := 0; i < 200; i++ {
		sb.WriteString("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"token \"}\n\n")
	}
	sb.WriteString("event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":900,\"output_tokens\":40}}}\n\n")
	stream := []byte(sb.String())
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		u := Usage{SSE: true}
		for i := 0; i < len(stream); i += 4096 {
			u.Feed(stream[i:min(i+4096, len(stream))])
		}
		u.Finish(true)
	}
}

// BenchmarkUsageJSON is the usage of a small JSON answer (the fake upstream's Responses and
// Messages replies to a 2 KB turn), found and counted: the work every non-streamed model turn
// does before its answer reaches the client.
func BenchmarkUsageJSON(b *testing.B) {
	for _, c := range []struct{ name, body string }{
		{"Responses", `{"id":"resp_967b06a9551e7a32e61241fb","object":"response","created_at":1767225600,"status":"completed","background":false,"completed_at":1767225600,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"max_tool_calls":null,"model":"gpt-5","output":[{"id":"msg_3e56cbb322501b8d21dd7d58","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"MOCK-REPLY 224108: Fix the failing test in the parser package. Fix the failing "}]}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"service_tier":"default","store":true,"temperature":1,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[{"type":"function","name":"shell","parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}}}}}],"top_p":1,"truncation":"disabled","usage":{"input_tokens":270,"input_tokens_details":{"cached_tokens":0},"output_tokens":19,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":289},"user":null,"metadata":{}}`},
		{"Messages", `{"id":"msg_026edfb1b876ac7241add013","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"MOCK-REPLY 1: The build failed on step three. The build failed on step thr"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":400,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":18,"service_tier":"standard"}}`},
	} {
		body := []byte(c.body)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				var u Usage
				u.Feed(body)
				if in, _ := u.Finish(true); in == 0 {
					b.Fatal("no usage found")
				}
			}
		})
	}
}
