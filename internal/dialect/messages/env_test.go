package messages

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/turn"
)

// The fake front: an Env over a real engine (a fresh keyring, a summariser that answers one fixed
// summary, no ledger, no speculation) and the counters a test reads.

const (
	testTenant  = "tenant-a"
	testSummary = "The user asked for the parser refactor; the tests pass."
)

// fixedSum answers every summarisation with testSummary.
type fixedSum struct{}

func (fixedSum) Summarize(context.Context, summarizer.Request) (summarizer.Result, error) {
	return summarizer.Result{Summary: testSummary, Model: "sum-model",
		Usage: summarizer.Usage{InputTokens: 120, OutputTokens: 30, CachedTokens: 4, TotalTokens: 150}}, nil
}

// fakeFront is what a test reads of the front's side of a turn.
type fakeFront struct {
	mu        sync.Mutex
	reject    bool     // the foreign-items policy is reject
	foreign   []string // Foreign's where, one per call
	handedOff int
	refs      map[string]string // FindRef: a text holding key verifies as conversation value
	noRecall  bool              // Recalls: false (no archive, or recall off)
	eng       *engine.Engine
}

func (f *fakeFront) Open(param, ec, id, sig string) (*engine.Opened, *fault.Fault) {
	o, err := f.eng.Open(ec, id, SealKind, testTenant, sig)
	if err != nil {
		return nil, &fault.Fault{Code: fault.CodeInvalidEncryptedContent, Param: param, Message: "did not open: " + engine.Reason(err)}
	}
	return o, nil
}

func (f *fakeFront) HandedOff() { f.mu.Lock(); f.handedOff++; f.mu.Unlock() }

func (f *fakeFront) Foreign(n int, where string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.foreign = append(f.foreign, where)
	return f.reject
}

func (f *fakeFront) Conversation(key string, prev *engine.Opened) string {
	if l := f.Label(key, prev); l != "" {
		return l
	}
	return "conv_new"
}

func (f *fakeFront) Label(key string, prev *engine.Opened) string {
	if prev != nil && prev.Payload.Archive != nil {
		return prev.Payload.Archive.Conversation
	}
	return key
}

func (f *fakeFront) Recalls() bool { return !f.noRecall }

func (f *fakeFront) FindRef(text string) (string, string, bool) {
	for k, conv := range f.refs {
		if strings.Contains(text, k) {
			return conv, "owner-of-" + conv, true
		}
	}
	return "", "", false
}

type envOption func(*turn.Env, *fakeFront)

func withOptions(o turn.Options) envOption { return func(e *turn.Env, _ *fakeFront) { e.Options = o } }
func withHeader(k, v string) envOption     { return func(e *turn.Env, _ *fakeFront) { e.Header.Set(k, v) } }

// newEnv returns an Env whose engine and counter live as long as the test.
func newEnv(t testing.TB, opts ...envOption) (*turn.Env, *fakeFront) {
	t.Helper()
	k, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := crypto.NewKeyring(k)
	if err != nil {
		t.Fatal(err)
	}
	counter := compact.NewCounter(compact.CounterOptions{})
	t.Cleanup(counter.Close)
	eng := engine.New(engine.Config{Sealer: ring, Summarizer: fixedSum{}, Counter: counter, MinSaving: -1,
		Speculative: engine.SpeculativeConfig{Fraction: -1}})
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	f := &fakeFront{refs: map[string]string{}}
	f.eng = eng
	env := &turn.Env{Front: f, Ctx: context.Background(), Header: http.Header{}, Counter: counter, Engine: eng}
	for _, o := range opts {
		o(env, f)
	}
	return env, f
}

// parse parses body on a, failing the test on a refusal.
func parse(t testing.TB, a Adapter, env *turn.Env, body string) *Turn {
	t.Helper()
	tt, f := a.Parse(env, []byte(body))
	if f != nil {
		t.Fatalf("Parse refused %s: %+v", body, f)
	}
	return tt.(*Turn)
}

// compact runs the engine request as the front does (tenant filled in) and hands the compaction
// to the turn.
func compactTurn(t testing.TB, env *turn.Env, tt *Turn, r engine.Request, transparent bool) *engine.Compaction {
	t.Helper()
	r.Dialect, r.Tenant = Adapter{}.Engine(), testTenant
	c, err := env.Engine.Compact(env.Ctx, r)
	if err != nil {
		t.Fatalf("Compact: %v", err)
	}
	tt.Compacted(c, transparent)
	return c
}

// words is n words of conversation.
func words(n int) string { return strings.Repeat("the parser module changed again ", n/5+1) }

// msg renders a message of one string content.
func msg(role, text string) string {
	return string(api.AnthropicMessage(role, [][]byte{api.TextBlock(text)}))
}

// history is a conversation long enough to compact: n user/assistant exchanges.
func history(n int) []string {
	var out []string
	for i := range n {
		out = append(out, msg("user", "question "+string(rune('a'+i))+" "+words(60)), msg("assistant", "answer "+words(60)))
	}
	return out
}

// body renders a Messages request of msgs with the extra top-level members (raw JSON).
func body(msgs []string, extra ...string) string {
	b := `{"model":"claude-test","max_tokens":1024,"messages":[` + strings.Join(msgs, ",") + `]`
	for _, e := range extra {
		b += "," + e
	}
	return b + "}"
}

// sealedBlock compacts msgs (a compact_20260112 turn) and returns the compaction block the
// client would hold, with the compaction.
func sealedBlock(t testing.TB, env *turn.Env, msgs []string) ([]byte, *engine.Compaction) {
	t.Helper()
	tt := parse(t, Adapter{}, env, body(msgs, `"context_management":{"edits":[{"type":"compact_20260112"}]}`))
	total := tt.Tokens(env, 50_000)
	c := compactTurn(t, env, tt, tt.Compaction(env, total, false), false)
	if tt.block == nil {
		t.Fatal("the turn carries no block after Compacted")
	}
	return tt.block, c
}

// The fake front has no skim cache: every body is skimmed in full.
func (f *fakeFront) ResumeFrom([]byte) *api.Prefix                     { return nil }
func (f *fakeFront) Skimmed([]byte, interface{ Prefix() *api.Prefix }) {}
