package sse

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

type got struct {
	name, data, id string
	hasData, term  bool
	raw            string
}

func readAll(t *testing.T, r io.Reader, max int) ([]got, error) {
	t.Helper()
	rd := NewReaderSize(r, max)
	var out []got
	for {
		ev, err := rd.Next()
		if len(ev.Raw) > 0 {
			out = append(out, got{ev.Name, string(ev.Data), ev.ID, ev.HasData(), ev.Terminated, string(ev.Raw)})
		}
		if err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
	}
}

var readerCases = []struct {
	name string
	in   string
	want []got
}{
	{"LF", "event: a\ndata: {\"x\":1}\n\n", []got{{"a", `{"x":1}`, "", true, true, "event: a\ndata: {\"x\":1}\n\n"}}},
	{"CRLF", "event: a\r\ndata: 1\r\n\r\n", []got{{"a", "1", "", true, true, "event: a\r\ndata: 1\r\n\r\n"}}},
	{"lone CR", "event: a\rdata: 1\r\r", []got{{"a", "1", "", true, true, "event: a\rdata: 1\r\r"}}},
	{"multi-line data", "data: a\ndata: b\ndata:\n\n", []got{{"", "a\nb\n", "", true, true, "data: a\ndata: b\ndata:\n\n"}}},
	{"no space after colon", "data:x\n\n", []got{{"", "x", "", true, true, "data:x\n\n"}}},
	{"only one space stripped", "data:  x\n\n", []got{{"", " x", "", true, true, "data:  x\n\n"}}},
	{"comment is an event without data", ": keep-alive\n\n", []got{{"", "", "", false, true, ": keep-alive\n\n"}}},
	{"id", "id: 7\ndata: x\n\n", []got{{"", "x", "7", true, true, "id: 7\ndata: x\n\n"}}},
	{"leading blank lines open the next Raw", "\n\ndata: x\n\n", []got{{"", "x", "", true, true, "\n\ndata: x\n\n"}}},
	{"blank lines between events", "data: 1\n\n\r\ndata: 2\n\n\n", []got{{"", "1", "", true, true, "data: 1\n\n"}, {"", "2", "", true, true, "\r\ndata: 2\n\n"}, {"", "", "", false, false, "\n"}}},
	{"empty data first", "data:\n\n", []got{{"", "", "", true, true, "data:\n\n"}}},
	{"CRLF multi-line data", "event: a\r\ndata: {\"x\":\r\ndata: 1}\r\n\r\n", []got{{"a", "{\"x\":\n1}", "", true, true, "event: a\r\ndata: {\"x\":\r\ndata: 1}\r\n\r\n"}}},
	{"BOM", "\xef\xbb\xbfdata: x\n\n", []got{{"", "x", "", true, true, "\xef\xbb\xbfdata: x\n\n"}}},
	{"cut mid-event", "data: a\n\ndata: {\"trunc", []got{{"", "a", "", true, true, "data: a\n\n"}, {"", `{"trunc`, "", true, false, `data: {"trunc`}}},
	{"two events", "data: 1\n\ndata: 2\n\n", []got{{"", "1", "", true, true, "data: 1\n\n"}, {"", "2", "", true, true, "data: 2\n\n"}}},
}

func TestReader(t *testing.T) {
	for _, c := range readerCases {
		for _, mode := range []string{"whole", "byte-by-byte"} {
			t.Run(c.name+"/"+mode, func(t *testing.T) {
				var r io.Reader = strings.NewReader(c.in)
				if mode != "whole" {
					r = iotest.OneByteReader(r)
				}
				evs, err := readAll(t, r, DefaultMaxEvent)
				if err != nil {
					t.Fatal(err)
				}
				if len(evs) != len(c.want) {
					t.Fatalf("%d events, want %d: %+v", len(evs), len(c.want), evs)
				}
				for i := range evs {
					if evs[i] != c.want[i] {
						t.Errorf("event %d = %+v, want %+v", i, evs[i], c.want[i])
					}
				}
			})
		}
	}
}

