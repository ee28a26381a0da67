package relay

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/sse"
)

// spliced is SpliceEvent's pieces joined, for comparing.
func spliced(ev *sse.Event, data []byte, edits []Splice) []byte {
	var scratch []byte
	return bytes.Join(SpliceEvent(nil, &scratch, ev, data, edits), nil)
}

// SpliceEvent renders what sse.Append renders of the event with ApplySplices's data, whatever
// the order of the edits, with or without id and name, on data of one line or several.
func TestSpliceEvent(t *testing.T) {
	data := []byte(`{"a":1,"b":[2],"c":"x"}`)
	a, b := GetAlias(data, "a"), GetAlias(data, "b")
	num, _ := NumberAt(a, 41)
	pre, _ := PrependAt(b, []byte(`0`))
	for _, tc := range []struct {
		name  string
		ev    sse.Event
		data  []byte
		edits []Splice
		want  string
	}{
		{"no edits", sse.Event{Name: "n"}, data, nil, "event: n\ndata: " + string(data) + "\n\n"},
		{"in order", sse.Event{Name: "n"}, data, []Splice{num, pre}, "event: n\ndata: {\"a\":41,\"b\":[0,2],\"c\":\"x\"}\n\n"},
		{"out of order, id", sse.Event{ID: "7", Name: "n"}, data, []Splice{pre, num}, "id: 7\nevent: n\ndata: {\"a\":41,\"b\":[0,2],\"c\":\"x\"}\n\n"},
		{"no name", sse.Event{}, data, []Splice{{From: 1, To: 1, With: []byte(`"z":0,`)}}, "data: {\"z\":0,\"a\":1,\"b\":[2],\"c\":\"x\"}\n\n"},
		{"at both ends", sse.Event{}, data, []Splice{{From: 0, To: 1, With: []byte("{ ")}, {From: len(data), To: len(data), With: []byte(" ")}},
			"data: { \"a\":1,\"b\":[2],\"c\":\"x\"} \n\n"},
		{"several data lines", sse.Event{Name: "n"}, []byte("{\"a\":1,\n\"b\":2}"), []Splice{{From: 5, To: 6, With: []byte("9")}},
			"event: n\ndata: {\"a\":9,\ndata: \"b\":2}\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := spliced(&tc.ev, tc.data, append([]Splice(nil), tc.edits...))
			if string(got) != tc.want {
				t.Fatalf("got %q\nwant %q", got, tc.want)
			}
			ref := tc.ev
			ref.Data = ApplySplices(tc.data, append([]Splice(nil), tc.edits...))
			if want := sse.Append(nil, ref); !bytes.Equal(got, want) {
				t.Fatalf("got %q, sse.Append renders %q", got, want)
			}
		})
	}
}

// The pieces of a spliced event slice the event's data rather than copy it.
func TestSpliceEventSlicesData(t *testing.T) {
	data := []byte(`{"index":3,"delta":{"text":"` + strings.Repeat("x", 1000) + `"}}`)
	e, ok := NumberAt(GetAlias(data, "index"), 4)
	if !ok {
		t.Fatal("no edit for index")
	}
	var scratch []byte
	pieces := SpliceEvent(nil, &scratch, &sse.Event{Name: "d"}, data, []Splice{e})
	last := pieces[len(pieces)-2] // the data after the edit, before the event's end
	if len(last) < 1000 || unsafe.SliceData(last) != &data[e.To] {
		t.Fatalf("the data after the edit is not a slice of the event's: %d bytes", len(last))
	}
}

