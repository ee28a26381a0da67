package api

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestRaws(t *testing.T) {
	a, b := []byte(`{"role":"user","content":"a"}`), []byte(`{"type":"function_call","call_id":"c"}`)
	want := [][]byte{a, b}
	if got := Raws[[]byte]([]Item{{Raw: a, Type: "message"}, {Raw: b}}); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("items: %q", got)
	}
	if got := Raws[[]byte]([]ChatMessage{{Raw: a, Role: "user"}, {Raw: b}}); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("chat messages: %q", got)
	}
	got := Raws[json.RawMessage]([]Message{{Raw: a, Role: "user"}, {Raw: b}})
	if len(got) != 2 || string(got[0]) != string(a) || string(got[1]) != string(b) {
		t.Errorf("messages: %q", got)
	}
	if &got[1][0] != &b[0] {
		t.Error("the bytes were copied")
	}
	if got := Raws[[]byte]([]Item(nil)); got == nil || len(got) != 0 {
		t.Errorf("no items: %#v, want an empty list", got)
	}
}
