package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/fakeupstream"
)

// The real Claude Code under compactd's transparent policy (issue 15): Claude Code never asks
// for compaction, so with `--compact-threshold messages=N` compactd compacts the upstream's view
// of its session, the memo re-applies that compaction on every later turn, recall brings back
// what the summary dropped, and Claude Code sees none of it.

// bigFileFact lives only in the first data file Claude Code reads: it reaches the conversation
// as one line of a large tool output, and nowhere else.
const (
	bigFileFactLine = "release_bucket: SECRET_FACT_BUCKET=amber-4711"
	bigFileFact     = "SECRET_FACT_BUCKET=amber-4711"
)

// The policy threshold (compactd's estimate of the upstream request) and Claude Code's own
// auto-compact trigger. Claude Code 2.1.332 resolves its trigger as
// min(window·pct/100, window−13000), window = CLAUDE_CODE_AUTO_COMPACT_WINDOW (at least 100000)
// minus min(max output tokens, 20000), and compares it with the usage of its last response
// (input + cache tokens + output; of the last `message` entry of usage.iterations when there is
// one, so a recall turn's usage summed over its hidden rounds is not counted twice) plus its
// estimate of what it appended since: 100000 and 50% make 40000. The session below grows
// Claude Code's own history to about 55000 tokens (of the fake's count, text bytes / 4), so
// without compactd's compaction Claude Code must compact on its own.
const (
	transparentThreshold = 35000
	claudeAutoCompactPct = "50"
	claudeAutoCompactTok = 40000
	bigFiles, bigFileLen = 7, 24000
)

