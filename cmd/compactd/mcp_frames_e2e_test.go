package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// TestMCPBadFramesKeepServing starts `compactd mcp` on pipes, as an agent does, and sends it
// one bad frame of each kind, each followed by a valid tools/list: every bad frame gets a
// JSON-RPC error with id null (-32700 for what is not JSON within the bounds, -32600 for JSON
// that is no JSON-RPC message) and the tools/list after it its answer. The SDK's own stdio
// transport ended the session at the first of them.
func TestMCPBadFramesKeepServing(t *testing.T) {
	t.Parallel() // a separate agent, compactd and fake upstream: independent of every other test
	dir := t.TempDir()
	cmd := exec.Command(builtBinary(t), "mcp", "--data-dir", filepath.Join(dir, "data"), "--project", dir,
		"--sessions", filepath.Join(dir, "sessions"), "--codex-home", filepath.Join(dir, "codex"))
	cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	send := func(frame string) {
		t.Helper()
		if _, err := io.WriteString(stdin, frame+"\n"); err != nil {
			t.Fatalf("writing to compactd mcp: %v (stderr: %s)", err, stderr.String())
		}
	}
	recv := func(what string) gjson.Result {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s: compactd mcp closed its output (stderr: %s)", what, stderr.String())
			}
			return gjson.Parse(l)
		case <-time.After(time.Minute): // a hang, not a timing assertion
			t.Fatalf("%s: no answer from compactd mcp (stderr: %s)", what, stderr.String())
		}
		return gjson.Result{}
	}

	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"frames-test","version":"1"}}}`)
	if r := recv("initialize"); r.Get("id").Int() != 1 || !r.Get("result.serverInfo").Exists() {
		t.Fatalf("initialize: %s", r.Raw)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for i, tc := range []struct {
		name, frame string
		code        int64
	}{
		{"not JSON", "this is not json", -32700},
		{"cut short", `{"jsonrpc":"2.0","id":5,"method":"tools/list"`, -32700},
		{"two values", `{"jsonrpc":"2.0","id":5,"method":"tools/list"} {}`, -32700},
		{"invalid UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\",\"params\":{\"x\":\"\xff\"}}", -32700},
		{"1001 levels deep", `{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"x":` + deep(1000) + `}}`, -32700},
		{"20000 levels deep", deep(20000), -32700},
		{"over the line limit", `{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"pad":"` + strings.Repeat("a", 16<<20) + `"}}`, -32700},
		{"not an object", `"tools/list"`, -32600},
		{"an object that is no message", `{"foo":1}`, -32600},
		{"wrong version", `{"jsonrpc":"1.0","id":5,"method":"tools/list"}`, -32600},
		{"an object id", `{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}`, -32600},
		{"an empty batch", `[]`, -32600},
		{"a batch", `[{"jsonrpc":"2.0","id":5,"method":"tools/list"}]`, -32600},
	} {
		send(tc.frame)
		r := recv(tc.name)
		if r.Get("error.code").Int() != tc.code || r.Get("id").Type != gjson.Null || !r.Get("id").Exists() || r.Get("error.message").Str == "" {
			t.Errorf("%s: answer %.300s, want error %d with id null", tc.name, r.Raw, tc.code)
		}
		id := int64(100 + i)
		send(`{"jsonrpc":"2.0","id":` + strconv.FormatInt(id, 10) + `,"method":"tools/list"}`)
		r = recv("tools/list after " + tc.name)
		if r.Get("id").Int() != id || !strings.Contains(r.Get("result.tools.#.name").Raw, "search_sessions") {
			t.Fatalf("tools/list after %s: %.300s", tc.name, r.Raw)
		}
	}
	// Blank lines are no frames: nothing is answered, and the session goes on.
	send("")
	send("   \r")
	send(`{"jsonrpc":"2.0","id":999,"method":"tools/list"}`)
	if r := recv("tools/list after blank lines"); r.Get("id").Int() != 999 {
		t.Fatalf("after blank lines: %.300s", r.Raw)
	}
	// The end of the input ends the session, cleanly.
	stdin.Close()
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Errorf("compactd mcp exited with %v at the end of its input (stderr: %s)", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Error("compactd mcp did not exit at the end of its input")
	}
}
