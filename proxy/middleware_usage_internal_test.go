package proxy

import (
	"io"
	"strings"
	"testing"
)

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
