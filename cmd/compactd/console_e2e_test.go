package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// The operator console in a real browser: Debian's headless Chromium, driven over the DevTools
// protocol by chromedp (a Go client: no Node dependency, and it waits on the DOM rather than
// on the clock), against a `compactd serve --console --console-content` that ran real
// compactions on all three routes through the fake upstream. It logs in, opens the
// conversation with two compactions and a recall, checks from the rendered DOM that the
// timeline, the handoff text and the recall query are there, and screenshots the list, the
// timeline and the live view, each checked not to be blank. It skips only where Chromium is
// missing outside CI (CI=true: it must run; .ci/run installs chromium).
//
// CONSOLE_SCREENSHOTS=DIR keeps the screenshots (list.png, timeline.png, live.png) to look at.

// chromiumBinary finds Debian's headless-capable Chromium (as internal/eval's test does).
func chromiumBinary() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

const consoleE2EToken = "console-e2e-admin-token"

func TestConsoleInChromium(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	bin := chromiumBinary()
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed (apt-get install chromium); CI must run this test")
		}
		t.Skip("chromium not installed")
	}
	fake, baseURL := startFake(t)
	r := startReplica(t, "compactd", baseURL, newKey(t, "k1").String(),
		"--anthropic-upstream", baseURL, "--archive", filepath.Join(t.TempDir(), "archive.db"),
		"--ops-listen", "127.0.0.1:0", "--admin-token", consoleE2EToken, "--console", "--console-content",
		"--compact-threshold", "messages=2000,chat=2000", "--speculative-fraction", "0")
	ops := opsAddr(t, r)

	// Responses: two compactions the client asked for, then a recall round, in one conversation.
	const conv = "console-e2e-responses"
	items := []any{
		map[string]any{"type": "message", "role": "developer", "content": "You are a careful coding agent."},
		map[string]any{"type": "message", "role": "user", "content": "turn 0: read the notes and keep them in mind. " + filler(0, 1500)},
		map[string]any{"type": "function_call", "call_id": "call_notes", "name": "shell", "arguments": `{"command":["cat","notes.txt"]}`},
		map[string]any{"type": "function_call_output", "call_id": "call_notes", "output": "Exit code: 0\nOutput:\n" + agentFactLine + "\n"},
		map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "Noted the port."}}},
	}
	threshold := option.WithJSONSet("context_management", []map[string]any{{"type": "compaction", "compact_threshold": 2000}})
	respTurn := func(withThreshold bool) *responses.Response {
		t.Helper()
		opts := []option.RequestOption{option.WithJSONSet("input", items), option.WithHeader("X-Compactd-Session", conv)}
		if withThreshold {
			opts = append(opts, threshold)
		}
		resp, err := r.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: "gpt-e2e"}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range resp.Output {
			items = append(items, json.RawMessage(o.RawJSON()))
		}
		return resp
	}
	compactions := 0
	for turn := 1; turn <= 2; turn++ {
		if turn > 1 {
			items = append(items, map[string]any{"type": "message", "role": "user", "content": fmt.Sprintf("turn %d: go on. %s", turn, filler(turn, 2500))})
		}
		for _, o := range respTurn(true).Output {
			if o.Type == "compaction" {
				compactions++
			}
		}
	}
	if compactions != 2 {
		t.Fatalf("%d Responses compactions, want 2", compactions)
	}
	items = append(items, map[string]any{"type": "message", "role": "user", "content": `Which port? [[call:compactd_recall {"query":"SECRET_FACT_PORT"}]]`})
	respTurn(false)

	// Messages (Claude Code's headers) and Chat Completions (Qwen Code's user agent), each
	// compacted by the transparent policy.
	big := func(tag string, n int) string { return tag + " " + filler(n, 1800) }
	post(t, "http://"+r.addr+"/v1/messages", map[string]string{"X-Api-Key": "sk-ant-e2e", "Anthropic-Version": "2023-06-01",
		"X-Claude-Code-Session-Id": "console-e2e-claude", "User-Agent": "claude-cli/2.1.332 (external, cli)"},
		map[string]any{"model": "claude-e2e", "max_tokens": 256, "messages": []any{
			map[string]any{"role": "user", "content": big("first", 10)}, map[string]any{"role": "assistant", "content": "ok"},
			map[string]any{"role": "user", "content": big("second", 11)}, map[string]any{"role": "assistant", "content": "ok"},
			map[string]any{"role": "user", "content": "and now?"}}})
	post(t, "http://"+r.addr+"/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-e2e", "User-Agent": "QwenCode/0.24.4 (linux; x64)",
		"X-Compactd-Session": "console-e2e-qwen"},
		map[string]any{"model": "qwen-e2e", "messages": []any{
			map[string]any{"role": "system", "content": "You are Qwen Code."},
			map[string]any{"role": "user", "content": big("first", 20)}, map[string]any{"role": "assistant", "content": "ok"},
			map[string]any{"role": "user", "content": big("second", 21)}, map[string]any{"role": "assistant", "content": "ok"},
			map[string]any{"role": "user", "content": "and now?"}}})
	sums := 0
	for _, rec := range fake.Requests() {
		if rec.Kind == "summary" {
			sums++
		}
	}
	if sums < 4 {
		t.Fatalf("%d summariser calls: the Messages and Chat turns did not compact\n%s", sums, r.log)
	}

	// The event log is written in the background: wait (over plain HTTP) until the timeline has
	// the recall, then drive the browser.
	waitForTimeline(t, ops, conv)

	dir := t.TempDir()
	actx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(filepath.Join(dir, "profile")), chromedp.WindowSize(1280, 1000))
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	base := "http://" + ops
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("chromium, %s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("chromium, text of %s: %v", sel, err)
		}
		return s
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+jsString(sel)+`).length`))
		if err != nil {
			t.Fatalf("chromium, count of %s: %v", sel, err)
		}
		return n
	}
	shot := func(full bool) []byte {
		t.Helper()
		a := chromedp.CaptureScreenshot()
		if full {
			a = chromedp.FullScreenshot(100) // 100: PNG
		}
		b, err := chromedp.Run(ctx, a)
		if err != nil {
			t.Fatalf("chromium, screenshot: %v", err)
		}
		return b
	}
	do("login", chromedp.Navigate(base+"/console/conversations"), // no session: the login form
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), consoleE2EToken),
		chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#conversations")))
	listText := text("#conversations")
	bodyBG, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.body).backgroundColor`))
	if err != nil {
		t.Fatal(err)
	}
	list := shot(false)
	do("open the conversation", chromedp.Click(chromedp.CSS(`a[href*="`+conv+`"]`)), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	tlText := text("#timeline")
	nCompactions, nRecalls := count("li.event.compaction"), count("li.event.recall")
	summary, ledger, query := text(".handoff-summary"), text(".handoff-ledger"), text("code.query")
	timeline := shot(true)
	for _, id := range []string{conv, "console-e2e-claude", "console-e2e-qwen"} {
		if !strings.Contains(listText, id) {
			t.Errorf("the conversation list lacks %s:\n%s", id, listText)
		}
	}
	// The Responses client is openai-go (an SDK), the others name their agents.
	if !strings.Contains(listText, "claude_code") || !strings.Contains(listText, "chat_agent") || !strings.Contains(listText, "sdk") {
		t.Errorf("the list does not name the client kinds (claude_code, chat_agent, sdk):\n%s", listText)
	}
	if bodyBG != "rgb(246, 247, 249)" {
		t.Errorf("the embedded stylesheet did not apply (body background %q): blocked or not served", bodyBG)
	}
	if nCompactions != 2 || nRecalls != 1 {
		t.Errorf("the timeline shows %d compactions and %d recalls, want 2 and 1:\n%s", nCompactions, nRecalls, tlText)
	}
	if strings.TrimSpace(summary) == "" || !strings.Contains(ledger, "SECRET_FACT_PORT") {
		t.Errorf("the handoff text is not shown: summary %q, ledger %q", summary, ledger)
	}
	if query != "SECRET_FACT_PORT" {
		t.Errorf("the recall query shown is %q, want SECRET_FACT_PORT", query)
	}
	if !strings.Contains(tlText, "What it replaced") || !strings.Contains(tlText, agentFactLine) {
		t.Errorf("the replaced items are not shown beside the handoff:\n%.2000s", tlText)
	}

	// The live view, refreshed by its script: the panel is replaced by a fetched one.
	do("live view", chromedp.Navigate(base+"/console/live"), chromedp.WaitVisible(chromedp.CSS("#live .tiles")))
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("#live .tiles").dataset.mark = "old"; true`)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!document.querySelector("#live .tiles").dataset.mark`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Errorf("the live view's script did not refresh the panel: %v", err)
	}
	live := shot(false)
	keep := os.Getenv("CONSOLE_SCREENSHOTS")
	for name, shot := range map[string][]byte{"list": list, "timeline": timeline, "live": live} {
		if keep != "" {
			_ = os.WriteFile(filepath.Join(keep, name+".png"), shot, 0o644)
		}
		img, err := png.Decode(bytes.NewReader(shot))
		if err != nil {
			t.Errorf("%s screenshot: %v", name, err)
			continue
		}
		if n := distinctColours(img); n < 20 {
			t.Errorf("%s screenshot looks blank: %d distinct colours", name, n)
		}
	}
}

func jsString(s string) string { b, _ := json.Marshal(s); return string(b) }

// distinctColours counts an image's distinct colours, up to 1000.
func distinctColours(img image.Image) int {
	seen := map[[3]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y && len(seen) < 1000; y += 2 {
		for x := b.Min.X; x < b.Max.X && len(seen) < 1000; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			seen[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
		}
	}
	return len(seen)
}

// opsAddr is the ops listener's address from the replica's log.
func opsAddr(t *testing.T, r *replica) string {
	t.Helper()
	for _, l := range strings.Split(r.log.String(), "\n") {
		var line struct{ Msg, Addr string }
		if json.Unmarshal([]byte(l), &line) == nil && strings.HasPrefix(line.Msg, "ops listener") {
			return line.Addr
		}
	}
	t.Fatalf("no ops listener in the log:\n%s", r.log)
	return ""
}

func post(t *testing.T, u string, headers map[string]string, body any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", u, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("X-Compactd-Compaction"), "compacted") {
		t.Fatalf("POST %s: %d, X-Compactd-Compaction %q: %s", u, resp.StatusCode, resp.Header.Get("X-Compactd-Compaction"), out)
	}
}

// waitForTimeline logs in over plain HTTP and polls the conversation's timeline until the
// background event log has written its recall.
func waitForTimeline(t *testing.T, ops, conv string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	resp, err := hc.PostForm("http://"+ops+"/console/login", url.Values{"token": {consoleE2EToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var body []byte
	for range 300 {
		resp, err := hc.Get("http://" + ops + "/console/conversation?id=" + url.QueryEscape(conv))
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if bytes.Contains(body, []byte("Recall search")) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the timeline of %s never showed the recall:\n%s", conv, body)
}