func TestReaderLongLineAndCap(t *testing.T) {
	long := strings.Repeat("x", 200<<10) // longer than the read buffer
	evs, err := readAll(t, strings.NewReader("data: "+long+"\n\n"), DefaultMaxEvent)
	if err != nil || len(evs) != 1 || evs[0].data != long {
		t.Fatalf("long line: %d events, err %v", len(evs), err)
	}
	_, err = readAll(t, strings.NewReader("data: "+long+"\n\n"), 64<<10)
	if !errors.Is(err, ErrEventTooLong) {
		t.Fatalf("over the cap: err = %v, want ErrEventTooLong", err)
	}
	// Many short lines in one event count towards the cap too.
	_, err = readAll(t, strings.NewReader(strings.Repeat("data: x\n", 20000)), 64<<10)
	if !errors.Is(err, ErrEventTooLong) {
		t.Fatalf("many lines over the cap: err = %v", err)
	}
}

// A stream of lone CRs is linear to read (a naive unread-and-rebuffer approach is not).
func TestReaderManyCRs(t *testing.T) {
	in := strings.Repeat("data: x\r\r", 100000)
	evs, err := readAll(t, strings.NewReader(in), DefaultMaxEvent)
	if err != nil || len(evs) != 100000 {
		t.Fatalf("%d events, err %v", len(evs), err)
	}
}

func TestReaderPassesErrors(t *testing.T) {
	boom := errors.New("reset")
	r := io.MultiReader(strings.NewReader("data: 1\n\ndata: 2"), iotest.ErrReader(boom))
	evs, err := readAll(t, r, DefaultMaxEvent)
	if !errors.Is(err, boom) || len(evs) != 2 || evs[1].term {
		t.Fatalf("events %+v, err %v", evs, err)
	}
}

func TestAppendEventRoundTrip(t *testing.T) {
	for _, data := range []string{`{"a":1}`, "line1\nline2", "", "trailing\n"} {
		b := AppendEvent(nil, "message_delta", []byte(data))
		evs, err := readAll(t, bytes.NewReader(b), DefaultMaxEvent)
		if err != nil || len(evs) != 1 || evs[0].data != data || evs[0].name != "message_delta" {
			t.Errorf("round trip of %q: %+v %v", data, evs, err)
		}
	}
	if got := string(AppendComment(nil, "ping")); got != ": ping\n\n" {
		t.Errorf("comment = %q", got)
	}
}

func FuzzReader(f *testing.F) {
	for _, s := range []string{"data: 1\n\n", "event: a\r\ndata: b\r\n\r\n", "data: a\rdata: b\r\r", ":\n\n", "data: {\"x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rd := NewReaderSize(bytes.NewReader(b), 4096)
		var all []byte
		var err error
		for err == nil {
			var ev Event
			ev, err = rd.Next()
			all = append(all, ev.Raw...)
		}
		// Up to the cap, the Raws are the stream.
		if err == io.EOF && !bytes.Equal(all, b) || !bytes.HasPrefix(b, all) {
			t.Fatalf("events hold %q of the stream %q (%v)", all, b, err)
		}
	})
}

func BenchmarkReader(b *testing.B) {
	var stream []byte
	for range 2000 {
		stream = AppendEvent(stream, "response.output_text.delta", []byte(`{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"hello ","sequence_number":12}`))
	}
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		rd := NewReader(bytes.NewReader(stream))
		for {
			if _, err := rd.Next(); err != nil {
				break
			}
		}
	}
}

// The Scanner sees the same events as the Reader, however the stream is split into writes.
func TestScannerAgreesWithReader(t *testing.T) {
	for _, c := range readerCases {
		for _, step := range []int{len(c.in) + 1, 1, 2, 3} {
			t.Run(c.name+"/"+strconv.Itoa(step), func(t *testing.T) {
				var evs []got
				sc := NewScanner(DefaultMaxEvent, func(ev *Event) {
					evs = append(evs, got{ev.Name, string(ev.Data), ev.ID, ev.HasData(), ev.Terminated, ""})
				})
				for in := c.in; len(in) > 0; {
					n := min(step, len(in))
					sc.Write([]byte(in[:n]))
					in = in[n:]
				}
				sc.Flush()
				var want []got
				for _, w := range c.want {
					if w.raw = ""; w.hasData || w.name != "" || w.id != "" || w.term {
						want = append(want, w)
					}
				}
				if len(evs) != len(want) {
					t.Fatalf("%d events, want %d: %+v", len(evs), len(want), evs)
				}
				for i := range evs {
					if evs[i] != want[i] {
						t.Errorf("event %d = %+v, want %+v", i, evs[i], want[i])
					}
				}
			})
		}
	}
}

