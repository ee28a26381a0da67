package compact

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/compactd/compactd/internal/api"
)

func TestPartition(t *testing.T) {
	dev := api.Item{Type: "message", Role: "developer"}
	sys := api.Item{Type: "message", Role: "system"}
	user := func(n int) api.Item {
		return api.Item{Type: "message", Role: "user", Raw: []byte(strings.Repeat("x", n))}
	}
	asst := api.Item{Type: "message", Role: "assistant", Raw: []byte("xxxxxxxxxx")}
	call := api.Item{Type: "function_call", Raw: []byte("xxxxxxxxxx")}
	count := func(it api.Item) int { return len(it.Raw) } // token count = byte length, for clarity

	cases := []struct {
		name   string
		items  []api.Item
		budget int
		want   Window
	}{
		{"no user messages", []api.Item{dev, asst, call}, 100,
			Window{Instructions: []int{0}, Summarise: []int{1, 2}, Truncated: -1}},
		{"empty", nil, 100, Window{Truncated: -1}},
		{"all fit", []api.Item{dev, user(10), asst, user(20), call}, 100,
			Window{Instructions: []int{0}, Retained: []int{1, 3}, Summarise: []int{1, 2, 3, 4}, Truncated: -1}},
		{"budget exact fit", []api.Item{user(30), asst, user(40), user(60)}, 100,
			Window{Retained: []int{2, 3}, Summarise: []int{0, 1, 2, 3}, Truncated: -1}},
		{"stops at first misfit even if an older one fits", []api.Item{user(1), user(90), user(20)}, 100,
			Window{Retained: []int{2}, Summarise: []int{0, 1, 2}, Truncated: -1}},
		{"newest too big is truncated", []api.Item{user(10), asst, user(500)}, 100,
			Window{Retained: []int{2}, Summarise: []int{0, 1, 2}, Truncated: 2}},
		{"instructions anywhere never summarised", []api.Item{sys, user(10), dev, asst}, 100,
			Window{Instructions: []int{0, 2}, Retained: []int{1}, Summarise: []int{1, 3}, Truncated: -1}},
		{"zero budget retains nothing", []api.Item{user(10)}, 0,
			Window{Summarise: []int{0}, Truncated: -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Partition(tc.items, tc.budget, count)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Partition = %+v\nwant        %+v", got, tc.want)
			}
			if again := Partition(tc.items, tc.budget, count); !reflect.DeepEqual(again, got) {
				t.Errorf("not deterministic: %+v then %+v", got, again)
			}
		})
	}
}

func TestPartitionWithCounter(t *testing.T) {
	c := NewCounter(CounterOptions{})
	items := []api.Item{
		{Type: "message", Role: "developer", Raw: []byte(`{"type":"message","role":"developer","content":"be terse"}`)},
		userMsg("first question"), userMsg(strings.Repeat("second question ", 10)),
	}
	w := Partition(items, c.Count(items[2])+c.Count(items[1]), c.Count)
	if !reflect.DeepEqual(w.Retained, []int{1, 2}) || w.Truncated != -1 {
		t.Errorf("window %+v", w)
	}
	w = Partition(items, c.Count(items[2]), c.Count)
	if !reflect.DeepEqual(w.Retained, []int{2}) {
		t.Errorf("window %+v", w)
	}
}

func TestTruncateMiddle(t *testing.T) {
	c := NewCounter(CounterOptions{})
	text := "HEAD of the message. " + strings.Repeat("Middle filler sentence about the parser, ünïcödé — 日本語. ", 300) + "TAIL asks the question?"
	cases := []struct {
		name string
		s    string
		max  int
	}{
		{"fits unchanged", "short text", 100},
		{"cut to 200", text, 200},
		{"cut to 50", text, 50},
		{"cut to 1000", text, 1000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := TruncateMiddle(tc.s, tc.max, c)
			if c.Text(tc.s) <= tc.max {
				if out != tc.s {
					t.Errorf("changed a fitting string")
				}
				return
			}
			if !utf8.ValidString(out) {
				t.Error("cut inside a UTF-8 sequence")
			}
			if !strings.HasPrefix(out, "HEAD") || !strings.HasSuffix(out, "question?") {
				t.Errorf("lost head or tail: %.40q … %.40q", out, out[max(0, len(out)-40):])
			}
			if !strings.Contains(out, " tokens elided]…\n") {
				t.Error("no elision marker")
			}
			if n := c.Text(out); n > tc.max+2 {
				t.Errorf("result has %d tokens, budget %d", n, tc.max)
			}
			if again := TruncateMiddle(tc.s, tc.max, c); again != out {
				t.Error("not deterministic")
			}
		})
	}
	if out := TruncateMiddle(text, 3, c); !strings.Contains(out, "elided") || len(out) > 64 {
		t.Errorf("tiny budget: %q", out)
	}
}
