package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// rebuildOracle is what the recall turn did before Rebuild: WithInput, then sjson appending the
// tool (a second parse and copy of the whole body).
func rebuildOracle(r *ResponsesRequest, items [][]byte, drop bool, tool []byte) []byte {
	out := r.WithInput(items, drop)
	if tool != nil {
		out, _ = sjson.SetRawBytes(out, "tools.-1", tool)
	}
	return out
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// TestRebuildSplicesToolOnce: the input, the context_management cut and the appended tool in one
// copy give the same document as WithInput followed by sjson, wherever tools, input and
// context_management sit, with tools empty, spaced, absent or null.
func TestRebuildSplicesToolOnce(t *testing.T) {
	tool := []byte(`{"type":"function","name":"recall"}`)
	item := `{"type":"message","role":"user","content":"hi"}`
	cm := `"context_management":[{"type":"compaction","compact_threshold":9}]`
	bodies := []string{
		`{"model":"m","input":[` + item + `],"tools":[{"type":"function","name":"a"}]}`,
		`{"tools":[{"type":"function","name":"a"}],"input":[` + item + `],` + cm + `}`,
		`{` + cm + `,"tools":[],"input":[` + item + `]}`,
		`{"input":[` + item + `],"tools": [ {"type":"web_search"} ] ,` + cm + `,"stream":true}`,
		`{"input":[` + item + `],"tools":[ ]}`,
		`{"input":[` + item + `]}`,
		`{"input":[` + item + `],"tools":null}`,
		`{"model":"m","tools":[{"type":"x"}]}`,
		`{"tools":[{"type":"x"}],` + cm + `}`,
	}
	for _, b := range bodies {
		r, err := ParseResponsesRequest([]byte(b))
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		items := [][]byte{}
		if len(r.Items) > 0 {
			items = [][]byte{r.Items[0].Raw, []byte(`{"type":"message","role":"user","content":"more"}`)}
		}
		for _, drop := range []bool{false, true} {
			for _, tl := range [][]byte{nil, tool} {
				got, want := r.Rebuild(items, drop, tl), rebuildOracle(r, items, drop, tl)
				if tl != nil && string(r.Tools) == "null" {
					// sjson made {"-1":tool} of a null; the upstream needs a list.
					want, _ = sjson.SetRawBytes(want, "tools", append(append([]byte("["), tl...), ']'))
				}
				if !json.Valid(got) || !jsonEqual(got, want) {
					t.Errorf("Rebuild(%s, drop=%v, tool=%s)\n got %s\nwant %s", b, drop, tl, got, want)
				}
				if tl != nil && gjson.GetBytes(got, "tools.#").Int() < 1 {
					t.Errorf("Rebuild(%s): no tool in %s", b, got)
				}
				if tl == nil && !bytes.Equal(got, r.WithInput(items, drop)) {
					t.Errorf("Rebuild without a tool differs from WithInput")
				}
			}
		}
	}
}

// TestToolChoiceIsWhatGjsonReads: the skim's tool_choice is the value the recall turn used to look
// up with gjson (escaped keys decoded), nil when absent. (Two copies are refused:
// TestParseResponsesRequestRefusals.)
func TestToolChoiceIsWhatGjsonReads(t *testing.T) {
	for _, b := range []string{
		`{"input":[],"tool_choice":"auto"}`,
		`{"tool_choice":{"type":"function","name":"f"},"input":[]}`,
		`{"tool_ch\u006fice":"required"}`,
		`{"input":[]}`,
	} {
		r, err := ParseResponsesRequest([]byte(b))
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if want := gjson.Get(b, "tool_choice").Raw; string(r.ToolChoice) != want {
			t.Errorf("%s: ToolChoice %q, gjson reads %q", b, r.ToolChoice, want)
		}
	}
}
