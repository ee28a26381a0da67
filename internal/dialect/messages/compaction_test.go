package messages

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/turn"
)

const compactEdit = `"context_management":{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":60000},"instructions":" keep the ports "}]}`

var handoffText = string(api.TextBlock(handoff.MessagesText(testSummary, "")))

// The client's threshold and whether it speaks compaction: a compact_20260112 edit, or a block
// it carries; count_tokens never compacts.
func TestThreshold(t *testing.T) {
	env, _ := newEnv(t)
	block, _ := sealedBlock(t, env, history(3))
	for _, tc := range []struct {
		name       string
		a          Adapter
		body       string
		set        bool
		tokens     int
		speaks, ok bool
	}{
		{name: "no context management", body: body(history(1)), ok: true},
		{name: "a compaction edit", body: body(history(1), compactEdit), set: true, tokens: 60000, speaks: true, ok: true},
		{name: "the default trigger", body: body(history(1), `"context_management":{"edits":[{"type":"compact_20260112"}]}`), set: true, tokens: api.DefaultCompactTrigger, speaks: true, ok: true},
		{name: "a carried block", body: body(withBlock(history(1), block, "n")), speaks: true, ok: true},
		{name: "context editing only", body: body(history(1), `"context_management":{"edits":[{"type":"clear_thinking_20251015"}]}`), ok: true},
		{name: "count_tokens", a: Adapter{CountTokens: true}, body: body(history(1), compactEdit)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th, speaks, ok := parse(t, tc.a, env, tc.body).Threshold()
			if th.Set != tc.set || th.Tokens != tc.tokens || speaks != tc.speaks || ok != tc.ok {
				t.Errorf("Threshold = %+v, %v, %v", th, speaks, ok)
			}
		})
	}
}

// A threshold compaction: the engine request (the client's instructions, speculation, the memo's
// cover), then the compacted conversation upstream and the block for the answer.
func TestThresholdCompaction(t *testing.T) {
	env, _ := newEnv(t)
	msgs := append([]string{`{"role":"system","content":"env: linux"}`}, history(3)...)
	msgs = append(msgs, msg("user", "and now?"))
	tt := parse(t, Adapter{}, env, body(msgs, compactEdit, `"stream":true`))
	total := tt.Tokens(env, 60000)
	if total <= 0 || total != tt.Tokens(env, 0) {
		t.Fatalf("Tokens = %d", total)
	}
	r := tt.Compaction(env, total, false)
	if r.Instructions != "keep the ports" || !r.Speculate || r.Covers != len(msgs) || r.TokensBefore != total || r.Sign || r.Explicit || len(r.Units) != len(msgs) {
		t.Fatalf("request %+v", r)
	}
	c := compactTurn(t, env, tt, r, false)
	want := `[{"role":"user","content":[` + handoffText + `]},{"role":"system","content":"env: linux"}]`
	if got := msgsOf(t, tt.Body(env)); got != want {
		t.Errorf("upstream messages %s\nwant %s", got, want)
	}
	if gjson.GetBytes(tt.Body(env), "context_management").Exists() {
		t.Error("context_management was forwarded")
	}
	if string(tt.block) != string(api.CompactionBlock(testSummary, c.EncryptedContent, "")) || !tt.Carries() || tt.Rewriter() == nil || tt.Pauses() {
		t.Errorf("block %s", tt.block)
	}
	if p := c.Payload; p.ItemsReplaced != len(msgs)-1 || p.TokensAfter >= p.TokensBefore {
		t.Errorf("payload %+v", p)
	}
}

