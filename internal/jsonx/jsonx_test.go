package jsonx

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func deep(n int, open, close string) []byte {
	return append(bytes.Repeat([]byte(open), n), bytes.Repeat([]byte(close), n)...)
}

func TestValid(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"object", []byte(`{"a":[1,{"b":"]]]"}]}`), nil},
		{"at the limit", deep(MaxDepth, "[", "]"), nil},
		{"objects at the limit", append(append(bytes.Repeat([]byte(`{"a":`), MaxDepth), '1'), bytes.Repeat([]byte("}"), MaxDepth)...), nil},
		{"over the limit", deep(MaxDepth+1, "[", "]"), ErrTooDeep},
		{"objects over the limit", append(bytes.Repeat([]byte(`{"a":`), MaxDepth+1), bytes.Repeat([]byte("}"), MaxDepth+1)...), ErrTooDeep},
		{"mixed over the limit", append(bytes.Repeat([]byte(`[{"a":`), MaxDepth/2+1), bytes.Repeat([]byte("}]"), MaxDepth/2+1)...), ErrTooDeep},
		{"brackets in strings do not count", []byte(`["` + string(bytes.Repeat([]byte("["), 5000)) + `"]`), nil},
		{"escaped quote keeps the string open", []byte(`["\"[[[[", 1]`), nil},
		{"unterminated open brackets", bytes.Repeat([]byte("["), 6<<20), ErrTooDeep},
		{"unterminated open objects", bytes.Repeat([]byte(`{"a":`), 1<<20), ErrTooDeep},
		{"truncated", []byte(`{"a":`), ErrInvalid},
		{"truncated string", []byte(`{"a":"abc`), ErrInvalid},
		{"truncated escape", []byte(`"\`), ErrInvalid},
		{"truncated unicode escape", []byte(`"\u12"`), ErrInvalid},
		{"empty", nil, ErrInvalid},
		{"only space", []byte(" \n"), ErrInvalid},
		{"trailing garbage", []byte(`{} x`), ErrInvalid},
		{"two values", []byte(`1 2`), ErrInvalid},
		{"trailing comma in array", []byte(`[1,]`), ErrInvalid},
		{"trailing comma in object", []byte(`{"a":1,}`), ErrInvalid},
		{"missing colon", []byte(`{"a" 1}`), ErrInvalid},
		{"non-string key", []byte(`{1:1}`), ErrInvalid},
		{"mismatched close", []byte(`[1}`), ErrInvalid},
		{"extra close", []byte(`[1]]`), ErrInvalid},
		{"leading zero", []byte(`01`), ErrInvalid},
		{"bare minus", []byte(`-`), ErrInvalid},
		{"bare fraction", []byte(`1.`), ErrInvalid},
		{"bare exponent", []byte(`1e+`), ErrInvalid},
		{"numbers", []byte(`[0,-0,1.5,-12.25e-3,3E7,10]`), nil},
		{"literals", []byte(` [true,false,null] `), nil},
		{"bad literal", []byte(`[tru]`), ErrInvalid},
		{"control character in string", []byte("\"a\x01b\""), ErrInvalid},
		{"bad escape", []byte(`"\x"`), ErrInvalid},
		{"escapes", []byte(`"\" \\ \/ \b \f \n \r \t \u00e9 \uD83D\uDE00"`), nil},
		{"long string with late quote", []byte(`"` + strings.Repeat("abcdefgh", 100) + `\"x"`), nil},
		{"utf-8", []byte(`{"é":"日本語 🙂"}`), nil},
		{"invalid utf-8 in a value", []byte("{\"model\":\"\x8c\"}"), ErrInvalidUTF8},
		{"invalid utf-8 in a key", []byte("{\"ty\xffpe\":1}"), ErrInvalidUTF8},
		{"utf-8 encoded surrogate", []byte("[\"\xed\xa0\x80\"]"), ErrInvalidUTF8},
		{"truncated utf-8 sequence", []byte("[\"\xe6\x97\"]"), ErrInvalidUTF8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Valid(c.in)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("Valid = %v, want %v", err, c.want)
			}
			if oracle := json.Valid(c.in) && utf8.Valid(c.in); c.want != ErrTooDeep && oracle != (err == nil) {
				t.Fatalf("Valid = %v but encoding/json.Valid = %v", err, oracle)
			}
			if err := ValidString(string(c.in)); !errors.Is(err, c.want) {
				t.Fatalf("ValidString = %v, want %v", err, c.want)
			}
		})
	}
}

func TestDepthErrorOffset(t *testing.T) {
	b := append([]byte(`  `), deep(MaxDepth+5, "[", "]")...)
	var de *DepthError
	if err := Valid(b); !errors.As(err, &de) || de.Offset != 2+MaxDepth || de.Limit != MaxDepth {
		t.Fatalf("Valid = %v, want a DepthError at byte %d", err, 2+MaxDepth)
	}
}

func TestValidDoesNotAllocate(t *testing.T) {
	doc := bytes.Repeat([]byte(`{"type":"message","content":[{"type":"input_text","text":"a \"b\" \u00e9"}],"n":[1,2.5,true,null]},`), 100)
	doc = append(append([]byte{'['}, doc[:len(doc)-1]...), ']')
	if err := Valid(doc); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(10, func() { _ = Valid(doc) }); n != 0 {
		t.Fatalf("Valid allocates %v times", n)
	}
}

func TestMembersElements(t *testing.T) {
	obj := []byte(`{ "a" : 1 , "b\"c":"x,}", "d":{"e":[1,{"f":"]"}]}, "g":[ ],"h":true}`)
	if Valid(obj) != nil {
		t.Fatal("test document is not valid")
	}
	var got []string
	if !Members(obj, func(k []byte, s, e int) bool {
		got = append(got, string(k)+"="+string(obj[s:e]))
		return true
	}) {
		t.Fatal("Members: not an object")
	}
	want := []string{`a=1`, `b\"c="x,}"`, `d={"e":[1,{"f":"]"}]}`, `g=[ ]`, `h=true`}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("Members = %q, want %q", got, want)
	}
	arr := []byte(`[ 1, "a]" ,{"x":[2]} ,[],null ]`)
	got = nil
	Elements(arr, func(s, e int) bool {
		got = append(got, string(arr[s:e]))
		return true
	})
	want = []string{`1`, `"a]"`, `{"x":[2]}`, `[]`, `null`}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("Elements = %q, want %q", got, want)
	}
	if Members(arr, func([]byte, int, int) bool { return true }) || Elements(obj, func(int, int) bool { return true }) {
		t.Fatal("Members of an array or Elements of an object reported true")
	}
	n := 0
	Elements([]byte(`[]`), func(int, int) bool { n++; return true })
	Members([]byte(`{ }`), func([]byte, int, int) bool { n++; return true })
	if n != 0 {
		t.Fatal("empty containers yielded members")
	}
}

