package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
)

// messagesCI is the CI-sized Messages run: one Claude Code session, three compactions, rounds
// of 500 steps (about 58k tokens, over the 50k trigger).
func messagesCI(seed uint64) Config {
	c := ciConfig(seed)
	c.API, c.Sessions, c.Shapes, c.Steps, c.Threshold = dialect.Messages, 1, nil, 10, 1000
	return c
}

// checkMessagesRequest fails unless body is a Messages request as the API accepts it: model and
// max_tokens, a first user message, user/assistant roles, text/tool_use/tool_result blocks only,
// every tool_result answering a tool_use of the message before, tools with an input_schema;
// and it must parse into the SDK's BetaMessageNewParams with the same messages and tools.
// upstream: what compactd forwarded, which must hold no compaction block or context_management.
func checkMessagesRequest(t *testing.T, where string, body []byte, upstream bool) {
	t.Helper()
	fail := func(f string, a ...any) { t.Helper(); t.Errorf(where+": "+f, a...) }
	root := gjson.ParseBytes(body)
	if root.Get("model").Str == "" || root.Get("max_tokens").Int() <= 0 {
		fail("model %q, max_tokens %d", root.Get("model").Str, root.Get("max_tokens").Int())
	}
	msgs := root.Get("messages").Array()
	if len(msgs) == 0 || msgs[0].Get("role").Str != "user" || msgs[len(msgs)-1].Get("role").Str != "user" {
		fail("%d messages, the first or the last not a user message (a last assistant message is a prefill)", len(msgs))
	}
	if upstream && root.Get("context_management").Exists() {
		fail("context_management was forwarded upstream")
	}
	prevUses := map[string]bool{}
	for i, m := range msgs {
		role := m.Get("role").Str
		if role != "user" && role != "assistant" {
			fail("messages.%d role %q", i, role)
		}
		uses := map[string]bool{}
		content := m.Get("content")
		if content.Type == gjson.String {
			prevUses = uses
			continue
		}
		if !content.IsArray() || len(content.Array()) == 0 {
			fail("messages.%d content is neither a string nor a non-empty list", i)
		}
		for j, b := range content.Array() {
			switch typ := b.Get("type").Str; typ {
			case "text":
				if b.Get("text").Type != gjson.String {
					fail("messages.%d.content.%d: text without text", i, j)
				}
			case "tool_use":
				if role != "assistant" || b.Get("id").Str == "" || b.Get("name").Str == "" || !b.Get("input").IsObject() {
					fail("messages.%d.content.%d: bad tool_use %s", i, j, b.Raw)
				}
				uses[b.Get("id").Str] = true
			case "tool_result":
				if role != "user" || !prevUses[b.Get("tool_use_id").Str] {
					fail("messages.%d.content.%d: tool_result %q answers no tool_use of the message before", i, j, b.Get("tool_use_id").Str)
				}
			case "compaction":
				if upstream || role != "assistant" {
					fail("messages.%d.content.%d: compaction block (upstream %v, role %s)", i, j, upstream, role)
				}
				if b.Get("encrypted_content").Str == "" {
					fail("messages.%d.content.%d: compaction block without encrypted_content", i, j)
				}
			default:
				fail("messages.%d.content.%d: block type %q", i, j, typ)
			}
		}
		prevUses = uses
	}
	for i, tool := range root.Get("tools").Array() {
		if tool.Get("name").Str == "" || !tool.Get("input_schema").IsObject() {
			fail("tools.%d: %s", i, tool.Raw)
		}
	}
	var p anthropic.BetaMessageNewParams
	if err := json.Unmarshal(body, &p); err != nil {
		fail("the SDK does not parse it: %v", err)
		return
	}
	if len(p.Messages) != len(msgs) || len(p.Tools) != len(root.Get("tools").Array()) || p.MaxTokens <= 0 {
		fail("the SDK reads %d messages and %d tools, max_tokens %d", len(p.Messages), len(p.Tools), p.MaxTokens)
	}
}