// The transparent policy keeps the current turn (the last prompt and what answers it) verbatim
// behind the handoff, unless it would take half the threshold or a cut there would part a tool
// call from its result; nothing goes back to the client.
func TestTransparentKeepsCurrentTurn(t *testing.T) {
	toolUse := `{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"p":"/a"}}]}`
	toolResult := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"file a"}]}`
	prompt := msg("user", "now fix the parser")
	for _, tc := range []struct {
		name  string
		msgs  []string
		limit int
		keep  []string
	}{
		{name: "prompt and its tool calls kept", msgs: append(history(3), prompt, toolUse, toolResult), limit: 60000, keep: []string{prompt, toolUse, toolResult}},
		{name: "current turn over half the threshold", msgs: append(history(3), prompt, toolUse, toolResult), limit: 20},
		{name: "a tool call answered after the prompt", msgs: append(history(3), toolUse, prompt, toolResult), limit: 60000},
		{name: "nothing of the client's before the prompt", msgs: []string{prompt}, limit: 60000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, _ := newEnv(t)
			tt := parse(t, Adapter{}, env, body(tc.msgs))
			if _, speaks, _ := tt.Threshold(); speaks {
				t.Fatal("a client that sent nothing speaks compaction")
			}
			total := tt.Tokens(env, tc.limit)
			r := tt.Compaction(env, total, true)
			if r.Covers != len(tc.msgs)-len(tc.keep) || len(r.Units) != len(tc.msgs)-len(tc.keep) {
				t.Fatalf("covers %d, %d units; want %d", r.Covers, len(r.Units), len(tc.msgs)-len(tc.keep))
			}
			if len(tc.msgs) == 1 {
				return // nothing to summarise
			}
			compactTurn(t, env, tt, r, true)
			want := `[{"role":"user","content":[` + handoffText + `]}`
			for _, k := range tc.keep {
				want += "," + k
			}
			if got := msgsOf(t, tt.Body(env)); got != want+"]" {
				t.Errorf("upstream messages %s\nwant %s]", got, want)
			}
			if tt.block != nil || tt.Carries() || tt.Rewriter() == nil {
				t.Error("a transparent compaction goes back to the client")
			}
		})
	}
}

// A compaction that fails after it rendered the compacted conversation (here: not smaller than
// the turn's count) leaves the turn as it was before it: nothing of the failed rendering reaches
// the upstream.
func TestFailedCompactionLeavesTheTurn(t *testing.T) {
	env, _ := newEnv(t)
	block, _ := sealedBlock(t, env, history(3))
	tt := parse(t, Adapter{}, env, body(append(withBlock(history(3), block, "n"), history(2)...), compactEdit))
	before := string(tt.Body(env))    // the handoff applied
	r := tt.Compaction(env, 1, false) // "before" is one token: whatever Finish renders is larger
	r.Dialect, r.Tenant = Adapter{}.Engine(), testTenant
	if _, err := env.Engine.Compact(env.Ctx, r); !errors.Is(err, engine.ErrNotSmaller) {
		t.Fatalf("Compact: %v", err)
	}
	if tt.pending == nil {
		t.Fatal("Finish did not run")
	}
	if got := string(tt.Body(env)); got != before {
		t.Errorf("the failed compaction's rendering went upstream:\n got %s\nwant %s", got, before)
	}
}

// pause_after_compaction: the answer is the compaction alone, with the edits compactd applied.
func TestPauseAfterCompaction(t *testing.T) {
	env, _ := newEnv(t, withOptions(turn.Options{ApplyEdits: true}))
	think := `{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"a"}]}`
	msgs := append(history(2), think, msg("user", "q"), think, msg("user", "q2"))
	cm := `"context_management":{"edits":[{"type":"compact_20260112","pause_after_compaction":true},{"type":"clear_thinking_20251015"}]}`
	tt := parse(t, Adapter{}, env, body(msgs, cm))
	if !tt.Pauses() {
		t.Fatal("Pauses is false")
	}
	total := tt.Tokens(env, 50000)
	c := compactTurn(t, env, tt, tt.Compaction(env, total, false), false)
	w := httptest.NewRecorder()
	tt.AnswerPause(w, c)
	out := w.Body.String()
	if w.Code != http.StatusOK || gjson.Get(out, "stop_reason").Str != "compaction" || gjson.Get(out, "content.#").Int() != 1 ||
		gjson.Get(out, "content.0").Raw != string(api.CompactionBlock(testSummary, c.EncryptedContent, "")) ||
		gjson.Get(out, "usage.input_tokens").Int() != 0 || gjson.Get(out, "usage.iterations.#").Int() != 1 ||
		gjson.Get(out, "usage.iterations.0.type").Str != "compaction" || gjson.Get(out, "usage.iterations.0.input_tokens").Int() != 120 ||
		gjson.Get(out, "context_management.applied_edits.0.type").Str != api.EditClearThinking {
		t.Fatalf("pause answer %s", out)
	}
}

// On-demand compaction: the request compactd runs (signed, explicit, the client's
// instructions), its answer (the signed block alone, JSON or stream), and the block carried
// back as the first block of messages opens with its signature.
func TestOnDemand(t *testing.T) {
	env, _ := newEnv(t)
	od := `"compaction":{"type":"summarize","instructions":"  keep paths  "}`
	for _, stream := range []bool{false, true} {
		extra := []string{od}
		if stream {
			extra = append(extra, `"stream":true`)
		}
		tt := parse(t, Adapter{}, env, body(history(3), extra...))
		trigger, r, f, ok := tt.Explicit(env)
		if !ok || f != nil || trigger != "on_demand" || !r.Sign || !r.Explicit || r.Speculate || r.Instructions != "keep paths" || r.TokensBefore <= 0 {
			t.Fatalf("Explicit = %q, %+v, %v, %v", trigger, r, f, ok)
		}
		if tt.Nothing() == nil || tt.ExplicitKeepAlive() != nil {
			t.Error("Nothing or ExplicitKeepAlive")
		}
		r.Dialect, r.Tenant = Adapter{}.Engine(), testTenant
		c, err := env.Engine.Compact(env.Ctx, r)
		if err != nil || c.Signature == "" {
			t.Fatalf("Compact: %v (signature %q)", err, c.Signature)
		}
		w := httptest.NewRecorder()
		tt.Answer(w, c)
		out := w.Body.String()
		signed := api.CompactionBlock(testSummary, c.EncryptedContent, c.Signature)
		if !stream {
			if gjson.Get(out, "content.0").Raw != string(signed) || gjson.Get(out, "stop_reason").Str != "compaction" {
				t.Fatalf("answer %s", out)
			}
		} else {
			var types []string
			for _, ev := range events(t, out) {
				types = append(types, ev.Get("type").Str+"/"+ev.Get("delta.type").Str)
			}
			if strings.Join(types, " ") != "message_start/ content_block_start/ content_block_delta/compaction_delta content_block_delta/signature_delta content_block_stop/ message_delta/ message_stop/" ||
				!strings.Contains(out, `"stop_reason":"compaction"`) {
				t.Fatalf("stream %s", out)
			}
			continue
		}
		// The next turn sends the block back first.
		next := parse(t, Adapter{}, env, body([]string{`{"role":"user","content":[` + string(signed) + `,{"type":"text","text":"go on"}]}`}))
		if next.Prev() == nil || next.Prev().ID != c.ID {
			t.Fatal("the signed block did not open")
		}
	}
	// Nothing a summariser can read: refused before anything is compacted.
	tt := parse(t, Adapter{}, env, body([]string{`{"role":"user","content":[{"type":"redacted_thinking","data":"x"}]}`}, od))
	if _, _, f, ok := tt.Explicit(env); !ok || f == nil || f.Code != "compaction_nothing_to_summarize" {
		t.Fatalf("empty conversation: %+v %v", f, ok)
	}
	// A last assistant turn with a tool call unanswered (a system message after it is not a
	// turn) is not finished: refused, naming the call. Answered, it compacts.
	use := `{"role":"assistant","content":[{"type":"text","text":"reading"},{"type":"tool_use","id":"toolu_9","name":"Read","input":{}}]}`
	sysMsg := `{"role":"system","content":"env"}`
	for _, tc := range []struct {
		msgs []string
		code string
	}{
		{append(history(1), `{"role":"user","content":"read it"}`, use), "compaction_incomplete_turn"},
		{append(history(1), `{"role":"user","content":"read it"}`, use, sysMsg), "compaction_incomplete_turn"},
		{append(history(1), `{"role":"user","content":"read it"}`, use, `{"role":"assistant","content":"still going"}`), "compaction_incomplete_turn"},
		{append(history(1), `{"role":"user","content":"read it"}`, use, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","content":"x"}]}`), ""},
		{append(history(1), `{"role":"user","content":"read it"}`, `{"role":"assistant","content":"done"}`), ""},
	} {
		_, _, f, ok := parse(t, Adapter{}, env, body(tc.msgs, od)).Explicit(env)
		switch {
		case !ok:
			t.Errorf("%v: not explicit", tc.msgs)
		case tc.code == "" && f != nil:
			t.Errorf("%v: refused %+v", tc.msgs, f)
		case tc.code != "" && (f == nil || f.Code != tc.code || !strings.Contains(f.Message, "toolu_9") || f.Status() != 400):
			t.Errorf("%v: %+v, want %s naming toolu_9", tc.msgs, f, tc.code)
		}
	}
	// An ordinary turn, and count_tokens, are not explicit.
	if _, _, _, ok := parse(t, Adapter{}, env, body(history(1))).Explicit(env); ok {
		t.Error("an ordinary turn is explicit")
	}
	if _, _, _, ok := parse(t, Adapter{CountTokens: true}, env, body(history(1), od)).Explicit(env); ok {
		t.Error("count_tokens is explicit")
	}
}