// writeBigFiles writes n files of about size bytes each into dir, every line distinct; the fact
// is a line near the top of the first.
func writeBigFiles(t *testing.T, dir string, n, size int) []string {
	t.Helper()
	var paths []string
	for f := range n {
		var b strings.Builder
		for l := 0; b.Len() < size; l++ {
			if f == 0 && l == 40 {
				b.WriteString(bigFileFactLine + "\n")
			}
			fmt.Fprintf(&b, "file %d line %04d: measurement series %d-%d reads %d.%03d units, checksum %08x\n",
				f, l, f, l, (f*7+l*13)%997, (l*37)%1000, uint32(f*2654435761+l*40503))
		}
		p := filepath.Join(dir, fmt.Sprintf("data%02d.log", f))
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// readBigPrompt makes the fake model Read path. The directive sits past the first 80
// characters, so the fake summary (which quotes the first 80 of each user entry) never carries
// a whole one into a handoff the fake model would act on again.
func readBigPrompt(turn int, path string) string {
	return fmt.Sprintf("Turn %d of the audit: read the next data file in full and keep what it says in mind. [[call:Read {\"file_path\":%q}]]", turn, path)
}

// recallPrompt is the late turn: the fake model calls compactd's recall tool.
const recallPrompt = `Which bucket did the first data file name? Look it up in the earlier part of the conversation. [[call:compactd_recall {"query":"SECRET_FACT_BUCKET"}]]`

// clientTap sits between Claude Code and compactd and records, per Messages request, the size
// of what Claude Code sent and the X-Compactd-* headers it got back: Claude Code shows neither.
type clientTap struct {
	mu    sync.Mutex
	turns []tapTurn
}

type tapTurn struct {
	path                        string
	sent                        int64 // fakeupstream.InputTokens of Claude Code's body
	compaction, agentCompaction string
	status                      int
}

type tapKey struct{}

// start serves the tap on a loopback port in front of target and returns its base URL.
func (c *clientTap) start(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // SSE goes through as it comes
	tr := &http.Transport{}
	rp.Transport = tr
	t.Cleanup(tr.CloseIdleConnections)
	rp.ModifyResponse = func(resp *http.Response) error {
		if tt, ok := resp.Request.Context().Value(tapKey{}).(*tapTurn); ok {
			tt.compaction = resp.Header.Get("X-Compactd-Compaction")
			tt.agentCompaction = resp.Header.Get("X-Compactd-Agent-Compaction")
			tt.status = resp.StatusCode
			c.mu.Lock()
			c.turns = append(c.turns, *tt)
			c.mu.Unlock()
		}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/messages") {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			tt := &tapTurn{path: r.URL.Path, sent: fakeupstream.InputTokens(body)}
			r = r.WithContext(context.WithValue(r.Context(), tapKey{}, tt))
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (c *clientTap) all() []tapTurn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.turns)
}

// messagesTurns are the tapped /v1/messages requests (count_tokens left out).
func (c *clientTap) messagesTurns() []tapTurn {
	var out []tapTurn
	for _, tt := range c.all() {
		if tt.path == "/v1/messages" {
			out = append(out, tt)
		}
	}
	return out
}

// transcriptLines are the lines of Claude Code's transcript of a session.
func transcriptLines(t *testing.T, e agentEnv, session string) []string {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(e.home, ".claude", "projects", "*", session+".jsonl"))
	if len(paths) != 1 {
		t.Fatalf("transcript of session %s: found %v", session, paths)
	}
	f, err := os.Open(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// claudeBin is the pinned Claude Code (these tests need no compactd build of their own: the
// replica is the deploy build); it skips in -short mode.
func claudeBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the real Claude Code")
	}
	return npmAgent(t, "claude", "@anthropic-ai/claude-code", claudeCodeVersion, "claude", "COMPACTD_CLAUDE_BIN")
}

// ccSession is one Claude Code session driven through compactd (and the tap) to the fake.
type ccSession struct {
	fake   *fakeupstream.Server
	r      *replica
	tap    *clientTap
	e      agentEnv
	id     string
	answer string // the recall turn's result, as Claude Code printed it
}

// runClaudeCodeSession starts compactd with extra flags in front of the fake, and runs Claude
// Code with its auto-compact trigger at claudeAutoCompactTok: one -p turn and --resume turns,
// each reading one big data file, then the recall turn.
func runClaudeCodeSession(t *testing.T, claude string, extra ...string) ccSession {
	t.Helper()
	fake := fakeupstream.New(fakeupstream.Options{})
	fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	baseURL, stop, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--anthropic-upstream", baseURL, "--archive", filepath.Join(t.TempDir(), "archive.db")}, extra...)
	r := startReplica(t, "compactd", baseURL, key.String(), args...)
	tap := &clientTap{}
	e := newAgentEnv(t, tap.start(t, "http://"+r.addr))
	e.env = append(e.env, "CLAUDE_CODE_AUTO_COMPACT_WINDOW=100000", "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE="+claudeAutoCompactPct)
	files := writeBigFiles(t, e.work, bigFiles, bigFileLen)

	s := ccSession{fake: fake, r: r, tap: tap, e: e}
	s.id = e.claudeTurn(t, claude, readBigPrompt(1, files[0]))
	for i, f := range files[1:] {
		if id := e.claudeTurn(t, claude, "--resume", s.id, readBigPrompt(i+2, f)); id != s.id {
			t.Fatalf("--resume %s went on as session %s", s.id, id)
		}
	}
	out := e.run(t, claude, "-p", "--output-format", "json", "--resume", s.id, recallPrompt)
	if gjson.Get(out, "is_error").Bool() {
		t.Fatalf("the recall turn failed: %.1500s", out)
	}
	s.answer = gjson.Get(out, "result").Str
	for i, tt := range tap.all() {
		t.Logf("client request %2d %-26s %6d tokens sent, status %d, X-Compactd-Compaction %q, X-Compactd-Agent-Compaction %q",
			i, tt.path, tt.sent, tt.status, tt.compaction, tt.agentCompaction)
	}
	for i, rec := range fake.Requests() {
		t.Logf("upstream request %2d %-12s %6d tokens", i, rec.Kind, fakeupstream.InputTokens(rec.Body))
	}
	return s
}

// summaries counts the summariser calls the fake answered.
func (s ccSession) summaries() int {
	n := 0
	for _, rec := range s.fake.Requests() {
		if rec.Kind == fakeupstream.KindSummary {
			n++
		}
	}
	return n
}

// usages are the context sizes Claude Code reads from the usage of every assistant message in
// its transcript, what it decides auto-compaction from: input + cache tokens of the last
// `message` entry of usage.iterations when there is one (a recall turn's top-level usage is
// summed over its hidden rounds; 2.1.332 counts the last round), else of the top level.
func (s ccSession) usages(t *testing.T) []int64 {
	t.Helper()
	var out []int64
	for _, l := range transcriptLines(t, s.e, s.id) {
		u := gjson.Get(l, "message.usage")
		if !u.Exists() || gjson.Get(l, "type").Str != "assistant" {
			continue
		}
		if it := u.Get(`iterations.#(type=="message")#|@reverse|0`); it.Exists() {
			u = it
		}
		out = append(out, u.Get("input_tokens").Int()+u.Get("cache_creation_input_tokens").Int()+u.Get("cache_read_input_tokens").Int())
	}
	return out
}

// TestClaudeCodeTransparentPolicyEndToEnd runs the real Claude Code through `compactd serve
// --compact-threshold messages=35000` in front of the fake upstream: a -p turn and --resume
// turns, each reading a 24 KB file, so Claude Code's own history grows to about 1.6 times
// the threshold; then a turn in which the fake model calls compactd's recall tool for a fact that
// was only in the first file.
//
//   - Upstream input stays bounded: every upstream request is under the threshold, while what
//     Claude Code sends grows far past it, and the usage Claude Code is told is the upstream's.
//   - One summariser call per compaction: the calls equal the X-Compactd-Compaction
//     "compacted" turns and compactd_compactions_total; every turn after the first compaction
//     is either one of them or a memo hit ("applied", compactd_memo_total{outcome="hit"}), never
//     two compactions in a row, and every upstream request between two compactions starts with
//     the same handoff, byte for byte.
//   - The recall turn gets the fact back from the archive in Claude Code's answer.
//   - Claude Code never sees a compaction block or a recall call (its transcript), its own tool
//     calls work (every Read has its result), and every turn exits 0.
//   - Claude Code's auto-compact trigger is set to 40000 tokens: it never sends its own
//     summarisation request, because the usage it is told stays under it (the control in
//     TestClaudeCodeAutoCompactControl shows it does without the policy).
func TestClaudeCodeTransparentPolicyEndToEnd(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	claude := claudeBin(t)
	// Speculation off: a background summary of a prefix no later turn uses would be a summariser
	// call without a compaction, and this test counts them.
	s := runClaudeCodeSession(t, claude, "--compact-threshold", fmt.Sprintf("messages=%d", transparentThreshold), "--speculative-fraction", "0")

	// (1) Bounded: the upstream's view, against what Claude Code sent.
	var sentMax int64
	for _, tt := range s.tap.messagesTurns() {
		sentMax = max(sentMax, tt.sent)
		if tt.status != http.StatusOK {
			t.Errorf("a Claude Code request got status %d", tt.status)
		}
	}
	if sentMax < transparentThreshold*7/5 {
		t.Fatalf("Claude Code's own requests grew only to %d tokens: the session is too short to show anything", sentMax)
	}
	bodies := messagesBodies(s.fake)
	for i, b := range bodies {
		if n := fakeupstream.InputTokens([]byte(b)); n >= transparentThreshold {
			t.Errorf("upstream request %d carries %d input tokens, past the threshold %d", i, n, transparentThreshold)
		}
	}
	t.Logf("usage Claude Code was told of, per assistant message: %v", s.usages(t))
	for i, u := range s.usages(t) {
		if u >= min(transparentThreshold, claudeAutoCompactTok) {
			t.Errorf("Claude Code was told of %d input tokens (message %d), past the threshold", u, i)
		}
	}

	// (2) One summariser call per compaction; memo hits between.
	compacted, applied, first := 0, 0, -1
	turns := s.tap.messagesTurns()
	for i, tt := range turns {
		switch {
		case strings.HasPrefix(tt.compaction, "compacted;"):
			if i > 0 && strings.HasPrefix(turns[i-1].compaction, "compacted;") {
				t.Errorf("requests %d and %d both summarised", i-1, i)
			}
			compacted++
			if first < 0 {
				first = i
			}
		case strings.HasPrefix(tt.compaction, "applied;"):
			applied++
		case first >= 0:
			t.Errorf("request %d after the first compaction got neither a compaction nor the memo's: %q", i, tt.compaction)
		}
		if tt.agentCompaction != "" {
			t.Errorf("request %d was Claude Code's own compaction (%s): its auto-compact fired", i, tt.agentCompaction)
		}
	}
	if compacted < 2 || applied < compacted {
		t.Fatalf("%d compactions and %d memo hits: want at least 2 compactions, each followed by memo hits", compacted, applied)
	}
	if n := s.summaries(); n != compacted {
		t.Errorf("%d summariser calls for %d compactions", n, compacted)
	}
	if v := metric(t, s.r, `compactd_compactions_total{api="messages",outcome="ok",trigger="policy"}`); v != fmt.Sprint(compacted) {
		t.Errorf("compactd_compactions_total (policy, ok) = %q, want %d", v, compacted)
	}
	// A turn that got the memo's compaction and then grew past the threshold is a memo hit too:
	// it compacts again, chained to the one it got (a "compacted" header).
	if v := metric(t, s.r, `compactd_memo_total{outcome="hit"}`); v != fmt.Sprint(applied+compacted-1) {
		t.Errorf("compactd_memo_total{hit} = %q, want %d (the applied turns and the chained compactions)", v, applied+compacted-1)
	}
	// Between two compactions the upstream's prefix (system, tools, handoff) is the same bytes.
	var epoch, prevHandoff string
	handoffs := 0
	for i, b := range bodies {
		first := gjson.Get(b, "messages.0.content").Raw
		if !strings.Contains(first, "Another language model worked on this conversation") {
			continue // before the first compaction
		}
		// The current turn is kept verbatim behind the handoff: the prompt Claude Code is
		// answering reaches the model as the user wrote it, not only as a line of the summary.
		rest := ""
		for _, m := range gjson.Get(b, "messages").Array()[1:] {
			rest += m.Raw
		}
		if !strings.Contains(rest, "of the audit: read the next data file") && !strings.Contains(rest, "Which bucket did the first data file name?") {
			t.Errorf("upstream request %d: the current turn's prompt is not behind the handoff", i)
		}
		prefix := gjson.Get(b, "system").Raw + gjson.Get(b, "tools").Raw + first
		if first != prevHandoff {
			handoffs++
			prevHandoff, epoch = first, prefix
			continue
		}
		if prefix != epoch {
			t.Errorf("upstream request %d: the prefix changed between two compactions", i)
		}
	}
	if handoffs != compacted {
		t.Errorf("%d distinct handoffs upstream for %d compactions", handoffs, compacted)
	}

	// (3) The late turn recalls the fact from the archive.
	if !strings.Contains(s.answer, "Recalled with compactd_recall") || !strings.Contains(s.answer, bigFileFact) {
		t.Errorf("the recall turn's answer lacks the fact %q:\n%.1500s", bigFileFact, s.answer)
	}
	checkHiddenRecallFact(t, bodies, s.e, s.id, bigFileFact)

	// (4) Claude Code saw neither compaction nor recall, and its own tools worked.
	checkClientUntouched(t, s)
	for i, b := range bodies {
		if strings.Contains(b, claudeCodePrompt) {
			t.Errorf("upstream request %d is Claude Code's own summarisation request", i)
		}
	}
}

// TestClaudeCodeAutoCompactControl is the control of the auto-compact finding: the same
// session, the same Claude Code settings (auto-compact trigger 40000), and no policy. Claude
// Code's history passes its trigger and it compacts on its own: its summarisation request is
// answered by compactd's agent-compaction upgrade (X-Compactd-Agent-Compaction: claude-code,
// trigger "agent"), never reaching the upstream. With the policy on
// (TestClaudeCodeTransparentPolicyEndToEnd) no such request is sent.
func TestClaudeCodeAutoCompactControl(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	claude := claudeBin(t)
	s := runClaudeCodeSession(t, claude, "--speculative-fraction", "0")
	agent := 0
	for _, tt := range s.tap.messagesTurns() {
		if tt.compaction != "" {
			t.Errorf("a compaction without a policy: %q", tt.compaction)
		}
		if tt.agentCompaction == "claude-code" {
			agent++
		}
	}
	if agent == 0 {
		t.Fatal("Claude Code never compacted on its own: the control shows nothing")
	}
	if n := s.summaries(); n != agent {
		t.Errorf("%d summariser calls for %d upgraded Claude Code compactions", n, agent)
	}
	for i, b := range messagesBodies(s.fake) {
		if strings.Contains(b, claudeCodePrompt) {
			t.Errorf("upstream request %d is Claude Code's summarisation request: compactd did not answer it", i)
		}
	}
	if !s.r.logged(`"trigger":"agent"`) {
		t.Errorf("compactd logged no agent compaction:\n%s", s.r.log)
	}
	peak := int64(0)
	for _, u := range s.usages(t) {
		peak = max(peak, u)
	}
	t.Logf("Claude Code compacted %d times on its own; usage it was told of, per assistant message: %v (peak %d)", agent, s.usages(t), peak)
}

// checkHiddenRecallFact is checkHiddenRecall for another fact: the recall tool was offered
// upstream, its tool_result carried fact, and Claude Code's transcript holds no call of it.
func checkHiddenRecallFact(t *testing.T, bodies []string, e agentEnv, session, fact string) {
	t.Helper()
	offered, answered := false, false
	for _, b := range bodies {
		if tool := gjson.Get(b, `tools.#(name=="compactd_recall")`); tool.Exists() && gjson.Get(b, `tools.#(name=="Read")`).Exists() {
			offered = true
		}
		gjson.Get(b, "messages.@reverse.0.content").ForEach(func(_, blk gjson.Result) bool {
			c := blk.Get("content").String()
			answered = answered || blk.Get("type").Str == "tool_result" && strings.Contains(c, fact) && strings.Contains(c, "Verbatim excerpts")
			return true
		})
	}
	if !offered || !answered {
		t.Errorf("recall offered %v, its result with the fact fed back %v; want both", offered, answered)
	}
	for _, l := range transcriptLines(t, e, session) {
		gjson.Get(l, "message.content").ForEach(func(_, blk gjson.Result) bool {
			if typ := blk.Get("type").Str; (typ == "tool_use" || typ == "tool_result") &&
				(blk.Get("name").Str == "compactd_recall" || strings.Contains(blk.Get("content").String(), "Verbatim excerpts")) {
				t.Errorf("Claude Code's transcript holds a recall %s: %.300s", typ, blk.Raw)
			}
			return true
		})
	}
}

// checkClientUntouched: Claude Code's transcript holds no compaction block, no sealed content,
// no compaction summary of its own, and a result for every Read it ran.
func checkClientUntouched(t *testing.T, s ccSession) {
	t.Helper()
	reads, results := map[string]bool{}, map[string]bool{}
	for _, l := range transcriptLines(t, s.e, s.id) {
		if gjson.Get(l, "isCompactSummary").Bool() || strings.Contains(l, "This session is being continued") {
			t.Errorf("Claude Code compacted its session: %.300s", l)
		}
		gjson.Get(l, "message.content").ForEach(func(_, blk gjson.Result) bool {
			switch blk.Get("type").Str {
			case "compaction":
				t.Errorf("Claude Code's transcript holds a compaction block: %.300s", blk.Raw)
			case "tool_use":
				if blk.Get("name").Str == "Read" {
					reads[blk.Get("id").Str] = true
				}
			case "tool_result":
				if !blk.Get("is_error").Bool() {
					results[blk.Get("tool_use_id").Str] = true
				}
			}
			if blk.Get("encrypted_content").Exists() {
				t.Errorf("Claude Code's transcript holds sealed content: %.300s", blk.Raw)
			}
			return true
		})
	}
	if len(reads) != bigFiles {
		t.Errorf("Claude Code ran %d Reads, want %d", len(reads), bigFiles)
	}
	for id := range reads {
		if !results[id] {
			t.Errorf("Read %s has no successful result in the transcript", id)
		}
	}
}
