package jsonx

import (
	"bytes"
	"errors"
	"testing"
)

func TestValid(t *testing.T) {
	deep := func(n int, open, close string) []byte {
		return append(bytes.Repeat([]byte(open), n), bytes.Repeat([]byte(close), n)...)
	}
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"object", []byte(`{"a":[1,{"b":"]]]"}]}`), nil},
		{"at the limit", deep(MaxDepth, "[", "]"), nil},
		{"over the limit", deep(MaxDepth+1, "[", "]"), ErrTooDeep},
		{"objects over the limit", append(bytes.Repeat([]byte(`{"a":`), MaxDepth+1), bytes.Repeat([]byte("}"), MaxDepth+1)...), ErrTooDeep},
		{"brackets in strings do not count", []byte(`["` + string(bytes.Repeat([]byte("["), 5000)) + `"]`), nil},
		{"escaped quote keeps the string open", []byte(`["\"[[[[", 1]`), nil},
		{"unterminated open brackets", bytes.Repeat([]byte("["), 6<<20), ErrTooDeep},
		{"truncated", []byte(`{"a":`), ErrInvalid},
		{"empty", nil, ErrInvalid},
		{"trailing garbage", []byte(`{} x`), ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Valid(c.in)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("Valid = %v, want %v", err, c.want)
			}
		})
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range []string{`{}`, `[[[[`, `{"a":"[[["}`, `["\"", [1]]`, `]]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = Valid(b) // must not panic or overflow the stack on any input
	})
}

func BenchmarkCheckDepth(b *testing.B) {
	doc := bytes.Repeat([]byte(`{"type":"message","role":"user","content":[{"type":"input_text","text":"hello world, some text"}]},`), 20000)
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		_ = CheckDepth(doc, MaxDepth)
	}
}
