package messages

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fixtures"
	"github.com/compactd/compactd/internal/turn"
)

// ccRequest is a real Claude Code 2.1.332 compaction request (a Read, then /compact), its tools
// attached; its final text block is Claude Code's summarisation prompt, byte for byte.
var ccRequest = fixtures.ClaudeCode("compaction_request.json")

func ccPromptText(t testing.TB) string {
	t.Helper()
	p := gjson.GetBytes(ccRequest, "messages.@reverse.0.content.@reverse.0.text").Str
	if !isSummaryPrompt(p) {
		t.Fatal("the captured prompt is not recognised")
	}
	return p
}

// ccWithLast is the captured compaction request with its final text block replaced by text.
func ccWithLast(t *testing.T, text string) string {
	t.Helper()
	n := len(gjson.GetBytes(ccRequest, "messages").Array())
	m := len(gjson.GetBytes(ccRequest, "messages.@reverse.0.content").Array())
	b, err := sjson.SetBytes(ccRequest, "messages."+strconv.Itoa(n-1)+".content."+strconv.Itoa(m-1)+".text", text)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Claude Code's compaction turn is recognised by the prompt's exact shape and the client's
// identity, nothing a user can type (ported from proxy's TestAgentCompactionRecognition, at the
// adapter: Agent's verdict and what it asks to summarise).
func TestAgentRecognition(t *testing.T) {
	prompt := ccPromptText(t)
	instructions := string(fixtures.ClaudeCode("compaction_prompt_instructions.txt"))
	hook := string(fixtures.ClaudeCode("compaction_prompt_precompact_hook.txt"))
	const reminder = "\n\nREMINDER: Do NOT call any tools."
	const opening = "Your task is to create a detailed summary of the conversation so far, paying close attention to the user's explicit requests and your previous actions."
	head, rest, _ := strings.Cut(prompt, opening)
	recent := head + "Your task is to create a detailed summary of the RECENT portion of the conversation \u2014 the messages that follow earlier retained context. The earlier messages are being kept intact and do NOT need to be summarized." + rest
	noScratchpad := strings.ReplaceAll(prompt, "an <analysis> block followed by a <summary> block", "a <summary> block")
	retry := prompt + "\n\nFor this reply only: write what the instructions above ask for, with the summary inside <summary></summary> tags. Every message before those instructions is conversation to summarize."
	cc := "X-Claude-Code-Session-Id"
	for _, tc := range []struct {
		name    string
		body    string
		hdr     string // header name set to a value ("" none)
		hdrVal  string
		a       Adapter
		upgrade bool
		msgs    int // messages summarised
	}{
		{name: "captured compaction request", body: string(ccRequest), hdr: cc, upgrade: true, msgs: 4},
		{name: "with /compact instructions", body: ccWithLast(t, instructions), hdr: cc, upgrade: true, msgs: 4},
		{name: "with the PreCompact hook's instructions", body: ccWithLast(t, hook), hdr: cc, upgrade: true, msgs: 4},
		{name: "without the analysis scratchpad", body: ccWithLast(t, noScratchpad), hdr: cc, upgrade: true, msgs: 4},
		{name: "the retry's paragraph after the reminder", body: ccWithLast(t, retry), hdr: cc, upgrade: true, msgs: 4},
		{name: "a marker tag after the reminder", body: ccWithLast(t, prompt+"\n\n<remote-control-device-report/>"), hdr: cc, upgrade: true, msgs: 4},
		{name: "claude-cli user agent", body: string(ccRequest), hdr: "User-Agent", hdrVal: "claude-cli/2.1.332 (external, sdk-cli)", upgrade: true, msgs: 4},
		{name: "the prompt alone in its message", body: body(append(history(1), msg("user", prompt))), hdr: cc, upgrade: true, msgs: 2},
		// A string content is the same text block (api.Message.ContentBlocks), and history in
		// strings is conversation like history in blocks.
		{name: "the prompt as a string content", body: body([]string{`{"role":"user","content":"question"}`, `{"role":"assistant","content":"answer"}`, `{"role":"user","content":` + strconv.Quote(prompt) + `}`}), hdr: cc, upgrade: true, msgs: 2},

		{name: "turn naming the tags", body: ccWithLast(t, "Write the release notes: wrap your reasoning in <analysis> tags and put the result in <summary> tags."), hdr: cc},
		{name: "turn quoting the whole prompt", body: ccWithLast(t, "Explain this prompt to me:\n"+prompt), hdr: cc},
		{name: "the prompt, then the user's own text", body: ccWithLast(t, prompt+"\n\nActually, never mind that."), hdr: cc},
		{name: "the prompt without its reminder", body: ccWithLast(t, prompt[:strings.LastIndex(prompt, reminder)]), hdr: cc},
		{name: "partial compaction of the recent portion", body: ccWithLast(t, recent), hdr: cc},
		{name: "no claude code identity", body: string(ccRequest)},
		{name: "count_tokens", body: string(ccRequest), hdr: cc, a: Adapter{CountTokens: true}},
		{name: "forced tool", body: body(append(history(1), msg("user", prompt)), `"tool_choice":{"type":"any"}`), hdr: cc},
		{name: "last message is the assistant's", body: body(append(history(1), msg("user", prompt), msg("assistant", "ok"))), hdr: cc},
		{name: "nothing before the prompt", body: body([]string{msg("user", prompt)}), hdr: cc},
		{name: "an image beside the prompt", body: body(append(history(1), `{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},`+string(textBlock(prompt))+`]}`)), hdr: cc},
		{name: "a block after the prompt", body: body(append(history(1), `{"role":"user","content":[`+string(textBlock(prompt))+`,{"type":"text","text":"one more thing"}]}`)), hdr: cc},
		{name: "an on-demand compaction", body: body(append(history(1), msg("user", prompt)), `"compaction":{"type":"summarize"}`), hdr: cc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []envOption
			if tc.hdr != "" {
				v := tc.hdrVal
				if v == "" {
					v = "6f1c2d3e-aaaa-bbbb-cccc-0123456789ab"
				}
				opts = append(opts, withHeader(tc.hdr, v))
			}
			env, _ := newEnv(t, opts...)
			tt := parse(t, tc.a, env, tc.body)
			agent, r, ok := tt.Agent(env)
			if ok != tc.upgrade {
				t.Fatalf("Agent ok = %v, want %v", ok, tc.upgrade)
			}
			if !ok {
				return
			}
			if agent != "claude-code" || !r.Explicit || r.TokensBefore <= 0 || r.Prev != nil || r.Speculate {
				t.Errorf("agent %q, request %+v", agent, r)
			}
			if got := len(r.Units); got != tc.msgs {
				t.Errorf("%d messages to summarise, want %d", got, tc.msgs)
			}
			for _, it := range r.Items {
				if strings.Contains(string(it.Raw), "Your task is to create a detailed summary") {
					t.Fatal("the prompt is among what is summarised")
				}
			}
		})
	}
}