// Context editing compactd applies: the edits go into the conversation, context_management goes
// (compactd implements all of it), and the answer reports what was applied.
func TestApplyEdits(t *testing.T) {
	think := `{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"a"}]}`
	msgs := append([]string{msg("user", "q0")}, think, msg("user", "q1"), think, msg("user", "q2"))
	cm := `"context_management":{"edits":[{"type":"clear_thinking_20251015"}]}`
	env, _ := newEnv(t, withOptions(turn.Options{ApplyEdits: true}))
	tt := parse(t, Adapter{}, env, body(msgs, cm))
	want := `[` + msg("user", "q0") + `,{"role":"assistant","content":[{"type":"text","text":"a"}]},` + msg("user", "q1") + "," + think + "," + msg("user", "q2") + `]`
	if got := msgsOf(t, tt.Body(env)); got != want {
		t.Errorf("upstream messages %s\nwant %s", got, want)
	}
	if strings.Contains(string(tt.Body(env)), "context_management") || len(tt.applied) != 1 || !tt.Rewrites() || tt.Carries() {
		t.Errorf("body %s, applied %+v", tt.Body(env), tt.applied)
	}
	// Without ApplyEdits the upstream applies them: the turn needs nothing of compactd.
	env2, _ := newEnv(t)
	if tt := parse(t, Adapter{}, env2, body(msgs, cm)); tt.needed || tt.Changed(env2) {
		t.Error("context editing the upstream applies changed the turn")
	}
}