// TestEvalMessagesRun runs the CI-sized evaluation on the Messages route against the fake: every
// request the fake received on /v1/messages is a valid Messages request with no compaction
// plumbing left in it (the hidden recall rounds included), the key and version headers arrive,
// every round compacted, the configurations come out in order (<=: on a compactd whose Messages
// compactions carry no ledger they tie), (d) is measured and beats (c) at every checkpoint (it
// is (c) plus the recall tool, so it ties with (c) when the tool is not offered or not called),
// and the same seed reproduces the report.
func TestEvalMessagesRun(t *testing.T) {
	ctx := context.Background()
	cfg := messagesCI(1)
	cfg.APIKey = "sk-ant-eval-test"
	var fake *fakeupstream.Server
	cfg.recordFake, cfg.onFake = true, func(s *fakeupstream.Server) { fake = s }
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Route != "/v1/messages" || len(rep.Rows) != 4 {
		t.Fatalf("route %q, %d rows: want /v1/messages, 4", rep.Route, len(rep.Rows))
	}
	nMsgs := 0
	for i, r := range fake.Requests() {
		switch r.Kind {
		case dialect.Messages:
			nMsgs++
			checkMessagesRequest(t, fmt.Sprintf("upstream request %d", i), r.Body, true)
			if r.Header.Get("X-Api-Key") != cfg.APIKey || r.Header.Get("Anthropic-Version") != AnthropicVersion {
				t.Errorf("upstream request %d: x-api-key %q, anthropic-version %q", i, r.Header.Get("X-Api-Key"), r.Header.Get("Anthropic-Version"))
			}
		case fakeupstream.KindSummary:
		default:
			t.Errorf("upstream request %d is %s on %s: a Messages run sends only Messages turns and summariser calls", i, r.Kind, r.Path)
		}
	}
	// 4 variants × (3 rounds of at most 3 turns, a turn ending with the assistant going with the
	// next) and 3+9 questions each, and for (d) at most one hidden recall round per question
	// (after the tool_result the fake answers).
	if lo, hi := 4*(3+3+9), 4*(3*3+3+9)+3+9; nMsgs < lo || nMsgs > hi {
		t.Errorf("%d Messages requests upstream, want %d..%d", nMsgs, lo, hi)
	}
	if d := rep.Rows[3]; d.Variant.Name != "d" || d.NA != "" || len(d.Points) != len(rep.Config.Checkpoints) {
		t.Fatalf("(d) on Messages: n/a %q, %d points; want it measured at every checkpoint", d.NA, len(d.Points))
	}
	for i, d := range rep.Rows[3].Points {
		if c := rep.Rows[2].Points[i]; d.Correct <= c.Correct {
			t.Errorf("after %d compactions (d) answered %d, (c) %d: want recall strictly better", d.Compactions, d.Correct, c.Correct)
		}
	}
	for r := range 4 {
		row := rep.Rows[r]
		if row.NA != "" || row.Cost.Compactions != 3 || row.Cost.InputTokens <= 0 {
			t.Errorf("(%s) n/a %q, cost %+v: want 3 compactions with tokens", row.Variant.Name, row.NA, row.Cost)
		}
		for i, p := range row.Points {
			if p.Facts != 3*rep.Config.Checkpoints[i] {
				t.Errorf("(%s) after %d: %d facts asked", row.Variant.Name, p.Compactions, p.Facts)
			}
			if r > 0 && rep.Rows[r-1].Points[i].Correct > p.Correct {
				t.Errorf("after %d compactions (%s) answered %d > (%s) %d", p.Compactions,
					rep.Rows[r-1].Variant.Name, rep.Rows[r-1].Points[i].Correct, row.Variant.Name, p.Correct)
			}
		}
	}
	checkMeasured(t, rep, 3)
	again, err := Run(ctx, messagesCI(1))
	if err != nil {
		t.Fatal(err)
	}
	rep.Config.APIKey = ""
	if !bytes.Equal(stable(rep), stable(again)) {
		t.Error("two Messages runs with the same seed differ")
	}
}

