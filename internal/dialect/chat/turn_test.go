package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/turn"
	"github.com/compactd/compactd/internal/turn/turntest"
)

func parse(t *testing.T, env *turn.Env, b []byte) *Turn {
	t.Helper()
	tr, f := Adapter{}.Parse(env, b)
	if f != nil {
		t.Fatalf("Parse(%.80s): %v", b, f)
	}
	return tr.(*Turn)
}

func sameSlice(a, b []byte) bool { return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) }

// A body compactd cannot read safely is a 400 in OpenAI's terms, naming what is wrong, and no
// turn: nothing of it reaches the upstream.
func TestParseRefuses(t *testing.T) {
	deep := `{"model":"m","messages":[],"x":` + strings.Repeat("[", jsonx.MaxDepth+1) + strings.Repeat("]", jsonx.MaxDepth+1) + `}`
	for _, tc := range []struct {
		name, body, param, code string
	}{
		{"not JSON", `{"model":`, "", fault.CodeInvalidJSON},
		{"not an object", `[{"role":"user","content":"hi"}]`, "", ""},
		{"messages not an array", `{"model":"m","messages":{"role":"user"}}`, "messages", fault.CodeInvalidValue},
		{"a message not an object", `{"model":"m","messages":["hi"]}`, "messages[0]", fault.CodeInvalidValue},
		{"content a number", `{"model":"m","messages":[{"role":"user","content":1}]}`, "messages[0].content", fault.CodeInvalidValue},
		{"tool_calls not a list", `{"model":"m","messages":[{"role":"assistant","tool_calls":{}}]}`, "messages[0].tool_calls", fault.CodeInvalidValue},
		{"messages twice", `{"model":"m","messages":[],"messages":[{"role":"user","content":"hi"}]}`, "messages", fault.CodeInvalidValue},
		{"tool_choice twice in an object", `{"model":"m","messages":[],"tool_choice":{"type":"function","type":"none"}}`, "tool_choice.type", fault.CodeInvalidValue},
		{"too deep", deep, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := turntest.NewHarness(t, Adapter{})
			tr, f := Adapter{}.Parse(h.Env, []byte(tc.body))
			if f == nil || tr != nil {
				t.Fatalf("Parse = %v, %v; want a fault and no turn", tr, f)
			}
			if tc.param != "" && f.Param != tc.param {
				t.Errorf("param = %q, want %q (%s)", f.Param, tc.param, f.Message)
			}
			if tc.code != "" && f.Code != tc.code {
				t.Errorf("code = %q, want %q", f.Code, tc.code)
			}
			env := Adapter{}.Fault(f)
			rec := gjson.ParseBytes(env.Body())
			if rec.Get("error.type").Str != "invalid_request_error" || rec.Get("error.message").Str == "" {
				t.Errorf("envelope = %s, want OpenAI's invalid_request_error", env.Body())
			}
		})
	}
}

// Chat speaks no compaction protocol: no threshold of the client's, and a turn compactd may
// always compact (transparently); without a policy it needs nothing of compactd at all.
func TestThresholdAndPassThrough(t *testing.T) {
	h := turntest.NewHarness(t, Adapter{})
	tr := parse(t, h.Env, body(history()[:2]))
	if th, speaks, ok := tr.Threshold(); th != (compact.Threshold{}) || speaks || !ok {
		t.Errorf("Threshold() = %+v, %v, %v; want none, not speaking, ok", th, speaks, ok)
	}
	if !tr.PassThrough(h.Env, false) || tr.PassThrough(h.Env, true) {
		t.Error("PassThrough must be exactly: no policy on the route")
	}
	if tr.Model() != "gpt-test" || tr.Prev() != nil || tr.Stream().Streamed {
		t.Errorf("Model %q, Prev %v, Streamed %v", tr.Model(), tr.Prev(), tr.Stream().Streamed)
	}
	if s := parse(t, h.Env, []byte(`{"model":"m","stream":true,"messages":[]}`)); !s.Stream().Streamed {
		t.Error("a streamed request's Stream().Streamed is false")
	}
}

