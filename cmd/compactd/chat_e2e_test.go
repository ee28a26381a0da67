package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
)

// Real Chat Completions clients end to end: the Node openai SDK and Qwen Code, each through a
// `compactd serve` with a low Chat policy in front of the fake upstream.

// openaiNodeVersion is the pinned Node openai SDK (.ci/run installs exactly this one).
const openaiNodeVersion = "7.60.0"

// qwenCodeVersion is the pinned Qwen Code CLI (.ci/run installs exactly this one).
const qwenCodeVersion = "0.24.4"

// npmModule finds or installs an npm package without a CLI under .cache/<dir> and returns its
// directory; like npmAgent it skips locally without Node/npm and fails under CI.
func npmModule(t *testing.T, dir, pkg, version string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(root, ".cache", dir)
	mod := filepath.Join(prefix, "node_modules", filepath.FromSlash(pkg))
	if b, err := os.ReadFile(filepath.Join(mod, "package.json")); err == nil && gjson.GetBytes(b, "version").Str == version {
		return mod
	}
	missing := func(msg string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (CI must run this test: .ci/run installs Node.js and %s)", msg, pkg)
		}
		t.Skipf("skipping the %s end-to-end test: %s; install Node.js and npm", pkg, msg)
	}
	for _, tool := range []string{"npm", "node"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(tool + " is not installed")
		}
	}
	if out, err := exec.Command("npm", "install", "--no-audit", "--no-fund", "--prefix", prefix, pkg+"@"+version).CombinedOutput(); err != nil {
		missing(fmt.Sprintf("npm install %s@%s failed: %v\n%s", pkg, version, err, out))
	}
	return mod
}

// chatPortAnswer is the fake model's reading of its context for the recall turn: a question
// about the port is answered from the context when the fact is in it, else by searching for it
// with the recall tool (which the fake calls when compactd offers one). Chat compaction puts the
// handoff after the newest user messages, so the question is looked for anywhere in the context.
// The fact counts as known only as the whole line the file holds: compactd's ledger keeps
// identifiers such as SECRET_FACT_PORT=7431 in the handoff, and this test is about the verbatim
// history coming back through recall.
func chatPortAnswer(_, context string) (string, string, bool) {
	if !strings.Contains(context, "Which port?") {
		return "", "", false
	}
	if strings.Contains(context, agentFactLine) {
		return "The port line reads: " + agentFactLine, "", true
	}
	return "", "SECRET_FACT_PORT", true
}

// chatSessionChecks are the done-when assertions shared by the real clients: every upstream
// Chat request after the first compaction stays under bound bytes (the client's own history
// grows past it), one summariser call per compaction, a recall round on the upstream for the
// last turn with the fact in its tool message.
func chatSessionChecks(t *testing.T, fake *fakeupstream.Server, compactions, bound int) {
	t.Helper()
	var chats []fakeupstream.Recorded
	sums := 0
	for _, r := range fake.Requests() {
		switch r.Kind {
		case dialect.Chat:
			chats = append(chats, r)
		case fakeupstream.KindSummary:
			sums++
		}
	}
	if compactions == 0 {
		t.Fatal("no turn compacted: the session never crossed the policy threshold")
	}
	if sums != compactions {
		t.Errorf("%d summariser calls for %d compactions, want one per compaction", sums, compactions)
	}
	largest := 0
	for _, r := range chats {
		largest = max(largest, len(r.Body))
		if len(r.Body) > bound {
			t.Errorf("an upstream Chat request of %d bytes, over the bound %d: the upstream's input is not bounded", len(r.Body), bound)
		}
	}
	recalled := false
	for _, r := range chats {
		msgs := gjson.GetBytes(r.Body, "messages").Array()
		if n := len(msgs); n >= 2 && msgs[n-1].Get("role").Str == "tool" && msgs[n-2].Get("tool_calls.0.function.name").Str == "compactd_recall" &&
			strings.Contains(msgs[n-1].Get("content").Str, agentFact) {
			recalled = true
		}
	}
	if !recalled {
		t.Error("no upstream round fed the recall tool's result with the fact back")
	}
	t.Logf("%d upstream Chat requests (largest %d bytes), %d compactions", len(chats), largest, compactions)
}

