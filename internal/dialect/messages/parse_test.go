package messages

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/turn"
)

// withBlock puts block first in an assistant message after msgs, then a user message.
func withBlock(msgs []string, block []byte, next string) []string {
	out := append([]string(nil), msgs...)
	out = append(out, `{"role":"assistant","content":[`+string(block)+`,{"type":"text","text":"done"}]}`)
	return append(out, msg("user", next))
}

// Parse refuses what compactd will not forward, with the fault the old handler answered, and
// nothing of it reaches the upstream.
func TestParseRefusals(t *testing.T) {
	env, front := newEnv(t)
	block, c := sealedBlock(t, env, history(3))
	edited, _ := sjson.SetBytes(block, "content", "an edited summary")
	tampered := bytes.Replace(block, []byte(c.EncryptedContent), []byte(c.EncryptedContent[:len(c.EncryptedContent)-6]+"AAAAAA"), 1)
	noEC, _ := sjson.DeleteBytes(block, "encrypted_content")
	signed, _ := sjson.SetBytes(block, "signature", "c2ln")
	foreignBlock := `{"type":"compaction","content":"theirs","encrypted_content":"EqQBCkYIBxgCKkB"}`
	for _, tc := range []struct {
		name   string
		body   string
		a      Adapter
		reject bool // the foreign-items policy is reject
		code   string
		param  string // the fault's Param, or "" for a message starting with the path
		inText string // a part of the message
	}{
		{name: "not JSON", body: `{"model":`, code: fault.CodeInvalidJSON},
		{name: "messages not an array", body: `{"model":"m","messages":{}}`, code: fault.CodeInvalidValue},
		{name: "context_management not an object", body: body(history(1), `"context_management":[]`),
			param: "context_management", inText: "valid dictionary"},
		{name: "edits not a list", body: body(history(1), `"context_management":{"edits":7}`),
			param: "context_management.edits", inText: "valid list"},
		{name: "an unknown edit", body: body(history(1), `"context_management":{"edits":[{"type":"nope"}]}`),
			param: "context_management.edits.0", inText: "does not match"},
		{name: "count_tokens validates context_management too", a: Adapter{CountTokens: true},
			body: body(history(1), `"context_management":{"edits":[{"type":"nope"}]}`), param: "context_management.edits.0"},
		{name: "on-demand compaction of the wrong type", body: body(history(1), `"compaction":{"type":"shorten"}`),
			param: "compaction.type", inText: "summarize"},
		{name: "block edited", body: body(withBlock(history(1), edited, "next")), code: fault.CodeCompactionContentMismatch,
			param: "messages.2.content.0.content"},
		{name: "block tampered", body: body(withBlock(history(1), tampered, "next")), code: fault.CodeInvalidEncryptedContent,
			param: "messages.2.content.0.encrypted_content"},
		{name: "block without encrypted_content", body: body(withBlock(history(1), noEC, "next")),
			param: "messages.2.content.0.encrypted_content", inText: "no encrypted_content"},
		{name: "block content not a string", body: body([]string{msg("user", "q"), `{"role":"assistant","content":[{"type":"compaction","content":7,"encrypted_content":"cmp_x.y"}]}`, msg("user", "n")}),
			param: "messages.1.content.0.content", inText: "valid string"},
		{name: "signed block not first", body: body(withBlock(history(1), signed, "next")), code: "compaction_block_misplaced"},
		{name: "two blocks beside a signed one", body: body(append([]string{`{"role":"user","content":[` + string(signed) + `]}`}, withBlock(nil, block, "n")...)),
			code: "compaction_block_ambiguous"},
		{name: "signature that does not verify", body: body([]string{`{"role":"user","content":[` + string(signed) + `,{"type":"text","text":"go on"}]}`}),
			code: fault.CodeInvalidEncryptedContent},
		{name: "block in a system message", body: body([]string{msg("user", "q"), `{"role":"system","content":[` + string(block) + `]}`, msg("user", "n")}),
			code: "compaction_block_misplaced", inText: "system message"},
		{name: "foreign block under reject", reject: true, body: body(withBlock(history(1), []byte(foreignBlock), "next")),
			code: "foreign_compaction_block", inText: "messages.2.content.0: a compaction block compactd did not issue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			front.reject = tc.reject
			tt, f := tc.a.Parse(env, []byte(tc.body))
			if f == nil {
				t.Fatalf("Parse accepted it: %T", tt)
			}
			if tt != nil {
				t.Errorf("Parse returned a turn beside its fault")
			}
			if tc.code != "" && f.Code != tc.code {
				t.Errorf("code %q, want %q (%s)", f.Code, tc.code, f.Message)
			}
			if tc.param != "" && f.Param != tc.param {
				t.Errorf("param %q, want %q (%s)", f.Param, tc.param, f.Message)
			}
			if !strings.Contains(f.Message, tc.inText) {
				t.Errorf("message %q lacks %q", f.Message, tc.inText)
			}
		})
	}
}

