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

// TestIsContext pins what a compaction keeps verbatim like instructions (context) and what it
// summarises (conversation), item type by item type.
func TestIsContext(t *testing.T) {
	cases := []struct {
		name string
		it   api.Item
		want bool
	}{
		{"developer message", api.Item{Type: "message", Role: "developer"}, true},
		{"system message", api.Item{Type: "message", Role: "system"}, true},
		{"user message", api.Item{Type: "message", Role: "user"}, false},
		{"assistant message", api.Item{Type: "message", Role: "assistant"}, false},
		{"handoff message", api.Item{Type: "message", Role: "user", Handoff: true}, false},
		{"additional_tools", api.Item{Type: "additional_tools"}, true},
		{"configuration_update", api.Item{Type: "configuration_update"}, true},
		{"mcp_list_tools", api.Item{Type: "mcp_list_tools"}, true},
		{"item_reference", api.Item{Type: "item_reference"}, true},
		{"unknown future type", api.Item{Type: "hologram_call_v9"}, true},
		{"no type at all", api.Item{}, true},
		{"function_call", api.Item{Type: "function_call"}, false},
		{"function_call_output", api.Item{Type: "function_call_output"}, false},
		{"custom_tool_call_output", api.Item{Type: "custom_tool_call_output"}, false},
		{"local_shell_call", api.Item{Type: "local_shell_call"}, false},
		{"web_search_call", api.Item{Type: "web_search_call"}, false},
		{"mcp_call", api.Item{Type: "mcp_call"}, false},
		{"tool_search_output", api.Item{Type: "tool_search_output"}, false},
		{"reasoning", api.Item{Type: "reasoning"}, false},
		{"earlier compaction, superseded", api.Item{Type: "compaction"}, false},
		{"earlier compaction_summary, superseded", api.Item{Type: "compaction_summary"}, false},
		{"Messages server tool result", api.Item{Type: "web_search_tool_result", InMessage: true}, false},
		{"Messages unknown block", api.Item{Type: "hologram_block", InMessage: true}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsContext(tc.it); got != tc.want {
				t.Errorf("IsContext(%+v) = %v, want %v", tc.it, got, tc.want)
			}
		})
	}
}

// TestPartitionKeepsContextItems: an additional_tools item (and any item that is not
// conversation) is kept in place like instructions and never summarised, wherever it sits.
func TestPartitionKeepsContextItems(t *testing.T) {
	count := func(it api.Item) int { return len(it.Raw) }
	dev := api.Item{Type: "message", Role: "developer"}
	tools := api.Item{Type: "additional_tools", Raw: []byte(`{"type":"additional_tools","role":"developer","tools":[]}`)}
	other := api.Item{Type: "configuration_update"}
	user := api.Item{Type: "message", Role: "user", Raw: []byte("0123456789")}
	asst := api.Item{Type: "message", Role: "assistant"}
	call := api.Item{Type: "function_call"}
	cases := []struct {
		name  string
		items []api.Item
		want  Window
	}{
		{"after the developer message", []api.Item{dev, tools, user, asst, call},
			Window{Instructions: []int{0, 1}, Retained: []int{2}, Summarise: []int{2, 3, 4}, Truncated: -1}},
		{"mid-conversation, in order", []api.Item{dev, user, asst, tools, user, other, call},
			Window{Instructions: []int{0, 3, 5}, Retained: []int{1, 4}, Summarise: []int{1, 2, 4, 6}, Truncated: -1}},
		{"alone", []api.Item{tools},
			Window{Instructions: []int{0}, Truncated: -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Partition(tc.items, 100, count); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Partition = %+v\nwant        %+v", got, tc.want)
			}
		})
	}
}
