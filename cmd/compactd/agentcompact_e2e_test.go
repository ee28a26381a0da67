package main

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/fakeupstream"
)

// claudeCodePrompt is a phrase of Claude Code's own summarisation prompt (2.1.332).
const claudeCodePrompt = "create a detailed summary of the conversation so far"

// TestClaudeCodeCompactionUpgradedEndToEnd runs the real Claude Code through `compactd serve`
// (ANTHROPIC_BASE_URL is compactd) in front of the fake upstream. The fact lives only in a file
// the agent Read. On /compact compactd answers Claude Code's summarisation turn itself: the
// upstream never sees Claude Code's prompt, compactd's summariser (with compactd's prompt) sees
// the tool output, the raw conversation is archived under Claude Code's session id, and the
// request Claude Code sends after the compaction carries compactd's summary and the ledger line
// with the fact. On the turn after, the fake model calls compactd's recall tool: compactd answers
// it from the session's archive in hidden rounds, Claude Code gets the fact back in the model's
// answer, and its transcript holds no call of the tool.
func TestClaudeCodeCompactionUpgradedEndToEnd(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	if testing.Short() {
		t.Skip("runs the real Claude Code")
	}
	rig := newClaudeRig(t)
	claude, fake, key, db, r, e := rig.claude, rig.fake, rig.key, rig.db, rig.r, rig.e

	id := e.claudeTurn(t, claude, e.readPrompt())
	e.claudeTurn(t, claude, "--resume", id, "/compact")
	out := e.run(t, claude, "-p", "--output-format", "json", "--resume", id,
		`what was the port? [[call:compactd_recall {"query":"SECRET_FACT_PORT"}]]`)
	if gjson.Get(out, "is_error").Bool() || !strings.Contains(gjson.Get(out, "result").Str, agentFact) {
		t.Errorf("the turn after the compaction did not get the fact back through recall:\n%.1500s", out)
	}

	bodies := messagesBodies(fake)
	for i, b := range bodies {
		if strings.Contains(b, claudeCodePrompt) {
			t.Fatalf("Messages request %d carries Claude Code's summarisation prompt: compactd did not answer it", i)
		}
	}
	var sums []fakeupstream.Recorded
	for _, rec := range fake.Requests() {
		if rec.Kind == fakeupstream.KindSummary {
			sums = append(sums, rec)
		}
	}
	if len(sums) == 0 {
		t.Fatal("compactd's summariser was never called")
	}
	if s := string(sums[0].Body); !strings.Contains(s, "You are compacting a conversation") || strings.Contains(s, claudeCodePrompt) || !strings.Contains(s, agentFact) {
		t.Errorf("the summariser did not get compactd's prompt over the conversation with the tool output:\n%.800s", s)
	}
	after := ""
	for _, b := range bodies {
		if strings.Contains(b, "This session is being continued") {
			after = b
		}
	}
	if after == "" {
		t.Fatalf("no request after the compaction starts with Claude Code's continuation text (%d Messages requests)", len(bodies))
	}
	cont := section(after, "This session is being continued", 8000)
	if !strings.Contains(cont, "FAKE-SUMMARY") {
		t.Errorf("the post-compaction request does not carry compactd's summary:\n%s", cont)
	}
	if !strings.Contains(cont, "Facts ledger") || !strings.Contains(cont, agentFact) {
		t.Errorf("the post-compaction request lacks the ledger line with %q:\n%s", agentFact, cont)
	}
	if strings.Contains(cont, "compactd (SessionStart hook)") {
		t.Error("hooks are not installed here; the ledger must come from the upgraded compaction")
	}
	checkHiddenRecall(t, bodies, e, id)
	if !r.logged(`"trigger":"agent"`) {
		t.Errorf("compactd logged no agent compaction:\n%s", r.log)
	}

	r.stop(t)
	ring, err := crypto.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := archive.KeyringSealer(ring, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store, err := archive.Open(ctx, db, sealer)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	hits, err := store.Search(ctx, archive.Query{Text: "SECRET_FACT_PORT", Conversation: id})
	if err != nil || len(hits) == 0 {
		convs, _ := store.Conversations(ctx, "")
		t.Fatalf("the fact is not archived under the session id %s: %v %v (conversations %+v)", id, hits, err, convs)
	}
	if hits, _ := store.Search(ctx, archive.Query{Text: "detailed summary paying close attention", Conversation: id}); len(hits) != 0 {
		t.Errorf("Claude Code's summarisation prompt was archived: %+v", hits)
	}
}

// checkHiddenRecall checks the recall turn of a Claude Code session: a Messages request offered
// the recall tool (an Anthropic custom tool, Claude Code's own tools kept), a later one carried
// its tool_result with the fact from the archive, and Claude Code's transcript of the session
// holds no call or result of the tool.
func checkHiddenRecall(t *testing.T, bodies []string, e agentEnv, session string) {
	t.Helper()
	offered, answered := false, false
	for _, b := range bodies {
		tools := gjson.Get(b, "tools")
		if tool := gjson.Get(b, `tools.#(name=="compactd_recall")`); tool.Exists() {
			offered = offered || tool.Get("input_schema").Exists() && gjson.Get(tools.Raw, `#(name=="Read")`).Exists()
		}
		gjson.Get(b, "messages.@reverse.0.content").ForEach(func(_, blk gjson.Result) bool {
			if blk.Get("type").Str == "tool_result" && strings.Contains(blk.Get("content").String(), agentFact) &&
				strings.Contains(blk.Get("content").String(), "Verbatim excerpts") {
				answered = true
			}
			return true
		})
	}
	if !offered || !answered {
		t.Errorf("recall offered %v, its result with the fact fed back %v; want both", offered, answered)
	}
	paths, _ := filepath.Glob(filepath.Join(e.home, ".claude", "projects", "*", session+".jsonl"))
	if len(paths) != 1 {
		t.Fatalf("transcript of session %s: found %v", session, paths)
	}
	f, err := os.Open(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	lines := 0
	for sc.Scan() {
		lines++
		gjson.GetBytes(sc.Bytes(), "message.content").ForEach(func(_, blk gjson.Result) bool {
			if typ := blk.Get("type").Str; (typ == "tool_use" || typ == "tool_result") &&
				(blk.Get("name").Str == "compactd_recall" || strings.Contains(blk.Get("content").String(), "Verbatim excerpts")) {
				t.Errorf("Claude Code's transcript holds a recall %s: %.300s", typ, blk.Raw)
			}
			return true
		})
	}
	if err := sc.Err(); err != nil || lines == 0 {
		t.Fatalf("transcript %s: %d lines, %v", paths[0], lines, err)
	}
}