// Below the threshold (counted, speculated on, nothing applied) the upstream gets the client's
// own bytes, not a copy, and the answer passes as the upstream sent it (no rewriter).
func TestBodyUntouched(t *testing.T) {
	for _, b := range [][]byte{
		body(history()[:2]),
		body(history()),
		[]byte(`{"model":"m"}`), // no messages at all
		[]byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":[{"type":"text","text":"hi \u00e9"}],"name":"n"}]}`),
	} {
		h := turntest.NewHarness(t, Adapter{})
		tr := parse(t, h.Env, b)
		_ = tr.Tokens(h.Env, 100_000)
		_ = tr.Speculation(h.Env)
		if tr.Changed(h.Env) {
			t.Errorf("Changed() on %.60s", b)
		}
		if out := tr.Body(h.Env); !sameSlice(out, b) {
			t.Errorf("Body() is not the client's bytes: %.80s", out)
		}
		if tr.Rewriter() != nil {
			t.Errorf("a turn below the threshold has a rewriter")
		}
	}
}

// compactedBody compacts body(long) as the front does for a transparent turn and returns the
// body the upstream gets.
func compactedBody(t *testing.T, h *turntest.Harness, long []string) ([]byte, *engine.Compaction) {
	t.Helper()
	first := parse(t, h.Env, body(long))
	c := h.Compact(t, Adapter{}, first, true)
	if !first.Changed(h.Env) {
		t.Fatal("a compacted turn is not Changed")
	}
	return first.Body(h.Env), c
}

// The compacting turn's upstream body: the window (system prompt and user message, the client's
// bytes), one user message holding the handoff, nothing of the tool rounds; every other byte of
// the body as the client sent it.
func TestCompactedBody(t *testing.T) {
	h := turntest.NewHarness(t, Adapter{})
	long := history()
	got, c := compactedBody(t, h, long)
	want := `{ "model":"gpt-test", "x_unknown":{"a":[1,2]},"messages":[` + long[0] + `,` + long[1] + `,` +
		string(api.ChatUserMessage(c.Handoff)) + `] ,"temperature":0.5}`
	if string(got) != want {
		t.Fatalf("compacted body\n got %s\nwant %s", got, want)
	}
	if !strings.HasPrefix(c.Handoff, handoff.Prefix) {
		t.Errorf("handoff = %.80q", c.Handoff)
	}
}

// A client that resends its whole history gets the memo's compaction applied: the upstream
// sees the compacting turn's own messages, byte for byte, then the new message, so its prompt
// cache keeps hitting, and the turn chains to the compaction.
func TestRememberContinuesTheCompactingTurn(t *testing.T) {
	h := turntest.NewHarness(t, Adapter{})
	long := history()
	compacted, c := compactedBody(t, h, long)

	tr := parse(t, h.Env, body(next(long)))
	mem := h.Engine.Remembered(h.Env.Ctx, Adapter{}.Engine(), engine.Scope{Tenant: turntest.Tenant, Owner: "owner"}, api.Raws[json.RawMessage](tr.Units()))
	if mem == nil || mem.Opened == nil || mem.Items != len(long) {
		t.Fatalf("memo: %+v", mem)
	}
	tr.Remember(h.Env, mem)
	want := bytes.Replace(compacted, []byte("] ,\"temperature\""), []byte(","+newMessage+"] ,\"temperature\""), 1)
	if got := tr.Body(h.Env); !bytes.Equal(got, want) {
		t.Fatalf("after Remember\n got %s\nwant %s", got, want)
	}
	if !tr.Changed(h.Env) || tr.Prev() == nil || tr.Prev().ID != c.ID {
		t.Errorf("Changed %v, Prev %v; want the compaction %s", tr.Changed(h.Env), tr.Prev(), c.ID)
	}
	// Applied below the threshold the answer still passes untouched.
	if tr.Rewriter() != nil {
		t.Error("a turn with only the memo's compaction applied has a rewriter")
	}
	// The handoff is compactd's: marked, so a later compaction summarises it again.
	units := tr.Units()
	for i, u := range units {
		if isHandoff := i == 2; u.Handoff != isHandoff {
			t.Errorf("unit %d (%.40s) Handoff = %v", i, u.Raw, u.Handoff)
		}
	}
	// A compaction of the remembered view chains to it and is recorded against the client's
	// messages, not the shorter view.
	req := tr.Compaction(h.Env, 1, true)
	if req.Prev != tr.Prev() || req.Covers != len(long)+1 || len(req.Units) != len(units) || !req.Speculate || req.Retain != h.Env.Retain {
		t.Errorf("Compaction: Prev %v, Covers %d, %d units, Speculate %v, Retain %d", req.Prev, req.Covers, len(req.Units), req.Speculate, req.Retain)
	}
}