// count_tokens: blocks and edits applied, the on-demand `compaction` taken out,
// context_management kept for the upstream's own edits, and the tokens taken out added back to
// the answer; it never compacts, recalls or answers an agent.
func TestCountTokens(t *testing.T) {
	env, _ := newEnv(t, withHeader("X-Claude-Code-Session-Id", "s"))
	block, _ := sealedBlock(t, env, history(3))
	a := Adapter{CountTokens: true}
	cm := `"context_management":{"edits":[{"type":"compact_20260112"},{"type":"clear_thinking_20251015","keep":"all"}]}`
	tt := parse(t, a, env, body(withBlock(history(3), block, "n"), cm, `"compaction":{"type":"summarize"}`))
	out := string(tt.Body(env))
	want := `{"model":"claude-test","max_tokens":1024,"messages":[{"role":"user","content":[` + handoffText + `]},{"role":"assistant","content":[{"type":"text","text":"done"}]},` + msg("user", "n") +
		`],"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}}`
	if out != want {
		t.Errorf("count_tokens body\n got %s\nwant %s", out, want)
	}
	if tt.removed <= 0 {
		t.Errorf("removed %d", tt.removed)
	}
	if _, _, ok := tt.Threshold(); ok {
		t.Error("count_tokens has a threshold")
	}
	if _, _, ok := tt.Agent(env); ok {
		t.Error("count_tokens is an agent compaction")
	}
	if tt.Recall(env, turn.RecallTool{Name: "r"}) != nil {
		t.Error("count_tokens offers recall")
	}
	// count_tokens answers JSON, whatever the body says.
	if parse(t, a, env, body(history(1), `"stream":true`, `"compaction":null`)).Stream().Streamed {
		t.Error("a count_tokens turn is streamed")
	}
	// Only an on-demand `compaction` to take out.
	tt = parse(t, a, env, body(history(1), `"compaction":{"type":"summarize"}`))
	if got := string(tt.Body(env)); got != body(history(1)) || tt.removed != 0 {
		t.Errorf("count_tokens body %s", got)
	}
}

// The compaction betas, which only compactd implements, never reach the upstream; nor the
// context-management beta when compactd applies the edits.
func TestUpstreamHeaders(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  turn.Options
		betas []string
		want  string
	}{
		{name: "compaction betas", betas: []string{"compact-2026-01-12,prompt-caching-2024-07-31", "compact-2026-09-04"}, want: "prompt-caching-2024-07-31"},
		{name: "context management kept", betas: []string{"context-management-2025-06-27, compact-2026-01-12"}, want: "context-management-2025-06-27"},
		{name: "context management applied by compactd", opts: turn.Options{ApplyEdits: true}, betas: []string{"context-management-2025-06-27", "compact-2026-01-12"}},
		{name: "nothing to drop", betas: []string{"a, b"}, want: "a, b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, _ := newEnv(t, withOptions(tc.opts))
			tt := parse(t, Adapter{}, env, body(history(1), compactEdit))
			h := http.Header{"Anthropic-Beta": tc.betas, "X-Api-Key": {"k"}}
			tt.UpstreamHeaders(h)
			if got := strings.Join(h.Values("Anthropic-Beta"), "|"); got != tc.want || h.Get("X-Api-Key") != "k" {
				t.Errorf("anthropic-beta %q, want %q", got, tc.want)
			}
		})
	}
}

// Speculation works on its own copy of the conversation, one unit per message.
func TestSpeculation(t *testing.T) {
	env, _ := newEnv(t)
	tt := parse(t, Adapter{}, env, body(history(2)))
	s := tt.Speculation(env)
	if len(s.Units) != 4 || s.Prefix == nil || len(s.Prefix(2)) != 2 || s.Retain != 0 || s.Model != "claude-test" || s.Dialect.Name != "messages" {
		t.Fatalf("SpecRequest %+v", s)
	}
	tt.msgs[0] = api.Message{Raw: []byte(`{}`), Role: "user"}
	if string(s.Prefix(1)[0].Raw) == `{}` {
		t.Error("speculation shares the turn's message list")
	}
}
