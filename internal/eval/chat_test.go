package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
)

// chatCI is the CI-sized Chat run: two chat-agent sessions, three compactions, the Chat route's
// defaults otherwise.
func chatCI(seed uint64) Config {
	c := ciConfig(seed)
	c.API, c.Shapes, c.Steps, c.Threshold, c.Turns = dialect.Chat, nil, 0, 0, 0
	return c
}

// TestEvalRenderChat: a chat-agent session renders as Chat Completions messages the strict fake
// upstream (the real API's rules) accepts: string user and assistant messages, one assistant
// message with tool_calls per tool step (content null, JSON arguments) answered by its "tool"
// message; a failed command says its exit code.
func TestEvalRenderChat(t *testing.T) {
	fake := fakeupstream.New(fakeupstream.Options{})
	fake.FailOnRefusal(t)
	base, stop, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	seq := 0
	history := []json.RawMessage{js(map[string]any{"role": "system", "content": chatSystem})}
	for _, r := range Session(4, 2, 12, 6, 1) {
		for _, turn := range r.Turns {
			history = RenderChat(history, turn, &seq)
		}
	}
	tools, calls, failed := 0, map[string]bool{}, false
	for i, m := range history {
		g := gjson.ParseBytes(m)
		switch g.Get("role").Str {
		case "assistant":
			if tc := g.Get("tool_calls"); tc.Exists() {
				fn := tc.Get("0.function")
				if len(tc.Array()) != 1 || g.Get("content").Type != gjson.Null || !gjson.Valid(fn.Get("arguments").Str) ||
					(fn.Get("name").Str != "read_file" && fn.Get("name").Str != "run_shell_command") {
					t.Errorf("message %d: %s", i, m)
				}
				calls[tc.Get("0.id").Str] = true
			} else if g.Get("content").Type != gjson.String {
				t.Errorf("message %d: %s", i, m)
			}
		case "tool":
			tools++
			if !calls[g.Get("tool_call_id").Str] {
				t.Errorf("message %d answers no call: %s", i, m)
			}
			failed = failed || strings.Contains(g.Get("content").Str, "Exit Code: 1\n")
		}
	}
	if tools == 0 || tools != len(calls) || !failed {
		t.Errorf("%d tool messages for %d calls (a failed command among them: %v)", tools, len(calls), failed)
	}
	body := js(map[string]any{"model": "m", "messages": append(history, js(map[string]any{"role": "user", "content": "go on"})), "tools": chatTools()})
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("the strict upstream answered %d: %s", resp.StatusCode, out)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestEvalChatRun runs the CI-sized evaluation on /v1/chat/completions against the fake: every
// configuration runs, in the expected order, recall strictly above the summary alone; the
// client saw each round compact exactly once (compactd's X-Compactd-Compaction header), as
// many as compactd's event log reports, and no question turn was compacted; the upstream got
// the compacted conversation (a handoff in place of the history) and, in (d), compactd's recall
// rounds; and the same seed reproduces the report.
func TestEvalChatRun(t *testing.T) {
	ctx := context.Background()
	cfg := chatCI(1)
	var fake *fakeupstream.Server
	cfg.recordFake, cfg.onFake = true, func(f *fakeupstream.Server) { fake = f }
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Route != "/v1/chat/completions" || len(rep.Rows) != 4 || rep.Config.Turns != 1 || rep.Config.Threshold != 4000 {
		t.Fatalf("route %s, %d rows, config %+v", rep.Route, len(rep.Rows), rep.Config)
	}
	for i := range rep.Config.Checkpoints {
		for r := 1; r < len(rep.Rows); r++ {
			if lo, hi := rep.Rows[r-1].Points[i], rep.Rows[r].Points[i]; lo.Correct > hi.Correct {
				t.Errorf("after %d: (%s) %d > (%s) %d", lo.Compactions, rep.Rows[r-1].Variant.Name, lo.Correct, rep.Rows[r].Variant.Name, hi.Correct)
			}
		}
		if a, d := rep.Rows[0].Points[i], rep.Rows[3].Points[i]; d.Correct <= a.Correct || a.Facts == 0 {
			t.Errorf("after %d: summary %d/%d, recall %d/%d", a.Compactions, a.Correct, a.Facts, d.Correct, d.Facts)
		}
	}
	for _, row := range rep.Rows {
		if row.ExtraCompactions != 0 || row.QuestionCompactions != 0 || row.note() != "" {
			t.Errorf("(%s) %d extra compactions, %d question turns compacted", row.Variant.Name, row.ExtraCompactions, row.QuestionCompactions)
		}
	}
	checkMeasured(t, rep, 2*3)
	handoffs, recalls := 0, 0
	for _, r := range fake.Requests() {
		if r.Kind != dialect.Chat {
			continue
		}
		msgs := gjson.GetBytes(r.Body, "messages").Array()
		for _, m := range msgs {
			if m.Get("role").Str == "user" && strings.Contains(m.Get("content").Str, "<summary>") {
				handoffs++
				break
			}
		}
		if n := len(msgs); n > 1 && msgs[n-1].Get("role").Str == "tool" && strings.Contains(msgs[n-2].Get("tool_calls.0.function.name").Str, "recall") {
			recalls++
		}
	}
	if handoffs == 0 || recalls == 0 {
		t.Errorf("the upstream saw %d turns with a handoff and %d recall rounds; want both", handoffs, recalls)
	}
	again, err := Run(ctx, chatCI(1))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stable(rep), stable(again)) {
		t.Error("two Chat runs with the same seed differ")
	}
}

// TestEvalChatThresholdTooLow: at a threshold below what a compacted conversation holds (the
// summary and a full ledger), the Chat route's policy compacts the turn after a compaction
// again, question turns included; the report counts and says so rather than passing the
// twice-compacted answers off as the checkpoint's.
func TestEvalChatThresholdTooLow(t *testing.T) {
	cfg := chatCI(1)
	cfg.Sessions, cfg.Checkpoints, cfg.Variants = 1, []int{2}, []string{"b"}
	cfg.Threshold, cfg.Steps, cfg.Turns = 2000, 24, 3
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	row := rep.Rows[0]
	if row.QuestionCompactions == 0 || row.ExtraCompactions == 0 || row.Ratio.Compactions != row.Cost.Compactions {
		t.Errorf("%d question turns and %d extra compactions counted; %d compactions by the event log, %d by the client", row.QuestionCompactions, row.ExtraCompactions, row.Ratio.Compactions, row.Cost.Compactions)
	}
	var text bytes.Buffer
	_ = rep.WriteText(&text)
	if !strings.Contains(text.String(), "note: (b) +ledger:") || !strings.Contains(text.String(), "question turns compacted") {
		t.Errorf("text report says nothing of it:\n%s", text.String())
	}
}
