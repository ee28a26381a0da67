package main

// Many replicas: real `compactd serve` processes (built once by deploy/build.sh, exactly as the
// image is) sharing a keyring in front of one fake upstream, driven round-robin by the openai-go
// SDK, with a key rotation in the middle and a SIGTERM during a stream.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"go.uber.org/goleak"

	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/fakeupstream"
)

var (
	builtOnce sync.Once
	builtPath string
	builtErr  error
)

// builtBinary builds this command once per test run, for the tests that run compactd as a
// separate process (replicas, hooks, `claude mcp add`), exactly as a user's agent would. In CI
// (CI=true, or COMPACTD_TEST_RELEASE_BUILD=1) it is the release binary of deploy/build.sh, which
// .ci/run's shared build flags make cheap; otherwise a default-flag `go build`, which reuses the
// packages `go test` compiled instead of compiling the module again under the release flags
// (deploy's tests make the same choice).
func builtBinary(t *testing.T) string {
	t.Helper()
	builtOnce.Do(func() {
		dir, err := os.MkdirTemp("", "compactd-replicas-")
		if err != nil {
			builtErr = err
			return
		}
		builtPath = filepath.Join(dir, "compactd")
		var cmd *exec.Cmd
		if os.Getenv("CI") != "" || os.Getenv("COMPACTD_TEST_RELEASE_BUILD") == "1" {
			cmd = exec.Command("sh", "../../deploy/build.sh", builtPath)
			cmd.Env = append(os.Environ(), "VERSION=replicas-test")
		} else {
			cmd = exec.Command("go", "build", "-ldflags", "-X main.version=replicas-test", "-o", builtPath, ".")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			builtErr = fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
		}
	})
	if builtErr != nil {
		t.Fatal(builtErr)
	}
	return builtPath
}

// TestMain fails the package if a test leaves a goroutine behind (the commands run in-process
// here: demo, eval, bench, handoff watch), and removes the binary builtBinary left behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if builtPath != "" {
			os.RemoveAll(filepath.Dir(builtPath))
		}
		os.Exit(code)
	}))
}

// lockedBuffer collects a process's log for failure messages and log assertions.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) WriteString(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// replica is one running `compactd serve`.
type replica struct {
	name   string
	cmd    *exec.Cmd
	addr   string
	client openai.Client
	log    *lockedBuffer
	exited chan struct{} // closed when the process has exited; err is then set
	err    error
}

// startReplica starts `compactd serve` on a free loopback port with keys as COMPACTD_KEYS and
// returns once it listens.
func startReplica(t *testing.T, name, upstream, keys string, extra ...string) *replica {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--upstream", upstream,
		"--log-format", "json", "--retain-tokens", "700", "--shutdown-grace", "20s"}, extra...)
	cmd := exec.Command(builtBinary(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COMPACTD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "COMPACTD_KEYS="+keys, "COMPACTD_DATA_DIR="+t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, cmd: cmd, log: &lockedBuffer{}, exited: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			r.log.WriteString(sc.Text() + "\n")
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "compactd listening" {
				addr <- line.Addr
			}
		}
		r.err = cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-r.exited:
		default:
			_ = cmd.Process.Kill()
			<-r.exited
		}
	})
	select {
	case r.addr = <-addr:
	case <-r.exited:
		t.Fatalf("%s exited before listening: %v\n%s", name, r.err, r.log)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start:\n%s", name, r.log)
	}
	r.client = openai.NewClient(option.WithBaseURL("http://"+r.addr+"/v1"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	return r
}

// logged reports whether the replica's log comes to hold want. serve buffers its log and writes it
// out every logFlushInterval (warnings at once), so a line about a request that just ended may
// not be there yet: logged waits up to a few flush intervals for it instead of reading the log
// once. A check that a line is absent belongs after stop, when the whole log has been read.
func (r *replica) logged(want string) bool {
	deadline := time.Now().Add(5 * logFlushInterval)
	for {
		if strings.Contains(r.log.String(), want) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-r.exited:
			return strings.Contains(r.log.String(), want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r.wait(t)
}

func (r *replica) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not exit after SIGTERM:\n%s", r.name, r.log)
	}
	if r.err != nil {
		t.Fatalf("%s exited with %v:\n%s", r.name, r.err, r.log)
	}
}

func newKey(t *testing.T, id string) crypto.Key {
	t.Helper()
	k, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	k.ID = id
	return k
}

// sealedWith reports which of keys opens a compaction item (its encrypted_content is
// "<item id>.<envelope>"), trying each alone in a one-key keyring.
func sealedWith(t *testing.T, encrypted string, keys ...crypto.Key) string {
	t.Helper()
	id, env, ok := strings.Cut(encrypted, ".")
	if !ok {
		t.Fatalf("encrypted_content %.40q… is not <id>.<envelope>", encrypted)
	}
	var found []string
	for _, k := range keys {
		ring, err := crypto.NewKeyring(k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ring.Open(env, crypto.Binding{Kind: "openai.compaction", ItemID: id, Tenant: "default"}); err == nil {
			found = append(found, k.ID)
		}
	}
	if len(found) != 1 {
		t.Fatalf("item %s opens with keys %v, want exactly one", id, found)
	}
	return found[0]
}

// conversation is one client's history, sent whole every turn as the Responses API expects.
type conversation struct {
	t     *testing.T
	fake  *fakeupstream.Server
	items []any
	turns int
	// issued maps each compaction item id to the replica that sealed it.
	issued map[string]string
	// lastItem is the newest compaction item in items, if any.
	lastItem, lastItemBy string
	lastSealed           string
	// crossed counts turns that opened an item another replica sealed.
	crossed int
}

func newConversation(t *testing.T, fake *fakeupstream.Server) *conversation {
	return &conversation{t: t, fake: fake, issued: map[string]string{},
		items: []any{map[string]any{"type": "message", "role": "developer", "content": "You are a careful coding agent."}}}
}

// filler is about n tokens of distinct words.
func filler(turn, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "w%dx%d ", turn, i)
	}
	return b.String()
}

