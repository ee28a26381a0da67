package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/proxy"
)

// demoTurns is a scripted coding session; each turn's tool output makes the history grow the way
// real agent sessions do.
var demoTurns = []string{
	"The config loader in internal/config/load.go panics when COMPACTD_PORT is empty. Find out why.",
	"Show me the test that covers empty environment variables.",
	"Fix it: an empty value should mean 'use the default' (8080), and log a warning once.",
	"Run the tests for internal/config and tell me what fails.",
	"TestLoadDefaults fails with 'expected 8080, got 0'. Update the default table too.",
	"Now add the same rule for COMPACTD_TIMEOUT (default 30s).",
	"Write a changelog entry for both fixes.",
	"Run the whole test suite once more and summarise what changed today.",
}

// demoConfig is the command line of `compactd demo`. The demo reads no COMPACTD_* variable:
// its own small defaults are what make a compaction happen within a few turns, and a serve
// setting exported in the same shell must not change them.
type demoConfig struct {
	threshold, retainTokens int
	stream, verbose         bool
}

func parseDemoFlags(args []string) (c demoConfig, err error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.IntVar(&c.threshold, "threshold", 3000, "compact_threshold the client sends (tokens)")
	fs.IntVar(&c.retainTokens, "retain-tokens", 600, "newest user-message tokens kept verbatim")
	fs.BoolVar(&c.stream, "stream", true, "stream the turns (SSE)")
	fs.BoolVar(&c.verbose, "v", false, "also print compactd's own log")
	if err := parseFlags(fs, args); err != nil {
		return c, err
	}
	if c.threshold <= 0 || c.retainTokens <= 0 {
		return c, usageErrorf("demo", "--threshold and --retain-tokens must be positive")
	}
	return c, nil
}

func runDemo(args []string) error {
	c, err := parseDemoFlags(args)
	if err != nil {
		return err
	}

	// The fake model and compactd, both on loopback ports of this process.
	fake := fakeupstream.New(fakeupstream.Options{Deltas: 4})
	upBase, stopFake, err := fake.Start()
	if err != nil {
		return err
	}
	defer stopFake()
	key, err := crypto.GenerateKey() // an in-memory key: the demo writes nothing to disk
	if err != nil {
		return err
	}
	ring, err := crypto.NewKeyring(key)
	if err != nil {
		return err
	}
	up, _ := url.Parse(upBase)
	sum, err := summarizer.New(summarizer.Config{BaseURL: upBase + "/v1"})
	if err != nil {
		return err
	}
	counter := compact.NewCounter(compact.CounterOptions{})
	defer counter.Close()
	logOut := io.Discard
	if c.verbose {
		logOut = os.Stderr
	}
	srv, err := proxy.New(proxy.Config{
		Upstream: up, Sealer: ring, Summarizer: sum, Counter: counter, RetainTokens: c.retainTokens,
		Logger: slog.New(slog.NewTextHandler(logOut, nil)),
	})
	if err != nil {
		return err
	}
	defer srv.Close(context.Background()) // after hs.Close, deferred below
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: defaultReadHeaderTimeout}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	base := "http://" + ln.Addr().String()

	fmt.Fprintf(os.Stdout, "compactd demo: proxy %s -> fake upstream %s\n", base, upBase)
	fmt.Fprintf(os.Stdout, "client: openai-go, context_management compact_threshold=%d, stream=%v\n\n", c.threshold, c.stream)

	client := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("demo-key-not-needed"), option.WithMaxRetries(0))
	history := []any{map[string]any{"type": "message", "role": "developer", "content": "You are a coding agent working in the compactd repository."}}
	ctx := context.Background()
	countItems := func(raw []json.RawMessage) int {
		n := 0
		for _, r := range raw {
			n += counter.Item(r)
		}
		return n
	}
	for i, msg := range demoTurns {
		history = append(history, map[string]any{"type": "message", "role": "user", "content": msg})
		sent := mustMarshalItems(history)
		before := len(fake.Requests())
		output, err := demoTurn(ctx, client, history, c.threshold, c.stream)
		if err != nil {
			return fmt.Errorf("turn %d: %w", i+1, err)
		}
		var upInput []json.RawMessage
		for _, r := range fake.Requests()[before:] {
			if r.Kind == dialect.Responses {
				for _, it := range gjson.GetBytes(r.Body, "input").Array() {
					upInput = append(upInput, json.RawMessage(it.Raw))
				}
			}
		}
		summaries := 0
		for _, r := range fake.Requests()[before:] {
			if r.Kind == fakeupstream.KindSummary {
				summaries++
			}
		}
		fmt.Fprintf(os.Stdout, "turn %d  client sent %2d items (%5d tokens) -> upstream got %2d items (%5d tokens)\n",
			i+1, len(sent), countItems(sent), len(upInput), countItems(upInput))
		for _, it := range upInput {
			if t := gjson.GetBytes(it, "content.0.text").Str; strings.HasPrefix(t, handoff.Prefix) {
				fmt.Fprintf(os.Stdout, "        upstream saw the handoff: %q…\n", clip(strings.TrimPrefix(t, handoff.Prefix), 90))
			}
		}
		compacted := false
		for _, o := range output {
			if gjson.GetBytes(o, "type").Str == api.TypeCompaction {
				compacted = true
				enc := gjson.GetBytes(o, "encrypted_content").Str
				fmt.Fprintf(os.Stdout, "        COMPACTED (%s): item %s, encrypted_content %d bytes %q…\n",
					summariserCalls(summaries), gjson.GetBytes(o, "id").Str, len(enc), clip(enc[strings.IndexByte(enc, '.')+1:], 24))
			}
			if gjson.GetBytes(o, "type").Str == "message" {
				fmt.Fprintf(os.Stdout, "        reply: %q\n", clip(gjson.GetBytes(o, "content.0.text").Str, 70))
			}
		}
		if !compacted && summaries > 0 {
			// Speculative compaction: near the threshold compactd summarises in the background, so
			// the turn that crosses it finds its summary made and waits for no summariser.
			fmt.Fprintf(os.Stdout, "        summary prepared ahead of the threshold (%s, in the background)\n", summariserCalls(summaries))
		}
		// The client keeps its whole history plus the output, as SDK clients do; compactd
		// drops what the compaction item superseded.
		for _, o := range output {
			history = append(history, o)
		}
		// The agent then runs the test suite: a tool call and its output (an output must answer a
		// call in the input, or the API refuses the next request; the fake upstream is strict).
		history = append(history,
			map[string]any{"type": "function_call", "call_id": fmt.Sprintf("call_%d", i), "name": "shell",
				"arguments": `{"cmd":"go test ./internal/config/"}`},
			map[string]any{"type": "function_call_output", "call_id": fmt.Sprintf("call_%d", i), "output": demoToolOutput(i)})
	}
	if r := fake.Refusals(); len(r) > 0 { // the fake is strict, as the real APIs are
		return fmt.Errorf("the fake upstream refused %d requests compactd sent (first: %s %s: %s)", len(r), r[0].Method, r[0].Path, r[0].Refused)
	}
	fmt.Fprintf(os.Stdout, "\nThe upstream never saw a compaction item or a blob; it saw the summary behind a fixed handoff prefix.\n")
	return nil
}