// The memo's compaction of a speculative turn kept a verbatim tail behind the handoff: the
// remembered view is the window of the prefix before the tail, the handoff, the tail, then the
// rest, and a record with neither summary nor ledger has no handoff message.
func TestRememberTail(t *testing.T) {
	msgs := []string{
		`{"role":"system","content":"sys"}`,
		`{"role":"user","content":"U1"}`,
		`{"role":"assistant","content":"A1"}`,
		`{"role":"user","content":"U2"}`,
		`{"role":"assistant","content":"A2"}`,
		`{"role":"user","content":"U3"}`,
	}
	for _, tc := range []struct {
		name    string
		payload compact.Payload
		want    []string
	}{
		{"summary and tail", compact.Payload{Summary: "S", Tail: 2},
			[]string{msgs[0], msgs[1], string(api.ChatUserMessage(handoff.Text("S", ""))), msgs[3], msgs[4], msgs[5]}},
		{"no summary", compact.Payload{Tail: 1}, []string{msgs[0], msgs[1], msgs[3], msgs[4], msgs[5]}},
		{"tail longer than the prefix", compact.Payload{Summary: "S", Tail: 9},
			[]string{string(api.ChatUserMessage(handoff.Text("S", ""))), msgs[0], msgs[1], msgs[2], msgs[3], msgs[4], msgs[5]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := turntest.NewHarness(t, Adapter{})
			tr := parse(t, h.Env, []byte(`{"model":"m","messages":[`+strings.Join(msgs, ",")+`]}`))
			p := tc.payload
			tr.Remember(h.Env, &engine.Memory{Opened: &engine.Opened{ID: "cmp_1", Payload: &p}, Items: 5})
			if got := string(tr.Body(h.Env)); got != `{"model":"m","messages":[`+strings.Join(tc.want, ",")+`]}` {
				t.Errorf("Body() = %s\nwant messages %s", got, strings.Join(tc.want, ","))
			}
		})
	}
}

// Past the threshold the turn's answer is guarded whatever becomes of the compaction, but
// Finish alone puts nothing in force: a compaction that failed after rendering (sealing,
// archiving) leaves the client's bytes to go upstream, as the old handler did.
func TestCompactionOutcomes(t *testing.T) {
	h := turntest.NewHarness(t, Adapter{})
	b := body(history())
	tr := parse(t, h.Env, b)
	req := tr.Compaction(h.Env, tr.Tokens(h.Env, 0), true)
	if tr.Rewriter() == nil {
		t.Fatal("a turn past the threshold has no rewriter")
	}
	kept, _ := api.ChatItems(tr.msgs[:2])
	after, replaced := req.Finish(&engine.Compaction{Kept: kept, Handoff: "HANDOFF", Tail: 1})
	if replaced != len(tr.msgs)-1-2 || after <= 0 {
		t.Errorf("Finish = %d tokens, %d replaced", after, replaced)
	}
	if tr.Changed(h.Env) || !sameSlice(tr.Body(h.Env), b) {
		t.Fatal("Finish without Compacted changed the body")
	}
	tr.Compacted(&engine.Compaction{}, true)
	long := history()
	want := `{ "model":"gpt-test", "x_unknown":{"a":[1,2]},"messages":[` + long[0] + `,` + long[1] + `,` +
		string(api.ChatUserMessage("HANDOFF")) + `,` + long[len(long)-1] + `] ,"temperature":0.5}`
	if got := string(tr.Body(h.Env)); got != want {
		t.Errorf("Body() after Compacted\n got %s\nwant %s", got, want)
	}
	if u := tr.Units(); len(u) != 4 || !u[2].Handoff || u[3].Handoff {
		t.Errorf("units after Compacted: %+v", u)
	}
}

