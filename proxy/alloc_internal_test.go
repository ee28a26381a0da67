package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"testing"
)

// The pieces of the pass-through path that run on every request allocate no more than they
// must; each bound below was exceeded before the change that set it (BenchmarkPassThrough has
// the whole path's figures).
func TestPassThroughPieceAllocs(t *testing.T) {
	body := []byte(`{"model":"gpt-5.4","input":"` + string(bytes.Repeat([]byte("x"), 2000)) + `"}`)
	rd := bytes.NewReader(body)
	tap := &bodyTap{rc: io.NopCloser(rd), max: bodyCapture}
	buf := make([]byte, 4096)
	req := httptest.NewRequest("POST", "/v1/responses", nil)
	for _, tc := range []struct {
		name string
		max  float64
		f    func()
	}{
		// The model string only: the first read is looked at where it is, not copied first.
		{"body tap, model in the first read", 1, func() {
			rd.Reset(body)
			tap.buf, tap.found, tap.mdl = nil, false, ""
			_, _ = tap.Read(buf)
		}},
		{"copy buffer Get and Put", 0, func() { copyBuffers.Put(copyBuffers.Get()) }},
		{"isTimeout(io.EOF)", 0, func() { _ = isTimeout(io.EOF) }},
		// The request copy, the replayable body, and GetBody bound to it.
		{"withBody", 3, func() { _ = withBody(req, context.Background(), body) }},
	} {
		if n := testing.AllocsPerRun(200, tc.f); n > tc.max {
			t.Errorf("%s: %.1f allocations, want at most %.0f", tc.name, n, tc.max)
		}
	}
}