func textBlock(s string) []byte {
	b, _ := sjson.SetBytes([]byte(`{"type":"text","text":""}`), "text", s)
	return b
}

// The user's text beside the prompt in its last message is conversation: it is summarised, the
// prompt is not.
func TestAgentKeepsTextBesideThePrompt(t *testing.T) {
	env, _ := newEnv(t, withHeader("X-Claude-Code-Session-Id", "s"))
	last := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"b"},{"type":"text","text":"remember GIRAFFE_TOKEN_88"},` + string(textBlock(ccPromptText(t))) + `]}`
	tt := parse(t, Adapter{}, env, body(append(history(1), last)))
	_, r, ok := tt.Agent(env)
	if !ok {
		t.Fatal("not recognised")
	}
	var all strings.Builder
	for _, it := range r.Items {
		all.Write(it.Raw)
	}
	if !strings.Contains(all.String(), "GIRAFFE_TOKEN_88") || strings.Contains(all.String(), "Your task is to create") {
		t.Fatalf("summarised %s", all.String())
	}
}

// The answer is the one text block Claude Code parses, "<analysis>…</analysis>\n\n<summary>…
// </summary>", the ledger and then the recall note inside the summary block; streamed, the
// Messages event sequence after the keep-alives.
func TestAgentAnswer(t *testing.T) {
	note := turn.AgentRecallText("compactd_recall", "cref1.x.y.z")
	c := &engine.Compaction{Summary: "  the summary  ", Ledger: "Facts ledger:\n- port 7431", Usage: summarizer.Usage{InputTokens: 900, OutputTokens: 80}}
	want := "<analysis>\nThis summary was written by compactd from the whole conversation; the facts ledger in it lists hard facts (paths, numbers, identifiers) verbatim.\n</analysis>\n\n<summary>\nthe summary\n\nFacts ledger:\n- port 7431\n\n" + note + "\n</summary>"
	for _, tc := range []struct {
		name              string
		stream, committed bool
	}{{name: "json"}, {name: "stream", stream: true}, {name: "committed stream", stream: true, committed: true}} {
		t.Run(tc.name, func(t *testing.T) {
			env, _ := newEnv(t, withHeader("X-Claude-Code-Session-Id", "s"))
			extra := []string{}
			if tc.stream {
				extra = append(extra, `"stream":true`)
			}
			tt := parse(t, Adapter{}, env, body(append(history(1), msg("user", ccPromptText(t))), extra...))
			tt.Stream().Committed = tc.committed
			w := httptest.NewRecorder()
			tt.AgentAnswer(w, c, note)
			out := w.Body.String()
			if !tc.stream {
				if w.Code != 200 || gjson.Get(out, "content.#").Int() != 1 || gjson.Get(out, "content.0.text").Str != want ||
					gjson.Get(out, "stop_reason").Str != "end_turn" || gjson.Get(out, "usage.input_tokens").Int() != 900 ||
					gjson.Get(out, "usage.output_tokens").Int() != 80 || gjson.Get(out, "model").Str != "claude-test" ||
					!strings.HasPrefix(gjson.Get(out, "id").Str, "msg_compactd_") {
					t.Fatalf("answer %s", out)
				}
				return
			}
			if ct := w.Header().Get("Content-Type"); !tc.committed && ct != "text/event-stream; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			var types []string
			var text strings.Builder
			for _, ev := range events(t, out) {
				types = append(types, ev.Get("type").Str)
				text.WriteString(ev.Get("delta.text").Str)
			}
			if strings.Join(types, " ") != "message_start content_block_start content_block_delta content_block_stop message_delta message_stop" || text.String() != want {
				t.Fatalf("stream %s", out)
			}
		})
	}
	if got := claudeCodeSummaryText("s", ""); got != "<analysis>\nThis summary was written by compactd from the whole conversation; the facts ledger in it lists hard facts (paths, numbers, identifiers) verbatim.\n</analysis>\n\n<summary>\ns\n</summary>" {
		t.Errorf("without a ledger: %q", got)
	}
}

// A committed agent compaction with nothing to summarise ends with the on-demand refusal.
func TestAgentNothing(t *testing.T) {
	env, _ := newEnv(t)
	tt := parse(t, Adapter{}, env, body(history(1)))
	if f := tt.AgentNothing(); f == nil || f.Code != "compaction_nothing_to_summarize" || f.Message != "messages holds no user or assistant content to summarize." {
		t.Fatalf("AgentNothing = %+v", f)
	}
}

// events parses an SSE body into its events' data.
func events(t testing.TB, body string) []gjson.Result {
	t.Helper()
	var out []gjson.Result
	for _, block := range strings.Split(body, "\n\n") {
		for _, l := range strings.Split(block, "\n") {
			if d, ok := strings.CutPrefix(l, "data: "); ok {
				if !gjson.Valid(d) {
					t.Fatalf("event data is not JSON: %q", d)
				}
				out = append(out, gjson.Parse(d))
			}
		}
	}
	return out
}
