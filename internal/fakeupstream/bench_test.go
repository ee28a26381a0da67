package fakeupstream

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// agentBody is a Responses request shaped like an agent's: many items, about size bytes. Every
// function_call_output follows its function_call, so the strict fake accepts it and the
// benchmark includes the strict checks' cost.
func agentBody(size int, stream bool) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"model":"m","stream":%v,"input":[`, stream)
	chunk := strings.Repeat("x", 2000)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"message","role":"user","content":[{"type":"input_text","text":"turn %d %s"}]},`, i, chunk)
		fmt.Fprintf(&b, `{"type":"function_call","call_id":"call_%d","name":"shell","arguments":"{}"},`, i)
		fmt.Fprintf(&b, `{"type":"function_call_output","call_id":"call_%d","output":"%s"}`, i, chunk)
	}
	b.WriteString(`,{"role":"user","content":"last question"}]}`)
	return b.Bytes()
}

// BenchmarkServe measures the fake's own cost per request (in-process, no sockets), which is
// overhead in every compactd benchmark that uses it as the upstream.
func BenchmarkServe(b *testing.B) {
	for _, bc := range []struct {
		name   string
		size   int
		stream bool
	}{
		{"json/4KB", 4 << 10, false},
		{"json/2MB", 2 << 20, false},
		{"sse/4KB", 4 << 10, true},
		{"sse/2MB", 2 << 20, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := New(Options{DropBodies: true})
			body := agentBody(bc.size, bc.stream)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/responses", bytes.NewReader(body))
				w := httptest.NewRecorder()
				s.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
				s.Reset() // keep the log from growing across iterations
			}
		})
	}
}

// BenchmarkDefaultSummary measures the default summariser answer on a large transcript.
func BenchmarkDefaultSummary(b *testing.B) {
	var t strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&t, "[user] question %d %s\n\n[assistant] answer %d\n\n", i, strings.Repeat("y", 200), i)
	}
	tr := t.String()
	b.SetBytes(int64(len(tr)))
	b.ReportAllocs()
	for b.Loop() {
		_ = DefaultSummary(tr)
	}
}