// demoTurn runs one turn and returns the response's output items as raw JSON.
func demoTurn(ctx context.Context, client openai.Client, history []any, threshold int, stream bool) ([]json.RawMessage, error) {
	params := responses.ResponseNewParams{
		Model: "demo-model",
		ContextManagement: []responses.ResponseNewParamsContextManagement{
			{Type: "compaction", CompactThreshold: openai.Int(int64(threshold))},
		},
	}
	opts := []option.RequestOption{option.WithJSONSet("input", history)}
	var out []json.RawMessage
	if !stream {
		resp, err := client.Responses.New(ctx, params, opts...)
		if err != nil {
			return nil, err
		}
		for _, o := range resp.Output {
			out = append(out, json.RawMessage(o.RawJSON()))
		}
		return out, nil
	}
	s := client.Responses.NewStreaming(ctx, params, opts...)
	for s.Next() {
		if ev := s.Current(); ev.Type == "response.completed" {
			for _, o := range ev.Response.Output {
				out = append(out, json.RawMessage(o.RawJSON()))
			}
		}
	}
	return out, s.Err()
}

func demoToolOutput(turn int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "$ go test ./internal/config/ (turn %d)\n", turn+1)
	for j := 0; j < 40; j++ {
		fmt.Fprintf(&b, "=== RUN   TestLoad/case_%02d\n--- PASS: TestLoad/case_%02d (0.00s)\n", j, j)
	}
	b.WriteString("ok  \tgithub.com/example/app/internal/config\t0.012s\n")
	return b.String()
}

func mustMarshalItems(items []any) []json.RawMessage {
	out := make([]json.RawMessage, len(items))
	for i, it := range items {
		b, _ := json.Marshal(it)
		out[i] = b
	}
	return out
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// summariserCalls says how many summariser calls a turn made, for the demo's lines; none means
// the compaction's summary was made ahead, on an earlier turn (speculative compaction).
func summariserCalls(n int) string {
	switch n {
	case 0:
		return "no summariser call on this turn: its summary was made ahead, below the threshold"
	case 1:
		return "1 summariser call"
	}
	return fmt.Sprintf("%d summariser calls", n)
}