// TestNodeOpenAIChatSessionEndToEnd drives a 25-turn agent session with the Node openai SDK
// (JSON and streamed turns, large tool outputs) through compactd with --compact-threshold
// chat=6000: the upstream's input stays bounded while the client's history grows, the memo
// makes one summary per compaction, the fact from the first tool output comes back in the last
// turn through the recall tool, and the SDK never sees a recall call.
func TestNodeOpenAIChatSessionEndToEnd(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	if testing.Short() {
		t.Skip("runs the Node openai SDK")
	}
	pkg := npmModule(t, "openai-node", "openai", openaiNodeVersion)
	fake := fakeupstream.New(fakeupstream.Options{Answer: chatPortAnswer})
	fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	baseURL, stop, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	r := startReplica(t, "compactd", baseURL, newKey(t, "k1").String(), "--compact-threshold", "chat=6000",
		// Speculation off: a speculative summary the crossing turn cannot use is a summariser
		// call without a compaction, and this test counts exactly one call per compaction.
		"--speculative-fraction", "0")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "chat_session.js"))
	cmd.Env = append(os.Environ(), "OPENAI_PKG="+pkg, "BASE_URL=http://"+r.addr+"/v1", "TURNS=24",
		"FACT_LINE="+agentFactLine, "ASK=Which port? Look it up if you have to.")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\n%s\ncompactd:\n%s", err, errb.String(), r.log)
	}
	var report struct {
		Requests []struct {
			Stream     bool
			Raw        []string
			Text       string
			ToolCalls  []json.RawMessage
			Usage      json.RawMessage
			Compaction *string
		}
		Final       struct{ Text string }
		ClientBytes int
	}
	if err := json.Unmarshal(out.Bytes(), &report); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	compactions := 0
	for i, q := range report.Requests {
		if q.Compaction != nil && strings.HasPrefix(*q.Compaction, "compacted") {
			compactions++
		}
		for _, raw := range q.Raw {
			if strings.Contains(raw, `"compaction"`) || strings.Contains(raw, `"name":"compactd_recall"`) {
				t.Errorf("request %d: the SDK saw a compaction field or the recall call: %.300s", i, raw)
			}
		}
		if gjson.GetBytes(q.Usage, "prompt_tokens").Int() == 0 {
			t.Errorf("request %d (stream %v): no usage reported: %s", i, q.Stream, q.Usage)
		}
	}
	if !strings.Contains(report.Final.Text, agentFactLine) {
		t.Errorf("the last turn's answer %q lacks the fact from the first tool output", report.Final.Text)
	}
	const bound = 30_000
	if report.ClientBytes < 3*bound {
		t.Fatalf("the client's history is only %d bytes: the session is too short to show a bound", report.ClientBytes)
	}
	chatSessionChecks(t, fake, compactions, bound)
}

// metricSum is the sum of r's /metrics samples whose line starts with prefix and contains every
// one of labels.
func metricSum(t *testing.T, r *replica, prefix string, labels ...string) int {
	t.Helper()
	resp, err := http.Get("http://" + r.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n := 0
lines:
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue lines
			}
		}
		var v float64
		if _, err := fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v); err == nil {
			n += int(v)
		}
	}
	return n
}

// qwenSettings keeps Qwen Code's background model calls (memory extraction and consolidation,
// skill review) and its update checks and statistics off: every model request is then one of
// the session's turns, in order.
const qwenSettings = `{
  "privacy": {"usageStatisticsEnabled": false},
  "general": {"enableAutoUpdate": false},
  "telemetry": {"enabled": false},
  "memory": {"enableManagedAutoMemory": false, "enableManagedAutoDream": false, "enableAutoSkill": false}
}`