func TestNumberAtPrependAt(t *testing.T) {
	data := []byte(`{"n":12,"s":"x","empty":[],"spaced":[ ],"one":[ 1 ],"obj":{}}`)
	for _, tc := range []struct {
		name string
		edit func() (Splice, bool)
		want string // "" for no edit
	}{
		{"number", func() (Splice, bool) { return NumberAt(GetAlias(data, "n"), -3) }, `{"n":-3,`},
		{"missing number", func() (Splice, bool) { return NumberAt(GetAlias(data, "m"), 1) }, ""},
		{"number of a parsed copy", func() (Splice, bool) { return NumberAt(gjson.Parse(`7`), 1) }, ""},
		{"empty array", func() (Splice, bool) { return PrependAt(GetAlias(data, "empty"), []byte(`{"a":1}`)) }, `"empty":[{"a":1}]`},
		{"blank array", func() (Splice, bool) { return PrependAt(GetAlias(data, "spaced"), []byte(`0`)) }, `"spaced":[0 ]`},
		{"array with an element", func() (Splice, bool) { return PrependAt(GetAlias(data, "one"), []byte(`0`)) }, `"one":[0, 1 ]`},
		{"not an array", func() (Splice, bool) { return PrependAt(GetAlias(data, "obj"), []byte(`0`)) }, ""},
		{"missing array", func() (Splice, bool) { return PrependAt(GetAlias(data, "none"), []byte(`0`)) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, ok := tc.edit()
			if ok != (tc.want != "") {
				t.Fatalf("ok = %v", ok)
			}
			if !ok {
				return
			}
			if got := ApplySplices(data, []Splice{e}); !bytes.Contains(got, []byte(tc.want)) {
				t.Fatalf("got %s, want it to hold %s", got, tc.want)
			}
		})
	}
}

// PrependAt's edit to a non-empty array does not write into the element's backing array.
func TestPrependAtLeavesElemAlone(t *testing.T) {
	buf := []byte(`0XXXX`)
	elem := buf[:1]
	data := []byte(`{"a":[1]}`)
	e, _ := PrependAt(GetAlias(data, "a"), elem)
	if string(e.With) != "0," || string(buf) != "0XXXX" {
		t.Fatalf("with %q, elem's array now %q", e.With, buf)
	}
}

// GetAlias's and ParseAlias's results alias the data: no copy of it is made.
func TestAliasesShareData(t *testing.T) {
	data := []byte(`{"a":{"b":"text"}}`)
	r := GetAlias(data, "a")
	if unsafe.StringData(r.Raw) != &data[r.Index] {
		t.Error("GetAlias: Raw is a copy")
	}
	if p := ParseAlias(data); unsafe.StringData(p.Raw) != &data[0] {
		t.Error("ParseAlias: Raw is a copy")
	}
	if n := testing.AllocsPerRun(100, func() { _ = GetAlias(data, "a.b").Str }); n != 0 {
		t.Errorf("GetAlias allocates %.0f times", n)
	}
}

func TestApplySplicesNone(t *testing.T) {
	data := []byte(`{}`)
	if got := ApplySplices(data, nil); unsafe.SliceData(got) != unsafe.SliceData(data) {
		t.Error("no edits: not data itself")
	}
}

// bumpIndex is a rewrite that adds one to an event's index, spliced, and passes the rest.
func bumpIndex(scratch *[]byte) RewriteFunc {
	var edits []Splice
	return func(out [][]byte, ev *sse.Event, data []byte) [][]byte {
		if len(data) > 0 && data[0] == '{' {
			if idx := GetAlias(data, "index"); idx.Exists() {
				if e, ok := NumberAt(idx, idx.Int()+1); ok {
					edits = append(edits[:0], e)
					return SpliceEvent(out, scratch, ev, data, edits)
				}
			}
		}
		return append(out, ev.Raw)
	}
}