// TestEvalMessagesClientRequests checks what the eval client itself sends compactd: a session's
// turns, including one that carries a compaction block back, are valid Messages requests, and
// the trigger is compact_20260112 at no less than compactd's minimum.
func TestEvalMessagesClientRequests(t *testing.T) {
	cfg := messagesCI(1).withDefaults()
	s := &session{cfg: cfg, shape: ShapeClaudeCode, seed: 1, variant: Variants[0]}
	seq := 0
	var h []antMsg
	for _, turn := range Session(1, 1, 30, 3, 3)[0].Turns {
		h = RenderMessages(h, turn, &seq)
	}
	if h[len(h)-1].Role != "user" {
		t.Fatal("a round does not end with the user")
	}
	if seq == 0 {
		t.Fatal("the session has no tool step")
	}
	body := s.messagesBody(h, true)
	checkMessagesRequest(t, "threshold turn", body, false)
	edit := gjson.GetBytes(body, "context_management.edits.0")
	if edit.Get("type").Str != "compact_20260112" || edit.Get("trigger.type").Str != "input_tokens" || edit.Get("trigger.value").Int() < 50000 {
		t.Errorf("compaction edit %s", edit.Raw)
	}
	var names []string
	for _, tool := range gjson.GetBytes(body, "tools").Array() {
		names = append(names, tool.Get("name").Str)
	}
	if strings.Join(names, ",") != "Read,Bash" {
		t.Errorf("tools %v, want Claude Code's Read and Bash", names)
	}
	// The block comes back as the SDK renders it, then the next round's steps.
	var msg anthropic.BetaMessage
	if err := json.Unmarshal([]byte(`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"compaction","content":"S","encrypted_content":"E"},{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`), &msg); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(msg.Content[0].AsCompaction().ToParam())
	if err != nil {
		t.Fatal(err)
	}
	h = append(h, antMsg{Role: "assistant", Content: []json.RawMessage{raw}})
	h = RenderMessages(h, Session(1, 2, 30, 3, 3)[1].Turns[0], &seq)
	body = s.messagesBody(h, false)
	checkMessagesRequest(t, "turn after compaction", body, false)
	if gjson.GetBytes(body, "context_management").Exists() {
		t.Error("a turn without the threshold carries context_management")
	}
	if got := gjson.GetBytes(body, `messages.#(content.0.type=="compaction").content.0`); got.Get("encrypted_content").Str != "E" || got.Get("content").Str != "S" {
		t.Errorf("compaction block carried back as %s", got.Raw)
	}
}

// TestEvalMessagesAnswer is the known-answer test on the Messages route: the fake, given the
// rendered Claude Code session as a Messages request, answers every kind from the tool_result
// and text blocks, and answers "unknown" when the fact is not in the request.
func TestEvalMessagesAnswer(t *testing.T) {
	fake := fakeupstream.New(fakeupstream.Options{Answer: Answer})
	fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	base, stop, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	s := &session{cfg: messagesCI(1).withDefaults(), client: http.DefaultClient, base: base, shape: ShapeClaudeCode, variant: Variants[0]}
	ask := func(h []antMsg, q string) string {
		t.Helper()
		h = append(h, antMsg{Role: "user", Content: []json.RawMessage{js(map[string]any{"type": "text", "text": q})}})
		out, err := s.postMessages(context.Background(), h, false)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, c := range out.Content {
			b.WriteString(c.Text)
		}
		return b.String()
	}
	g := newGen(11)
	for _, kind := range Kinds {
		steps, f := g.plant(kind, 1)
		seq := 0
		with := RenderMessages(nil, append([]Step{{Role: "user", Text: "Go on."}, g.noise(), g.noise()}, steps...), &seq)
		if got := ask(with, f.Question); got != f.Answer {
			t.Errorf("%s: answered %q, want %q", kind, got, f.Answer)
		}
		without := RenderMessages(nil, []Step{{Role: "user", Text: "Go on."}, g.noise()}, &seq)
		if got := ask(without, f.Question); got != fakeupstream.Unknown {
			t.Errorf("%s without the fact: answered %q, want %q", kind, got, fakeupstream.Unknown)
		}
	}
}