// turn sends the history plus a new user message to r, with a compaction threshold the history
// soon crosses, and checks what the upstream saw. It returns the compaction item's id, if the
// response carries one.
func (c *conversation) turn(r *replica) string {
	t := c.t
	t.Helper()
	c.turns++
	marker := fmt.Sprintf("U-TURN-%d", c.turns)
	c.items = append(c.items, map[string]any{"type": "message", "role": "user", "content": marker + " " + filler(c.turns, 150)})
	if c.lastItem != "" && c.lastItemBy != r.name {
		c.crossed++
	}
	before := len(c.fake.Requests())
	resp, err := r.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: "gpt-test"},
		option.WithJSONSet("input", c.items),
		option.WithJSONSet("context_management", []map[string]any{{"type": "compaction", "compact_threshold": 1000}}))
	if err != nil {
		t.Fatalf("turn %d on %s (previous item %s from %s): %v\n%s", c.turns, r.name, c.lastItem, c.lastItemBy, err, r.log)
	}
	var sent []byte
	for _, rec := range c.fake.Requests()[before:] {
		if rec.Kind == dialect.Responses {
			sent = rec.Body
		}
	}
	if sent == nil {
		t.Fatalf("turn %d: the upstream got no Responses request", c.turns)
	}
	if !strings.Contains(string(sent), marker) {
		t.Errorf("turn %d: the new user message did not reach the upstream", c.turns)
	}
	if strings.Contains(string(sent), `"compaction"`) {
		t.Errorf("turn %d: a compaction item reached the upstream", c.turns)
	}
	// Once anything was compacted, every later turn carries the summary to the model: the
	// previous replica's item was opened here (or this replica compacted again).
	if c.lastItem != "" && !strings.Contains(string(sent), fakeupstream.SummaryPrefix) {
		t.Errorf("turn %d on %s: the upstream did not get the summary of item %s from %s", c.turns, r.name, c.lastItem, c.lastItemBy)
	}
	var newItem string
	for i, o := range resp.Output {
		if o.Type == "compaction" {
			if i != 0 {
				t.Errorf("turn %d: compaction item at output[%d]", c.turns, i)
			}
			item := o.AsCompaction()
			newItem = item.ID
			c.issued[item.ID] = r.name
			c.lastItem, c.lastItemBy, c.lastSealed = item.ID, r.name, item.EncryptedContent
		}
		c.items = append(c.items, json.RawMessage(o.RawJSON()))
	}
	return newItem
}

