package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/compactd/compactd/internal/fixtures"
)

func TestParseResponsesRequest(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		wantErr    bool
		types      []string
		compaction int
		trigger    int
		model      string
		stream     bool
	}{
		{name: "not json", body: `{"input":`, wantErr: true},
		{name: "array body", body: `[1]`, wantErr: true},
		{name: "input not array", body: `{"input":5}`, wantErr: true},
		{name: "item not object", body: `{"input":[1]}`, wantErr: true},
		{name: "duplicate input", body: `{"input":[{"role":"user","content":"a"}],"input":[{"role":"user","content":"b"}]}`, wantErr: true},
		{name: "duplicate context_management", body: `{"context_management":[],"input":"x","context_management":null}`, wantErr: true},
		{name: "string input", body: `{"model":"m","input":"hi"}`, types: []string{"message"}, compaction: -1, trigger: -1, model: "m"},
		{name: "no input", body: `{"model":"m","stream":true}`, compaction: -1, trigger: -1, model: "m", stream: true},
		{
			name:  "items",
			body:  `{"input":[{"role":"user","content":"a"},{"type":"compaction","encrypted_content":"x"},{"type":"compaction_summary","encrypted_content":"y"},{"type":"message","role":"user","content":"b"},{"type":"compaction_trigger"}]}`,
			types: []string{"message", "compaction", "compaction_summary", "message", "compaction_trigger"}, compaction: 2, trigger: 4,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseResponsesRequest([]byte(tt.body))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			var types []string
			for _, it := range r.Items {
				types = append(types, it.Type)
				if !json.Valid(it.Raw) {
					t.Errorf("item raw %q is not JSON", it.Raw)
				}
			}
			if !reflect.DeepEqual(types, tt.types) {
				t.Errorf("types = %v, want %v", types, tt.types)
			}
			if r.Compaction != tt.compaction || r.Trigger != tt.trigger {
				t.Errorf("compaction, trigger = %d, %d; want %d, %d", r.Compaction, r.Trigger, tt.compaction, tt.trigger)
			}
			if r.Model != tt.model || r.Stream != tt.stream {
				t.Errorf("model, stream = %q, %v", r.Model, r.Stream)
			}
		})
	}
}

func TestWithInputDropsContextManagement(t *testing.T) {
	cm := `[{"type":"compaction","compact_threshold":1000}]`
	tests := []struct{ name, body, want string }{
		{"first", `{"context_management":` + cm + `, "input":[{"a":1}],"z":true}`, `{ "input":[{"b":2}],"z":true}`},
		{"middle", `{"model":"m","context_management":` + cm + `,"input":[{"a":1}]}`, `{"model":"m","input":[{"b":2}]}`},
		{"last", `{"input":[{"a":1}], "context_management" : ` + cm + `}`, `{"input":[{"b":2}]}`},
		{"before input with spaces", "{\n \"model\": \"m\",\n \"context_management\": " + cm + ",\n \"input\": [{\"a\":1}]\n}", "{\n \"model\": \"m\",\n \"input\": [{\"b\":2}]\n}"},
		{"absent", `{"model":"m","input":[{"a":1}],"unknown_future_field":{"x":[1,2]}}`, `{"model":"m","input":[{"b":2}],"unknown_future_field":{"x":[1,2]}}`},
		{"no input member", `{"model":"m","context_management":` + cm + `}`, `{"input":[{"b":2}],"model":"m"}`},
		{"only cm", `{"context_management":` + cm + `}`, `{"input":[{"b":2}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseResponsesRequest([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			got := string(r.WithInput([][]byte{[]byte(`{"b":2}`)}, true))
			if got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if !json.Valid([]byte(got)) {
				t.Errorf("result is not valid JSON")
			}
		})
	}
}

// The Codex captures carry every field Codex sends; splicing the same items back must reproduce
// the body byte for byte, which proves nothing is re-encoded on the way through.
func TestCodexFixturesRoundTrip(t *testing.T) {
	names, captures := fixtures.CodexAll()
	for i, raw := range captures {
		t.Run(names[i], func(t *testing.T) {
			var capture struct {
				Body json.RawMessage `json:"body"`
			}
			if err := json.Unmarshal(raw, &capture); err != nil {
				t.Fatal(err)
			}
			var body bytes.Buffer // the captures are indented; splicing joins items compactly
			if err := json.Compact(&body, capture.Body); err != nil {
				t.Fatal(err)
			}
			r, err := ParseResponsesRequest(body.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Items) == 0 || r.Model == "" || !r.Stream {
				t.Fatalf("skim missed fields: %d items, model %q, stream %v", len(r.Items), r.Model, r.Stream)
			}
			if got := r.WithInput(Raws[[]byte](r.Items), true); string(got) != body.String() {
				t.Errorf("round trip changed the body")
			}
		})
	}
}

func TestBuilders(t *testing.T) {
	msg := UserMessage("a <b> & \"c\"\n")
	var m struct {
		Type, Role string
		Content    []struct{ Type, Text string }
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		t.Fatal(err)
	}
	if m.Type != "message" || m.Role != "user" || m.Content[0].Text != "a <b> & \"c\"\n" {
		t.Errorf("UserMessage = %s", msg)
	}
	item := CompactionItem("cmp_1", "blob")
	if string(item) != `{"id":"cmp_1","type":"compaction","encrypted_content":"blob"}` {
		t.Errorf("CompactionItem = %s", item)
	}
}