// The rewriter passes what rewrite returns, an event it leaves alone byte for byte; on a body no
// validating guard checked, the first event that is not JSON ends the stream with broken's events,
// while under a validating guard the guard ends it instead.
func TestEventRewriter(t *testing.T) {
	a := "event: x\r\ndata: {\"index\":0,\"t\":\"a\"}\r\n\r\n"
	b := ": keep-alive\n\n"
	c := "data: [DONE]\n\n"
	garbled := "data: {\"index\":\n\n"
	broken := "event: broken\ndata: {}\n\n"
	guardFail := "event: guard\ndata: {}\n\n"
	for _, tc := range []struct {
		name  string
		guard bool
		body  string
		want  string
	}{
		{"rewritten", false, a + b + c, "event: x\ndata: {\"index\":1,\"t\":\"a\"}\n\n" + b + c},
		{"not JSON, unguarded", false, a + garbled + a, "event: x\ndata: {\"index\":1,\"t\":\"a\"}\n\n" + broken},
		{"not JSON, guarded", true, a + garbled + a, "event: x\ndata: {\"index\":1,\"t\":\"a\"}\n\n" + guardFail},
		{"guarded, complete", true, a + c, "event: x\ndata: {\"index\":1,\"t\":\"a\"}\n\n" + c},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := streamResponse(context.Background(), io.NopCloser(iotest.OneByteReader(strings.NewReader(tc.body))))
			if tc.guard {
				Guard(resp, GuardOptions{Validate: true, Terminal: func(d []byte) bool { return string(d) == "[DONE]" },
					Fail: func(int, string) []byte { return []byte(guardFail) }})
			}
			var scratch []byte
			rw := NewEventRewriter(resp.Body, bumpIndex(&scratch), func() []byte { return []byte(broken) })
			out, err := io.ReadAll(iotest.HalfReader(rw))
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tc.want {
				t.Fatalf("got %q\nwant %q", out, tc.want)
			}
		})
	}
}

// FuzzSpliceEvent: for any event data and any edits that do not overlap, SpliceEvent renders
// what sse.Append renders of ApplySplices's data.
func FuzzSpliceEvent(f *testing.F) {
	f.Add([]byte(`{"a":1,"b":[2]}`), uint8(3), uint8(4), []byte("99"), uint8(9), []byte("0,"))
	f.Add([]byte("{\"a\":\n1}"), uint8(0), uint8(1), []byte("{ "), uint8(8), []byte(" "))
	f.Fuzz(func(t *testing.T, data []byte, from, to uint8, with []byte, at uint8, ins []byte) {
		if len(data) == 0 || bytes.IndexByte(data, '\r') >= 0 || bytes.ContainsAny(with, "\r\n") || bytes.ContainsAny(ins, "\r\n") {
			return // an event's data never holds CR, an edit no line break (Splice)
		}
		lo, hi := min(int(from), len(data)), min(int(to), len(data))
		if lo > hi {
			lo, hi = hi, lo
		}
		p := min(int(at), len(data))
		if p > lo && p < hi {
			p = hi // inside the replaced range: the edits would overlap
		}
		edits := []Splice{{From: p, To: p, With: ins}, {From: lo, To: hi, With: with}}
		if p == lo {
			edits = edits[1:] // two edits at one offset have no defined order
		}
		ev := sse.Event{Name: "n"}
		got := spliced(&ev, data, append([]Splice(nil), edits...))
		ev.Data = ApplySplices(data, append([]Splice(nil), edits...))
		if want := sse.Append(nil, ev); !bytes.Equal(got, want) {
			t.Fatalf("got %q, sse.Append renders %q", got, want)
		}
	})
}

// BenchmarkGuardedRewrite measures the relay of a rewritten turn without a dialect: a validating
// guard and a rewriter over it that splices a new index into every event.
func BenchmarkGuardedRewrite(b *testing.B) {
	var stream []byte
	for i := range 256 {
		stream = sse.AppendEvent(stream, "delta", []byte(`{"type":"delta","index":`+strings.Repeat("1", 1+i%3)+`,"delta":{"text":"token token "}}`))
	}
	stream = sse.AppendEvent(stream, "", []byte("[DONE]"))
	terminal := func(d []byte) bool { return string(d) == "[DONE]" }
	fail := func(int, string) []byte { return nil }
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		resp := streamResponse(context.Background(), io.NopCloser(bytes.NewReader(stream)))
		Guard(resp, GuardOptions{Validate: true, Terminal: terminal, Fail: fail})
		var scratch []byte
		rw := NewEventRewriter(resp.Body, bumpIndex(&scratch), func() []byte { return nil })
		if _, err := io.Copy(io.Discard, rw); err != nil {
			b.Fatal(err)
		}
	}
}
