package api

import "testing"

func TestPrependToArray(t *testing.T) {
	tests := []struct{ doc, path, want string }{
		{`{"output":[]}`, "output", `{"output":[{"x":1}]}`},
		{`{"a":1,"output":[ {"y":2} ]}`, "output", `{"a":1,"output":[{"x":1}, {"y":2} ]}`},
		{`{"response":{"output":[{"y":2}]}}`, "response.output", `{"response":{"output":[{"x":1},{"y":2}]}}`},
		{`{"output":null}`, "output", `{"output":null}`},
	}
	for _, tt := range tests {
		got, _ := PrependToArray([]byte(tt.doc), tt.path, []byte(`{"x":1}`))
		if string(got) != tt.want {
			t.Errorf("PrependToArray(%s) = %s, want %s", tt.doc, got, tt.want)
		}
	}
}
