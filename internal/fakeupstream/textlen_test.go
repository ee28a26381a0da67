package fakeupstream

import (
	"testing"

	"github.com/tidwall/gjson"
)

// textLenByForEach is the estimate as gjson decodes it (what textLen replaced): every string
// value unescaped, values under structural keys left out.
func textLenByForEach(r gjson.Result) int {
	switch {
	case r.Type == gjson.String:
		return len(r.Str)
	case r.IsObject():
		n := 0
		r.ForEach(func(k, v gjson.Result) bool {
			if !structuralKeys[k.Str] {
				n += textLenByForEach(v)
			}
			return true
		})
		return n
	case r.IsArray():
		n := 0
		r.ForEach(func(_, v gjson.Result) bool {
			n += textLenByForEach(v)
			return true
		})
		return n
	}
	return 0
}

var textLenCases = []string{
	`"plain"`, `""`, `"a\nb\t\"c\\"`, `"\u00e9\u4e2d"`, `"\ud83d\ude00 smile"`, `"\ud83d alone"`, `"é中😀"`,
	`{"type":"message","role":"user","content":[{"type":"input_text","text":"hello"}]}`,
	`{"cache_control":{"type":"ephemeral","text":"not text"},"text":"yes"}`,
	`[1, true, null, "four", {"k" : "v", "id":"x"}, [["deep"]]]`,
	`{"input":[{"type":"function_call","call_id":"c1","arguments":"{\"cmd\":\"ls\"}"},{"type":"function_call_output","call_id":"c1","output":"a\nb"}]}`,
	`{ "a" : [ ] , "b" : { } , "c" : "d" }`, `{"signature":"sig","thinking":"hmm"}`, `42`, `null`,
}

// TestTextLenMatchesForEach holds the one-pass scan to the decoded walk it replaced.
func TestTextLenMatchesForEach(t *testing.T) {
	for _, js := range textLenCases {
		r := gjson.Parse(js)
		if got, want := textLen(r), textLenByForEach(r); got != want {
			t.Errorf("textLen(%s) = %d, the decoded walk %d", js, got, want)
		}
	}
}

func FuzzTextLenMatchesForEach(f *testing.F) {
	for _, js := range textLenCases {
		f.Add(js)
	}
	f.Fuzz(func(t *testing.T, js string) {
		if !gjson.Valid(js) || len(js) > 4096 {
			return
		}
		r := gjson.Parse(js)
		if got, want := textLen(r), textLenByForEach(r); got != want {
			t.Errorf("textLen(%q) = %d, the decoded walk %d", js, got, want)
		}
	})
}

// TestMemberIsGet: member finds what gjson's Get finds, first match first.
func TestMemberIsGet(t *testing.T) {
	objs := []string{
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}`,
		`{"output":"long\n\"text\" {not a key}","call_id":"c1","type":"function_call_output"}`,
		` { "role" : "assistant" , "role":"user", "id":7, "x":null, "o":{"type":"inner"} } `,
		`{"ty\u0070e":"escaped","type":"plain"}`, `[1,2]`, `"str"`, `{}`, `{"type":`,
	}
	for _, js := range objs {
		r := gjson.Parse(js)
		for _, k := range []string{"type", "role", "id", "call_id", "content", "x", "o", "missing"} {
			got, want := member(r, k), r.Get(k)
			if got.Raw != want.Raw || got.Str != want.Str || got.Type != want.Type || got.Exists() != want.Exists() {
				t.Errorf("member(%s, %q) = %q, Get %q", js, k, got.Raw, want.Raw)
			}
		}
	}
}
