package chat

import (
	"bytes"
	"testing"

	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn"
	"github.com/compactd/compactd/internal/turn/turntest"
)

// Fuzz targets for what the Chat adapter does to bytes it does not control: the client's body
// (Parse, the memo's view of it) and the upstream's chunks in a recall round. .ci/fuzz.sh runs
// every target for a bounded time.

// FuzzParse: a body is refused or gives a turn whose body is the client's bytes; the memo's
// compaction applied to any prefix renders a body that is JSON.
func FuzzParse(f *testing.F) {
	f.Add(body(history()[:4]), uint8(2), uint8(1))
	f.Add([]byte(`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","function":{"name":"f","arguments":{}}}]},{"role":"tool","content":null}]}`), uint8(2), uint8(0))
	f.Add([]byte(`{"messages":[]}`), uint8(0), uint8(3))
	h := turntest.NewHarness(f, Adapter{})
	f.Fuzz(func(t *testing.T, b []byte, n, tail uint8) {
		tr, fl := Adapter{}.Parse(h.Env, b)
		if fl != nil {
			return
		}
		ct := tr.(*Turn)
		if !sameSlice(ct.Body(h.Env), b) {
			t.Fatal("Body() of an unchanged turn is not the client's bytes")
		}
		k := int(n) % (len(ct.msgs) + 1)
		ct.Remember(h.Env, &engine.Memory{Items: k, Opened: &engine.Opened{ID: "cmp_1",
			Payload: &compact.Payload{Summary: "S", Tail: int(tail)}}})
		if out := ct.Body(h.Env); jsonx.Valid(out) != nil {
			t.Fatalf("Body() after Remember is not JSON: %q", out)
		}
	})
}

// FuzzRecallStream feeds arbitrary chunks (valid JSON, as the loop hands them on) to a streamed
// round: reading, rendering and closing it must not panic, and what compactd writes is SSE
// whose every data is JSON or [DONE].
func FuzzRecallStream(f *testing.F) {
	f.Add([]byte(chunk("c1", `{"role":"assistant","content":""}`, "")+"\n"+
		chunk("c1", `{"tool_calls":[{"index":0,"id":"call_r","function":{"name":"compactd_recall","arguments":"{}"}}]}`, "")+"\n"+
		chunk("c1", `{}`, "tool_calls")+"\n"+`{"id":"c1","choices":[],"usage":{"total_tokens":3}}`), true)
	f.Add([]byte(`{"id":1,"choices":[{"delta":{"tool_calls":[{"index":-1},{"index":0,"function":{"name":7}}]},"finish_reason":"stop","usage":[]}]}`), false)
	f.Add([]byte(`{"usage":{},"choices":{}}`+"\n"+`{"error":null}`), true)
	f.Fuzz(func(t *testing.T, data []byte, usage bool) {
		opts := ``
		if usage {
			opts = `,"stream_options":{"include_usage":true}`
		}
		h := turntest.NewHarness(t, Adapter{})
		tr := parse(t, h.Env, []byte(`{"model":"m","stream":true`+opts+`,"messages":[{"role":"user","content":"q"}]}`))
		d := tr.Recall(h.Env, recallTool).(*recall)
		var out [][]byte
		for _, line := range bytes.Split(data, []byte("\n")) {
			if jsonx.Valid(line) != nil {
				continue
			}
			e := d.Event("", line)
			if e.Data != nil {
				out = d.Render(out, "", e.Data, nil)
			}
		}
		items, why := d.StreamRound()
		if why != "" {
			return
		}
		var visible [][]byte
		for _, it := range items {
			if it.Call == nil {
				visible = append(visible, it.Raw)
			}
		}
		// The loop closes the stream after a round (the last one), or answers it and asks again.
		out = append(out, d.FinalStream(visible), d.ErrorEvents(turn.UpstreamInterrupted(), 0, nil))
		d.Answer(items, make([]string, len(items)))
		if jsonx.Valid(d.Request(false)) != nil {
			t.Fatal("the next round's request is not JSON")
		}
		rd := sse.NewReader(bytes.NewReader(bytes.Join(out, nil)))
		for {
			ev, err := rd.Next()
			if err != nil {
				break
			}
			if dd := bytes.TrimSpace(ev.Data); !bytes.Equal(dd, doneMarker) && jsonx.Valid(dd) != nil {
				t.Fatalf("compactd wrote data that is not JSON: %q in %q", dd, bytes.Join(out, nil))
			}
		}
	})
}