func TestReplicasShareKeyringAcrossRotation(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	builtBinary(t)
	fake := fakeupstream.New(fakeupstream.Options{})
	fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	upstream, stopFake, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopFake)

	oldKey, newKey := newKey(t, "old"), newKey(t, "new")
	keys := func(ks ...crypto.Key) string {
		var s []string
		for _, k := range ks {
			s = append(s, k.String())
		}
		return strings.Join(s, ",")
	}
	replicas := make([]*replica, 3)
	for i := range replicas {
		replicas[i] = startReplica(t, fmt.Sprintf("r%d-old", i), upstream, keys(oldKey))
	}
	conv := newConversation(t, fake)
	next := 0
	roundRobin := func() string {
		r := replicas[next%len(replicas)]
		next++
		return conv.turn(r)
	}

	// Phase 1: everyone seals with OLD; items cross replicas every turn.
	var oldItems []string
	for range 5 {
		if id := roundRobin(); id != "" {
			oldItems = append(oldItems, id)
			if got := sealedWith(t, conv.lastSealed, oldKey, newKey); got != "old" {
				t.Errorf("phase 1 item sealed with %s", got)
			}
		}
	}
	if len(oldItems) < 2 {
		t.Fatalf("only %d compactions in phase 1; the conversation does not cross the threshold", len(oldItems))
	}
	// A second client whose history ends in an OLD item, resumed after the rotation.
	stale := newConversation(t, fake)
	stale.items = append([]any(nil), conv.items...)
	stale.turns, stale.lastItem, stale.lastItemBy = 100, conv.lastItem, conv.lastItemBy

	// Phase 2, rolling: NEW added as retired, one replica at a time, traffic in between.
	for i := range replicas {
		replicas[i].stop(t)
		replicas[i] = startReplica(t, fmt.Sprintf("r%d-retired-new", i), upstream, keys(oldKey, newKey))
		roundRobin()
		if conv.lastSealed != "" {
			if got := sealedWith(t, conv.lastSealed, oldKey, newKey); got != "old" {
				t.Errorf("phase 2: item sealed with %s while OLD is active everywhere", got)
			}
		}
	}
	// Phase 3, rolling: NEW active, OLD retired. Mid-roll, items sealed with NEW reach replicas
	// still in phase 2, which open them because NEW is already in their keyring.
	for i := range replicas {
		replicas[i].stop(t)
		replicas[i] = startReplica(t, fmt.Sprintf("r%d-active-new", i), upstream, keys(newKey, oldKey))
		// Two turns: one on the restarted replica when the round-robin gets there, and one that
		// carries its item to the next replica.
		roundRobin()
		roundRobin()
	}
	var newItems int
	for range 4 {
		if id := roundRobin(); id != "" {
			newItems++
			if got := sealedWith(t, conv.lastSealed, oldKey, newKey); got != "new" {
				t.Errorf("after rotation, item %s sealed with %s", id, got)
			}
		}
	}
	if newItems == 0 {
		t.Fatal("no compaction after the rotation")
	}
	// Items sealed before the rotation still open everywhere.
	for _, r := range replicas {
		s := *stale
		s.items = append([]any(nil), stale.items...)
		s.turn(r)
	}

	// Nothing lost: items crossed replicas, and each compaction was one summariser call.
	if conv.crossed < len(conv.issued)-1 {
		t.Errorf("only %d of %d items were opened by another replica", conv.crossed, len(conv.issued))
	}
	summaries := 0
	for _, rec := range fake.Requests() {
		if rec.Kind == fakeupstream.KindSummary {
			summaries++
		}
	}
	if summaries < len(conv.issued) {
		t.Errorf("%d summariser calls for %d compactions", summaries, len(conv.issued))
	}
	issuers := map[string]bool{}
	for _, by := range conv.issued {
		issuers[by[:2]] = true
	}
	if len(issuers) != len(replicas) {
		t.Errorf("compaction items came from %v; want every replica", issuers)
	}
	t.Logf("%d turns, %d compactions (%d after the rotation), %d opened by another replica, %d summariser calls",
		conv.turns, len(conv.issued), newItems, conv.crossed, summaries)
	for _, r := range replicas {
		r.stop(t)
	}
}

// TestSIGTERMDrainsStream: a SIGTERM in the middle of a slow stream lets it finish with
// response.completed, and the process exits by itself, inside the grace period.
func TestSIGTERMDrainsStream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	builtBinary(t)
	const deltas = 12
	slow := fakeupstream.New(fakeupstream.Options{TokenDelay: 100 * time.Millisecond, Deltas: deltas})
	slow.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	upstream, stopFake, err := slow.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopFake)
	r := startReplica(t, "draining", upstream, newKey(t, "k1").String())

	stream := r.client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "gpt-test"},
		option.WithJSONSet("input", []any{map[string]any{"type": "message", "role": "user", "content": "tell me a long story"}}))
	var types []string
	var text strings.Builder
	signalled := false
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
			if !signalled {
				if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				signalled = true
			}
		}
	}
	if err := stream.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("stream broke after SIGTERM: %v (events %v)", err, types)
	}
	if !signalled {
		t.Fatalf("no text delta arrived: %v", types)
	}
	if len(types) == 0 || types[len(types)-1] != "response.completed" {
		t.Fatalf("stream ended with %v, want response.completed", types[max(0, len(types)-3):])
	}
	if !strings.HasPrefix(text.String(), "MOCK-REPLY") {
		t.Errorf("streamed text %q", text.String())
	}
	r.wait(t)
	logs := r.log.String()
	if !strings.Contains(logs, "shutting down") {
		t.Errorf("no shutdown log line:\n%s", logs)
	}
	if strings.Contains(logs, "grace period over") {
		t.Errorf("the stream outlived the grace period:\n%s", logs)
	}
}