// Tokens counts what the upstream reads as tools: tools, else the deprecated functions.
func TestTokensCountTools(t *testing.T) {
	h := turntest.NewHarness(t, Adapter{})
	fn := `[{"name":"shell","description":"` + strings.Repeat("runs a command ", 50) + `","parameters":{"type":"object"}}]`
	tl := `[{"type":"function","function":{"name":"x","parameters":{"type":"object"}}}]`
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	n := func(s string) int { return parse(t, h.Env, []byte(s)).Tokens(h.Env, 0) }
	bare := n(`{"model":"m",` + msgs + `}`)
	withFn := n(`{"model":"m",` + msgs + `,"functions":` + fn + `}`)
	withTools := n(`{"model":"m",` + msgs + `,"tools":` + tl + `}`)
	both := n(`{"model":"m",` + msgs + `,"tools":` + tl + `,"functions":` + fn + `}`)
	if withFn <= bare || both != withTools {
		t.Errorf("tokens: bare %d, functions %d, tools %d, both %d", bare, withFn, withTools, both)
	}
}

// Speculation keys on one unit per message, renders a prefix as neutral items, and is labelled
// with the conversation the front names.
func TestSpeculation(t *testing.T) {
	h := turntest.NewHarness(t, Adapter{})
	long := history()
	tr := parse(t, h.Env, body(long))
	sr := tr.Speculation(h.Env)
	items, _ := api.ChatItems(tr.msgs[:4])
	if len(sr.Units) != len(long) || sr.Model != "gpt-test" || sr.Conversation != "conv-test" || sr.Retain != h.Env.Retain {
		t.Fatalf("SpecRequest = %+v", sr)
	}
	if got := sr.Prefix(4); len(got) != len(items) || !bytes.Equal(got[3].Raw, items[3].Raw) {
		t.Errorf("Prefix(4) = %d items, want %d", len(got), len(items))
	}
}

// A compaction the engine refuses after rendering it (here: not smaller than the turn it was to
// shrink) puts nothing in force: the upstream gets the client's bytes, as in the old handler,
// which kept the rendering apart from the turn until the compaction was made.
func TestCompactionRefusedAfterFinish(t *testing.T) {
	h := turntest.NewHarness(t, Adapter{})
	b := body(history())
	tr := parse(t, h.Env, b)
	req := tr.Compaction(h.Env, 1, true) // "1 token before": any rendering is not smaller
	req.Dialect, req.Tenant, req.Owner = Adapter{}.Engine(), turntest.Tenant, "owner"
	if _, err := h.Engine.Compact(h.Env.Ctx, req); !errors.Is(err, engine.ErrNotSmaller) {
		t.Fatalf("Compact: %v, want ErrNotSmaller", err)
	}
	if tr.finished == nil {
		t.Fatal("the engine refused before rendering: the test does not reach Finish")
	}
	if tr.Changed(h.Env) || !sameSlice(tr.Body(h.Env), b) || len(tr.Units()) != len(history()) {
		t.Fatal("a refused compaction changed the turn")
	}
	if tr.Rewriter() == nil {
		t.Error("a turn past the threshold has no rewriter")
	}
}