// An event over the cap is skipped, and the events after it are seen as usual, however the long
// line is split.
func TestScannerSkipsOversized(t *testing.T) {
	in := "data: 1\n\ndata: " + strings.Repeat("x", 5000) + "\nid: 9\n\ndata: 2\n\n"
	for _, step := range []int{len(in), 1, 7, 4096} {
		var datas []string
		sc := NewScanner(1024, func(ev *Event) { datas = append(datas, string(ev.Data)+"/"+ev.ID) })
		for b := []byte(in); len(b) > 0; {
			n := min(step, len(b))
			sc.Write(b[:n])
			b = b[n:]
		}
		if strings.Join(datas, ",") != "1/,2/" {
			t.Errorf("step %d: events %q, want 1 and 2 only", step, datas)
		}
	}
}

func TestAppend(t *testing.T) {
	cases := []struct {
		ev   Event
		want string
	}{
		{Event{Name: "a", Data: []byte("x")}, "event: a\ndata: x\n\n"},
		{Event{Name: "a", ID: "7", Data: []byte("x\ny")}, "id: 7\nevent: a\ndata: x\ndata: y\n\n"},
		{Event{Data: []byte{}}, "data: \n\n"},
		{Event{Name: "a"}, "event: a\n\n"},
	}
	for _, c := range cases {
		if got := string(Append(nil, c.ev)); got != c.want {
			t.Errorf("Append(%+v) = %q, want %q", c.ev, got, c.want)
		}
	}
}

// An event name costs no allocation once the stream has used it.
func TestReaderNameAllocs(t *testing.T) {
	stream := bytes.Repeat([]byte("event: response.output_text.delta\ndata: {}\n\n"), 100)
	rd := NewReader(bytes.NewReader(stream))
	rd.Next()
	allocs := testing.AllocsPerRun(50, func() {
		if ev, err := rd.Next(); err != nil || ev.Name != "response.output_text.delta" {
			t.Fatalf("%+v %v", ev, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per event", allocs)
	}
}

// The Scanner costs no allocation per event once its buffers have grown.
func TestScannerAllocs(t *testing.T) {
	ev := []byte("event: response.output_text.delta\ndata: {\"delta\":\"x\"}\n\n")
	n := 0
	sc := NewScanner(DefaultMaxEvent, func(*Event) { n++ })
	sc.Write(ev)
	if allocs := testing.AllocsPerRun(50, func() { sc.Write(ev) }); allocs != 0 || n != 52 { // AllocsPerRun runs once more to warm up
		t.Errorf("%v allocations per event, %d events", allocs, n)
	}
}

func TestIsStream(t *testing.T) {
	for _, tc := range []struct {
		ct   string
		want bool
	}{
		{"text/event-stream", true},
		{"text/event-stream; charset=utf-8", true},
		{"text/event-stream;charset=UTF-8", true},
		{"Text/Event-Stream", true}, // media types are case-insensitive (RFC 9110 §8.3.1)
		{"TEXT/EVENT-STREAM; Charset=utf-8", true},
		{" text/event-stream ", true},
		{"text/event-stream ; charset=utf-8", true},
		{"\ttext/event-stream;\tcharset=utf-8", true},
		{"text/event-stream; charset", true}, // a malformed parameter does not change the type
		{"text/event-stream;;", true},
		{"text/event-stream; charset=\"utf-8", true},
		{"", false},
		{"application/json", false},
		{"application/json; charset=utf-8", false},
		{"text/plain", false},
		{"text/event-streaming", false},
		{"text/event-stream-v2", false},
		{"text/event", false},
		{"event-stream", false},
		{"application/text/event-stream", false},
		{"text/event-stream, application/json", false}, // not one media type
	} {
		if got := IsStream(tc.ct); got != tc.want {
			t.Errorf("IsStream(%q) = %v, want %v", tc.ct, got, tc.want)
		}
	}
}

// FuzzIsStream holds IsStream's shortcuts (the common spellings, the early reject) to what
// mime.ParseMediaType alone decides.
func FuzzIsStream(f *testing.F) {
	for _, s := range []string{"text/event-stream", "text/event-stream; charset=utf-8", " Text/Event-Stream;x", "\vtext/event-stream", "application/json", "text/event-streamx", "ſtext/event-stream"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		mt, _, err := mime.ParseMediaType(ct)
		want := (err == nil || errors.Is(err, mime.ErrInvalidMediaParameter)) && mt == MediaType
		if got := IsStream(ct); got != want {
			t.Errorf("IsStream(%q) = %v, ParseMediaType says %v", ct, got, want)
		}
	})
}