// TestEvalMessagesNA renders a Messages report with a configuration the route cannot run: every
// configuration runs on /v1/messages today, but should one not (messagesUnavailable), its row
// reads n/a with the reason in the text, JSON and HTML reports, the route is named in each, and
// the chart draws no line for it.
func TestEvalMessagesNA(t *testing.T) {
	rep := sampleReport()
	rep.Config.API, rep.Config.Shapes, rep.Route = dialect.Messages, []string{ShapeClaudeCode}, "/v1/messages"
	rep.Rows[3] = Row{Variant: Variants[3], NA: "no recall tool on this route"}
	var text, js, page bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(text.String(), "\n") {
		if strings.HasPrefix(line, "(d) +recall") && (strings.Contains(line, "%") || strings.Count(line, "n/a") < 3) {
			t.Errorf("text row of (d): %q", line)
		}
	}
	if !strings.Contains(text.String(), "route /v1/messages") || !strings.Contains(text.String(), "no recall tool") {
		t.Errorf("text report:\n%s", text.String())
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	j := gjson.ParseBytes(js.Bytes())
	if j.Get("route").Str != "/v1/messages" || j.Get("config.api").Str != "messages" || j.Get("rows.3.unavailable").Str == "" ||
		j.Get("rows.3.points").Exists() && len(j.Get("rows.3.points").Array()) > 0 || j.Get("rows.2.unavailable").Exists() {
		t.Errorf("JSON: route %s, api %s, rows.3 %s", j.Get("route").Raw, j.Get("config.api").Raw, j.Get("rows.3").Raw)
	}
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	h := page.String()
	if strings.Count(h, `class="series"`) != 3 || !strings.Contains(h, "(d) +recall: n/a") || !strings.Contains(h, "<td colspan=\"3\">n/a: ") || !strings.Contains(h, "route /v1/messages") {
		t.Errorf("HTML report: %d series, (d) n/a legend %v", strings.Count(h, `class="series"`), strings.Contains(h, "(d) +recall: n/a"))
	}
}

// TestEvalMessagesConfig: shapes that cannot speak Messages are refused, and the Messages round
// is scaled to reach the trigger.
func TestEvalMessagesConfig(t *testing.T) {
	cfg := messagesCI(1)
	cfg.Shapes = []string{ShapeCodex}
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "Responses") {
		t.Errorf("codex on Messages: %v", err)
	}
	cfg.Shapes, cfg.API = nil, "grpc"
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "unknown API") {
		t.Errorf("unknown API: %v", err)
	}
	for _, tc := range []struct{ steps, threshold, want int }{{12, 1000, 600}, {24, 2000, 600}, {24, 100000, 24}, {10, 30000, 17}} {
		c := Config{Steps: tc.steps, Threshold: tc.threshold}
		if got := c.MessagesSteps(); got != tc.want {
			t.Errorf("MessagesSteps(%d steps, threshold %d) = %d, want %d", tc.steps, tc.threshold, got, tc.want)
		}
	}
	if d := messagesCI(1).withDefaults(); len(d.Shapes) != 1 || d.Shapes[0] != ShapeClaudeCode {
		t.Errorf("default Messages shapes %v", d.Shapes)
	}
}

// TestEvalMessagesDelivers: with a summariser that keeps every detail, the facts come back
// through compactd's Messages handoff, so a Messages score of 0 means lost, not undelivered.
func TestEvalMessagesDelivers(t *testing.T) {
	cfg := messagesCI(1)
	cfg.Checkpoints, cfg.Variants = []int{1}, []string{"a"}
	cfg.Lossy.Keep, cfg.Lossy.MaxLines = 1, 1<<20
	cfg.SummaryTokens = 1 << 16 // a summary of every detail needs the budget for it
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p := rep.Rows[0].Points[0]; p.Facts != 3 || p.Correct != 3 {
		t.Errorf("lossless summary on Messages: %d/%d answered, want all 3; answers %+v", p.Correct, p.Facts, rep.Rows[0].Answers)
	}
}
