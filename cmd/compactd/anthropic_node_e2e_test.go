package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
)

// anthropicNodeVersion is the pinned Node Anthropic SDK (.ci/run installs exactly this one).
const anthropicNodeVersion = "1.17.0"

// nodeMessagesRequest is one request of testdata/messages_session.js's report.
type nodeMessagesRequest struct {
	Raw        string
	Types      []string
	Compaction *struct {
		Content, Encrypted string
		At                 int
	}
	StopReason       string
	Iterations       []struct{ Type string }
	Events           []string
	CompactionEvents int
}

// TestNodeAnthropicMessagesEndToEnd drives two agent sessions with the Node Anthropic SDK
// (@anthropic-ai/sdk) through compactd in front of the strict fake upstream, asking for
// compaction with the compact_20260112 edit at its lowest trigger: one with messages.create, one
// with messages.stream, whose accumulator (BetaMessageStream) assembles the block from
// compactd's events. Every compaction comes back as Anthropic's would (the block first, its
// content the summary, sealed encrypted_content, a compaction iteration in usage), the SDK
// sends it back as it came and the next turns go on from it, one summariser call per
// compaction; the upstream never sees a block and its input stays bounded while the client's
// history grows; the fact from the first tool output comes back in the last turn through the
// recall tool, which the SDK never sees.
func TestNodeAnthropicMessagesEndToEnd(t *testing.T) {
	t.Parallel() // a separate client, compactd and fake upstream: independent of every other test
	if testing.Short() {
		t.Skip("runs the Node Anthropic SDK")
	}
	pkg := npmModule(t, "anthropic-node", "@anthropic-ai/sdk", anthropicNodeVersion)
	fake := fakeupstream.New(fakeupstream.Options{Answer: chatPortAnswer})
	fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	baseURL, stop, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	r := startReplica(t, "compactd", baseURL, newKey(t, "k1").String(), "--anthropic-upstream", baseURL,
		"--speculative-fraction", "0") // one summariser call per compaction, counted exactly

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "messages_session.js"))
	cmd.Env = append(os.Environ(), "ANTHROPIC_PKG="+pkg, "BASE_URL=http://"+r.addr, "TRIGGER=50000",
		"JSON_TURNS=10", "STREAM_TURNS=28", "FACT_LINE="+agentFactLine, "ASK=Which port? Look it up if you have to.")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\n%s\ncompactd:\n%s", err, errb.String(), r.log)
	}
	var report map[string]struct {
		Stream      bool
		Requests    []nodeMessagesRequest
		Final       string
		ClientBytes int
	}
	if err := json.Unmarshal(out.Bytes(), &report); err != nil {
		t.Fatalf("report: %v\n%.2000s", err, out.String())
	}
	compactions := 0
	for _, name := range []string{"json", "stream"} {
		s := report[name]
		n := 0
		for i, q := range s.Requests {
			if strings.Contains(q.Raw, "compactd_recall") {
				t.Errorf("%s request %d: the SDK saw the recall tool: %.300s", name, i, q.Raw)
			}
			if q.Compaction == nil {
				continue
			}
			n++
			c := q.Compaction
			if c.At != 0 || !strings.HasPrefix(c.Content, fakeupstream.SummaryPrefix) || !strings.HasPrefix(c.Encrypted, "cmp_") {
				t.Errorf("%s request %d: compaction block at %d, content %.80q, encrypted_content %.20q", name, i, c.At, c.Content, c.Encrypted)
			}
			if len(q.Iterations) < 2 || q.Iterations[0].Type != "compaction" {
				t.Errorf("%s request %d: usage.iterations %+v, want a compaction iteration first", name, i, q.Iterations)
			}
			if s.Stream {
				starts := slices.Index(q.Events, "content_block_start:compaction")
				deltas := 0
				for _, e := range q.Events {
					if e == "content_block_delta:compaction_delta" {
						deltas++
					}
				}
				if starts != 1 || deltas != 1 || q.CompactionEvents != 1 { // message_start, then the block
					t.Errorf("stream request %d: events %q (the SDK's compaction event fired %d times)", i, q.Events, q.CompactionEvents)
				}
			}
		}
		if n == 0 {
			t.Fatalf("the %s session never compacted (%d requests)", name, len(s.Requests))
		}
		t.Logf("%s session: %d requests, %d compactions, the client's history %d bytes", name, len(s.Requests), n, s.ClientBytes)
		compactions += n
	}
	if !strings.Contains(report["stream"].Final, agentFactLine) {
		t.Errorf("the last turn's answer %q lacks the fact from the first tool output", report["stream"].Final)
	}

	var msgs []fakeupstream.Recorded
	sums := 0
	for _, rec := range fake.Requests() {
		switch rec.Kind {
		case dialect.Messages:
			msgs = append(msgs, rec)
		case fakeupstream.KindSummary:
			sums++
		}
	}
	if sums != compactions {
		t.Errorf("%d summariser calls for %d compactions, want one per compaction", sums, compactions)
	}
	const bound = 300_000 // the trigger's 50,000 tokens and one turn more, in bytes
	if got := report["stream"].ClientBytes; got < 2*bound {
		t.Fatalf("the stream session's history is only %d bytes: too short to show a bound", got)
	}
	recalled := false
	for _, rec := range msgs {
		if len(rec.Body) > bound {
			t.Errorf("an upstream Messages request of %d bytes, over %d: the upstream's input is not bounded", len(rec.Body), bound)
		}
		m := gjson.GetBytes(rec.Body, "messages").Array()
		if n := len(m); n >= 2 && m[n-2].Get(`content.#(type=="tool_use").name`).Str == "compactd_recall" &&
			strings.Contains(m[n-1].Get(`content.#(type=="tool_result")`).Raw, agentFact) {
			recalled = true
		}
	}
	if !recalled {
		t.Error("no upstream round fed the recall tool's result with the fact back")
	}
	t.Logf("%d upstream Messages requests, %d compactions", len(msgs), compactions)
}