// A carried compaction block is handed off: the messages before it are gone, the block is the
// user's handoff text (sharing the block's message when that is the user's), and the rest
// follows byte for byte; context_management's compaction edit, which only compactd implements,
// is taken out. The whole upstream body is pinned.
func TestParseHandoffByteExact(t *testing.T) {
	env, front := newEnv(t)
	block, c := sealedBlock(t, env, history(3))
	text := string(api.TextBlock(handoff.MessagesText(testSummary, "")))
	cmEdit := `"context_management":{"edits":[{"type":"compact_20260112"},{"type":"clear_thinking_20251015","keep":"all"}]}`
	for _, tc := range []struct {
		name   string
		in     []string
		cm     string
		want   string // the upstream's messages
		wantCM string
	}{
		{name: "block in the assistant's answer", in: withBlock(history(3), block, "next"), cm: cmEdit,
			want:   `[{"role":"user","content":[` + text + `]},{"role":"assistant","content":[{"type":"text","text":"done"}]},` + msg("user", "next") + `]`,
			wantCM: `,"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}`},
		{name: "block first in a user message", in: append(history(2), `{"role":"user","content":[`+string(block)+`,{"type":"text","text":"go on"}]}`),
			want: `[{"role":"user","content":[` + text + `,{"type":"text","text":"go on"}]}]`},
		{name: "system messages before the block stay behind the handoff", in: append([]string{msg("user", "q"), `{"role":"system","content":"tools: Read"}`}, withBlock(nil, block, "n")...),
			want: `[{"role":"user","content":[` + text + `]},{"role":"system","content":"tools: Read"},{"role":"assistant","content":[{"type":"text","text":"done"}]},` + msg("user", "n") + `]`},
		{name: "null-content blocks are removed throughout", in: append(withBlock(history(1), block, "n"), `{"role":"assistant","content":[{"type":"compaction","content":null},{"type":"text","text":"x"}]}`, `{"role":"user","content":[{"type":"compaction","content":null}]}`),
			want: `[{"role":"user","content":[` + text + `]},{"role":"assistant","content":[{"type":"text","text":"done"}]},` + msg("user", "n") + `,{"role":"assistant","content":[{"type":"text","text":"x"}]}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := front.handedOff
			extra := []string{}
			if tc.cm != "" {
				extra = append(extra, tc.cm)
			}
			tt := parse(t, Adapter{}, env, body(tc.in, extra...))
			if tt.Prev() == nil || tt.Prev().ID != c.ID || front.handedOff != before+1 {
				t.Fatalf("the block was not handed off: prev %+v, %d handoffs", tt.Prev(), front.handedOff-before)
			}
			if !tt.Changed(env) {
				t.Fatal("Changed is false after a handoff")
			}
			want := `{"model":"claude-test","max_tokens":1024,"messages":` + tc.want + tc.wantCM + `}`
			if got := string(tt.Body(env)); got != want {
				t.Errorf("upstream body\n got %s\nwant %s", got, want)
			}
		})
	}
}

// Foreign compaction blocks are dropped (a message left empty with them) before compactd's own
// block is opened, and Env.Foreign is told where they were.
func TestParseDropsForeignBlocks(t *testing.T) {
	env, front := newEnv(t)
	block, _ := sealedBlock(t, env, history(3))
	theirs := `{"type":"compaction","content":"theirs","encrypted_content":"EqQBCkYIBxgCKkB"}`
	in := []string{`{"role":"assistant","content":[` + theirs + `]}`, msg("user", "q")}
	in = append(in, withBlock(nil, block, "n")...)
	in = append(in, `{"role":"assistant","content":[{"type":"text","text":"a"},`+theirs+`]}`, msg("user", "last"))
	tt := parse(t, Adapter{}, env, body(in))
	if len(front.foreign) != 1 || front.foreign[0] != "messages.0.content.0,messages.4.content.1" {
		t.Fatalf("Foreign told %q", front.foreign)
	}
	if tt.Prev() == nil {
		t.Fatal("compactd's own block was not handed off")
	}
	got := string(tt.Body(env))
	want := `"messages":[{"role":"user","content":[` + string(api.TextBlock(handoff.MessagesText(testSummary, ""))) + `]},{"role":"assistant","content":[{"type":"text","text":"done"}]},` +
		msg("user", "n") + `,{"role":"assistant","content":[{"type":"text","text":"a"}]},` + msg("user", "last") + `]`
	if !strings.Contains(got, want) || strings.Contains(got, "EqQB") {
		t.Errorf("upstream body %s\nwant messages %s", got, want)
	}
	// Foreign blocks alone: dropped, the turn changed, nothing opened.
	tt = parse(t, Adapter{}, env, body([]string{msg("user", "q"), `{"role":"assistant","content":[{"type":"text","text":"a"},` + theirs + `]}`, msg("user", "n")}))
	if tt.Prev() != nil || !tt.Changed(env) || strings.Contains(string(tt.Body(env)), "EqQB") {
		t.Errorf("foreign block alone: prev %v, changed %v, body %s", tt.Prev(), tt.Changed(env), tt.Body(env))
	}
}

// A request that carries nothing compactd acts on is not validated, and its body is the
// client's own slice; PassThrough forwards it unless the policy needs it counted or it is an
// agent's turn after a compaction compactd answered.
func TestParseWhatNeedsNothing(t *testing.T) {
	noteRef := "archive reference cref-test"
	note := turn.AgentRecallText("compactd_recall", noteRef)
	clear := `"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":"not a number"}}]}`
	for _, tc := range []struct {
		name         string
		a            Adapter
		opts         []envOption
		body         string
		noFindRef    bool
		needed       bool
		passPolicy   bool // PassThrough with a policy on the route
		passNoPolicy bool
	}{
		{name: "plain turn", body: body(history(1)), passNoPolicy: true},
		{name: "context editing the upstream applies, unvalidated", body: body(history(1), clear), passNoPolicy: true},
		{name: "context editing compactd applies", opts: []envOption{withOptions(turn.Options{ApplyEdits: true})}, body: body(history(1), `"context_management":{"edits":[]}`), needed: true},
		{name: "context_management null", body: body(history(1), `"context_management":null`), passNoPolicy: true},
		{name: "a compaction edit", body: body(history(1), `"context_management":{"edits":[{"type":"compact_20260112"}]}`), needed: true},
		{name: "on-demand compaction: null", body: body(history(1), `"compaction":null`), needed: true},
		{name: "after an agent compaction", body: body(append([]string{msg("user", "<summary>s\n\n"+note+"</summary>")}, msg("user", "q"))), passPolicy: false, passNoPolicy: false},
		{name: "after an agent compaction, recall off", noFindRef: true, body: body(append([]string{msg("user", "<summary>s\n\n"+note+"</summary>")}, msg("user", "q"))), passNoPolicy: true},
		{name: "count_tokens", a: Adapter{CountTokens: true}, body: body(append([]string{msg("user", "<summary>s\n\n"+note+"</summary>")}, msg("user", "q"))), passPolicy: true, passNoPolicy: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, front := newEnv(t, tc.opts...)
			front.refs[noteRef] = "conv-agent"
			front.noRecall = tc.noFindRef
			in := []byte(tc.body)
			tt := parse(t, tc.a, env, tc.body)
			if tt.needed != tc.needed {
				t.Fatalf("needed %v, want %v", tt.needed, tc.needed)
			}
			if got := tt.PassThrough(env, true); got != tc.passPolicy {
				t.Errorf("PassThrough with a policy = %v, want %v", got, tc.passPolicy)
			}
			if got := tt.PassThrough(env, false); got != tc.passNoPolicy {
				t.Errorf("PassThrough = %v, want %v", got, tc.passNoPolicy)
			}
			if tc.needed {
				return
			}
			if tt.Changed(env) {
				t.Error("Changed on a turn that needs nothing")
			}
			if out := tt.Body(env); &out[0] != &in[0] && !bytes.Equal(out, in) || len(out) != len(in) {
				t.Errorf("Body is not the client's bytes")
			}
			if tc.a.CountTokens {
				return
			}
			if tt.Rewriter() != nil {
				t.Error("a turn read on only to be counted has a rewriter")
			}
		})
	}
}

// The client's bytes, not a copy, go upstream when nothing changed.
func TestBodyIsTheClientsSlice(t *testing.T) {
	env, _ := newEnv(t)
	in := []byte(body(history(2)))
	tt, f := Adapter{}.Parse(env, in)
	if f != nil {
		t.Fatal(f)
	}
	out := tt.Body(env)
	if len(out) != len(in) || &out[0] != &in[0] {
		t.Fatal("Body copied the client's body")
	}
	tt.Units() // reading the units (the memo's lookup) changes nothing
	if tt.Tokens(env, 0) <= 0 || tt.Changed(env) || &tt.Body(env)[0] != &in[0] {
		t.Fatal("counting changed the body")
	}
}

// Claude Code's compaction turn is answered without its context_management: an invalid one is
// refused only once the turn goes on as an ordinary one (turn.Deferred). Anywhere else it is
// refused at once.
func TestParseDefersRefusalForClaudeCode(t *testing.T) {
	bad := `"context_management":{"edits":[{"type":"nope"}]}`
	prompt := ccPromptText(t)
	cc := body(append(history(2), msg("user", prompt)), bad)
	for _, tc := range []struct {
		name     string
		a        Adapter
		header   bool
		body     string
		deferred bool
	}{
		{name: "claude code's compaction turn", header: true, body: cc, deferred: true},
		{name: "no claude code identity", body: cc},
		{name: "count_tokens", a: Adapter{CountTokens: true}, header: true, body: cc},
		{name: "an ordinary claude code turn", header: true, body: body(append(history(2), msg("user", "fix the test")), bad)},
		{name: "nothing to summarise before the prompt", header: true, body: body([]string{`{"role":"user","content":[{"type":"redacted_thinking","data":"x"}]}`, `{"role":"assistant","content":[{"type":"redacted_thinking","data":"y"}]}`, msg("user", prompt)}, bad)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []envOption
			if tc.header {
				opts = append(opts, withHeader("X-Claude-Code-Session-Id", "sess-1"))
			}
			env, _ := newEnv(t, opts...)
			tt, f := tc.a.Parse(env, []byte(tc.body))
			if !tc.deferred {
				if f == nil || f.Param != "context_management.edits.0" {
					t.Fatalf("not refused at once: %+v", f)
				}
				return
			}
			if f != nil {
				t.Fatalf("refused at once: %+v", f)
			}
			if r := tt.(turn.Deferred).Refusal(); r == nil || r.Param != "context_management.edits.0" {
				t.Fatalf("Refusal = %+v", r)
			}
			if agent, _, ok := tt.(turn.AgentCompaction).Agent(env); !ok || agent != "claude-code" {
				t.Fatalf("Agent = %q, %v", agent, ok)
			}
		})
	}
}