// TestQwenCodeEndToEnd runs Qwen Code non-interactively (`qwen -p`, then `--continue` turns) as a
// Chat Completions client of compactd (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL, auth type
// openai), in front of the fake upstream, with a Chat policy low enough that its session of
// large file reads compacts: every model request goes through /v1/chat/completions, compactions
// happen and the memo re-applies them, one summary per compaction, the upstream's requests stay
// bounded while Qwen's own history grows, and the fact from the first file read comes back in
// the last turn through the recall tool, which Qwen never sees. Qwen exits 0 on every turn.
func TestQwenCodeEndToEnd(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	if testing.Short() {
		t.Skip("runs the real Qwen Code")
	}
	qwen := npmAgent(t, "qwen", "@qwen-code/qwen-code", qwenCodeVersion, "qwen", "COMPACTD_QWEN_BIN")
	fake := fakeupstream.New(fakeupstream.Options{Answer: chatPortAnswer})
	fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	baseURL, stop, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	r := startReplica(t, "compactd", baseURL, newKey(t, "k1").String(), "--compact-threshold", "chat="+strconv.Itoa(qwenThreshold),
		"--speculative-fraction", "0") // one summariser call per compaction, as in the Node test

	e := newAgentEnv(t, "http://127.0.0.1:9") // no Anthropic traffic: Qwen speaks OpenAI here
	qhome := filepath.Join(e.home, ".qwen")
	if err := os.MkdirAll(qhome, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(qhome, "settings.json"), []byte(qwenSettings), 0o644); err != nil {
		t.Fatal(err)
	}
	e.env = append(e.env, "OPENAI_BASE_URL=http://"+r.addr+"/v1", "OPENAI_API_KEY=sk-qwen-e2e-not-a-real-key",
		"OPENAI_MODEL=fake-model", "QWEN_HOME="+qhome, "QWEN_USAGE_STATISTICS_ENABLED=false", "QWEN_TELEMETRY_ENABLED=false")
	files := []string{"notes.txt"}
	if err := os.WriteFile(filepath.Join(e.work, "notes.txt"), []byte(agentFactLine+"\n"+qwenFiller("notes")), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range qwenReads {
		name := fmt.Sprintf("part%d.go", i)
		files = append(files, name)
		if err := os.WriteFile(filepath.Join(e.work, name), []byte(qwenFiller(name)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	turn := func(args ...string) string {
		return e.run(t, qwen, append([]string{"--auth-type", "openai", "--approval-mode", "yolo"}, args...)...)
	}
	read := func(name string) string {
		return fmt.Sprintf(`Step: please read the next file and tell me what it holds [[call:read_file {"file_path":%q}]]`, filepath.Join(e.work, name))
	}
	turn("-p", read(files[0]))
	for _, f := range files[1:] {
		turn("--continue", "-p", read(f))
	}
	answer := turn("--continue", "-p", "Which port? Look it up if you have to.")
	if !strings.Contains(answer, agentFactLine) {
		t.Errorf("Qwen's last answer lacks the fact from the first file read:\n%s", answer)
	}

	for _, q := range fake.Requests() {
		if q.Kind != dialect.Chat && q.Kind != fakeupstream.KindSummary {
			t.Errorf("Qwen made a %s request to %s: want every model request on /v1/chat/completions", q.Kind, q.Path)
		}
	}
	// Without compactd the last request would carry Qwen's first one (its prompt and tools) and
	// every file it read: the bound below must be well under that to show anything.
	readBytes := len(fake.Requests()[0].Body)
	for _, f := range files {
		st, _ := os.Stat(filepath.Join(e.work, f))
		readBytes += int(st.Size())
	}
	if readBytes < qwenBound*3/2 {
		t.Fatalf("the session reads only %d bytes: too short to show the %d-byte bound", readBytes, qwenBound)
	}
	compactions := metricSum(t, r, "compactd_compactions_total{", `outcome="ok"`)
	if hits := metricSum(t, r, "compactd_memo_total{", `outcome="hit"`); hits == 0 {
		t.Error("no memo hit: Qwen's next requests did not get the remembered compaction")
	}
	chatSessionChecks(t, fake, compactions, qwenBound)
	// What Qwen saw: the session it recorded (for --continue) holds no recall call or result.
	recorded := 0
	_ = filepath.WalkDir(qhome, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".jsonl") {
			return nil
		}
		b, _ := os.ReadFile(path)
		recorded++
		for _, s := range []string{`"compactd_recall"`, "Verbatim excerpts from this conversation's archived history"} {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("Qwen's recorded session %s holds %s", filepath.Base(path), s)
			}
		}
		return nil
	})
	if recorded == 0 {
		t.Errorf("no recorded Qwen session under %s: the --continue turns did not continue one", qhome)
	}
}

// The Qwen session's shape: the threshold is above Qwen's own system prompt and tools (about
// 60 KB of a first request, kept verbatim), each file read adds about qwenFillerLines lines.
const (
	qwenThreshold   = 22000
	qwenReads       = 6
	qwenFillerLines = 250
	qwenBound       = 100_000
)

func qwenFiller(name string) string {
	var b strings.Builder
	for k := range qwenFillerLines {
		fmt.Fprintf(&b, "func %s_%d(x int) int { return x + %d } // %s\n", strings.NewReplacer(".", "_").Replace(name), k, k, name)
	}
	return b.String()
}