func TestAppendUnquoted(t *testing.T) {
	for _, raw := range []string{`plain`, `a\"b\\c\/d\b\f\n\r\t`, `\u0074ype`, `\u00e9\uD83D\uDE00`, `\uD83Dx`, `\uDE00\uD83D`, ``} {
		var want string
		if err := json.Unmarshal([]byte(`"`+raw+`"`), &want); err != nil {
			t.Fatal(err)
		}
		if got := string(AppendUnquoted(nil, []byte(raw))); got != want {
			t.Errorf("AppendUnquoted(%q) = %q, want %q", raw, got, want)
		}
	}
}

// FuzzValid holds Valid to encoding/json.Valid as an oracle: the same verdict on every input no
// deeper than MaxDepth, and ErrTooDeep (never nil) on deeper ones. It also checks the reader
// functions stay in bounds on anything, and agree with encoding/json on valid documents.
func FuzzValid(f *testing.F) {
	for _, s := range []string{
		`{}`, `[[[[`, `{"a":"[[["}`, `["\"", [1]]`, `]]]]`, `{"a":1,"a":2}`, `[1,2,`, `{"a":`, `"\u12`,
		`-0.5e+10`, `01`, `[tru]`, "\"\x7f\x80\xff\"", `{"type":"message","type":"compaction"}`,
		string(deep(MaxDepth, "[", "]")), string(deep(MaxDepth+1, "[", "]")),
		strings.Repeat(`{"a":`, MaxDepth+1),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := Valid(b)
		// encoding/json.Valid accepts invalid UTF-8 (its decoder replaces it); Valid refuses it.
		oracle := json.Valid(b) && utf8.Valid(b)
		if CheckDepth(b, MaxDepth) == nil {
			if oracle != (err == nil) {
				t.Fatalf("Valid(%q) = %v, encoding/json.Valid = %v", b, err, oracle)
			}
		} else if err == nil || oracle && !errors.Is(err, ErrTooDeep) {
			t.Fatalf("Valid(%q) = %v on a document deeper than %d (encoding/json.Valid = %v)", b, err, MaxDepth, oracle)
		}
		if err != nil && !errors.Is(err, ErrTooDeep) && err != ErrInvalid && err != ErrInvalidUTF8 {
			t.Fatalf("Valid returned %v, not one of its error values", err)
		}
		// The readers must stay in bounds and terminate on anything.
		for i := range min(len(b), 8) {
			if e := End(b, i); e < i || e > len(b) {
				t.Fatalf("End(%q, %d) = %d", b, i, e)
			}
		}
		Members(b, func(_ []byte, s, e int) bool {
			if s > e || e > len(b) {
				t.Fatalf("Members span %d:%d of %d bytes", s, e, len(b))
			}
			return true
		})
		Elements(b, func(s, e int) bool {
			if s > e || e > len(b) {
				t.Fatalf("Elements span %d:%d of %d bytes", s, e, len(b))
			}
			return true
		})
		if err != nil {
			return
		}
		var v any
		if json.Unmarshal(b, &v) != nil {
			return
		}
		t2 := bytes.TrimLeft(b, " \t\r\n")
		if m, ok := v.(map[string]any); ok {
			Members(t2, func(k []byte, s, e int) bool {
				key := string(AppendUnquoted(nil, k))
				if !utf8.ValidString(key) {
					return true // encoding/json replaces invalid UTF-8; compactd compares ASCII names
				}
				if _, ok := m[key]; !ok || !json.Valid(t2[s:e]) {
					t.Fatalf("Members of %q: key %q / value %q do not match encoding/json", b, key, t2[s:e])
				}
				return true
			})
		}
		if a, ok := v.([]any); ok {
			n := 0
			Elements(t2, func(s, e int) bool {
				if !json.Valid(t2[s:e]) {
					t.Fatalf("Elements of %q: %q is not a value", b, t2[s:e])
				}
				n++
				return true
			})
			if n != len(a) {
				t.Fatalf("Elements of %q: %d elements, encoding/json has %d", b, n, len(a))
			}
		}
	})
}

func BenchmarkCheckDepth(b *testing.B) {
	doc := bytes.Repeat([]byte(`{"type":"message","role":"user","content":[{"type":"input_text","text":"hello world, some text"}]},`), 20000)
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		_ = CheckDepth(doc, MaxDepth)
	}
}
