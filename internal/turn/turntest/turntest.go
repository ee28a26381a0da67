// Package turntest is the conformance suite every API adapter runs (internal/dialect/<api>):
// the contracts of internal/turn checked against a real engine, counter, keyring and memo, with
// a scripted summariser. An adapter's own tests call Run with fixtures of its wire format; what
// the suite checks is what the front relies on without knowing the API:
//
//   - a request compactd has nothing to do with goes upstream byte for byte (the client's own
//     bytes, not a copy);
//   - the conversation a carried compaction hands off and the one the memo applies for a client
//     that carries nothing are the same bytes, and both continue the compacting turn's own
//     upstream conversation, so the upstream's prompt cache keeps hitting;
//   - a compaction put into the answer lands where the API's clients look for it, in JSON and in
//     the stream, with every later index and sequence number shifted (the fixture's checks);
//   - a fault written into a committed stream is an event the API's parsers take as its end;
//   - a keep-alive is nothing the API's parsers act on;
//   - the engine's view of the API is consistent (its name, a seal kind of its own).
package turntest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/compactd/compactd/bench/workload"
	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/memo"
	"github.com/compactd/compactd/internal/skimcache"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn"
	"github.com/tidwall/gjson"
)

// Fixture is one API's material for the suite.
type Fixture struct {
	// Plain is a request compactd has nothing to do with (no carried compaction, nothing that
	// only compactd implements): Parse must leave it as it came.
	Plain []byte
	// Long is a conversation long enough to compact, with no compaction in it; Next is the same
	// request with the next turn appended (the upstream's answer, where the API's clients keep
	// it, and a new user message): what a client that never carries a compaction sends next.
	Long, Next []byte
	// Carry is the request a client that carries compactions back sends after receiving c for
	// Long: Next, with c where the API's clients keep it. nil: the API has no compaction on the
	// wire (its compactions are transparent only).
	Carry func(c *engine.Compaction) []byte
	// JSONAnswer and SSEAnswer are upstream answers to Long; CheckJSON and CheckSSE check the
	// rewritten answer of a turn that issued c (nil: the API puts nothing into its answers).
	JSONAnswer, SSEAnswer []byte
	CheckJSON             func(t *testing.T, out []byte, c *engine.Compaction)
	CheckSSE              func(t *testing.T, events []sse.Event, c *engine.Compaction)
	// Ignorable are the SSE event names the API's parsers skip (Anthropic's ping), beside
	// comments, which every parser skips.
	Ignorable []string
}

// Harness is an Env over real parts, for an adapter's own tests.
type Harness struct {
	Env    *turn.Env
	Engine *engine.Engine
	Memo   memo.Memo
	// Summaries counts the summariser's calls.
	Summaries int
	Foreign   []string // where Env.Foreign was told of foreign compactions
}

// Tenant is the tenant the harness compacts and opens under.
const Tenant = "tenant-a"

// NewHarness builds an engine (a fresh keyring, a summariser that answers "summary of N
// entries", a local memo, no speculation) and an Env over it for a.
func NewHarness(t testing.TB, a turn.Dialect) *Harness {
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
	h := &Harness{Memo: memo.NewLocal(0, 0)}
	sum := summarise(func() { h.Summaries++ })
	h.Engine = engine.New(engine.Config{Sealer: ring, Summarizer: sum, Counter: counter, Memo: h.Memo,
		Speculative: engine.SpeculativeConfig{Fraction: -1}, MinSaving: -1})
	t.Cleanup(func() { _ = h.Engine.Close(context.Background()) })
	h.Env = &turn.Env{Front: &front{h: h, kind: a.Engine().SealKind, skims: skimcache.New(skimcache.Options{Budget: 8 << 20, MinBody: 1})},
		Ctx: context.Background(), Header: map[string][]string{}, Counter: counter, Engine: h.Engine, Retain: compact.DefaultRetainBudget}
	return h
}

// front is the harness's turn.Front: compactions open under Tenant; foreign ones are recorded
// and dropped; every turn is conversation "conv-test"; recall is off.
type front struct {
	h     *Harness
	kind  string
	skims *skimcache.Cache
	hit   skimcache.Hit
}

func (f *front) Open(param, ec, id, sig string) (*engine.Opened, *fault.Fault) {
	o, err := f.h.Engine.Open(ec, id, f.kind, Tenant, sig)
	if err != nil {
		return nil, &fault.Fault{Code: fault.CodeInvalidEncryptedContent, Param: param, Message: err.Error()}
	}
	return o, nil
}
func (f *front) HandedOff() {}
func (f *front) Foreign(_ int, where string) bool {
	f.h.Foreign = append(f.h.Foreign, where)
	return false
}
func (f *front) Conversation(string, *engine.Opened) string { return "conv-test" }
func (f *front) Label(string, *engine.Opened) string        { return "conv-test" }
func (f *front) Recalls() bool                              { return false }
func (f *front) FindRef(string) (string, string, bool)      { return "", "", false }

// ResumeFrom and Skimmed keep the harness's turns on the skim cache, as the front's are: a
// conformance run whose requests grow resumes their skims (every body, whatever its size).
func (f *front) ResumeFrom(body []byte) *api.Prefix {
	f.hit = f.skims.Find("turntest", body, nil)
	p, _ := f.hit.State.(*api.Prefix)
	return p
}

func (f *front) Skimmed(body []byte, s interface{ Prefix() *api.Prefix }) {
	if p := s.Prefix(); p != nil {
		f.skims.Store("turntest", body, f.hit, p)
	}
}

// Compact runs t's threshold compaction through the engine as the front does, records it in the
// memo against the turn's units (as a transparent turn's is), and puts it in force.
func (h *Harness) Compact(tb testing.TB, a turn.Dialect, t turn.Turn, transparent bool) *engine.Compaction {
	tb.Helper()
	mem := h.Engine.Remembered(h.Env.Ctx, a.Engine(), engine.Scope{Tenant: Tenant, Owner: "owner"}, api.Raws[json.RawMessage](t.Units()))
	req := t.Compaction(h.Env, t.Tokens(h.Env, 0), transparent)
	req.Dialect, req.Tenant, req.Owner, req.Memory = a.Engine(), Tenant, "owner", mem
	c, err := h.Engine.Compact(h.Env.Ctx, req)
	if err != nil {
		tb.Fatalf("Compact: %v", err)
	}
	t.Compacted(c, transparent)
	return c
}

// Run runs the suite for a.
func Run(t *testing.T, a turn.Adapter, fx Fixture) {
	t.Run("engine view", func(t *testing.T) {
		d := a.Engine()
		if d.Name != a.Name() || !a.Name().Valid() {
			t.Errorf("Engine().Name = %q, Name() = %q", d.Name, a.Name())
		}
		if d.SealKind == "" || d.Handoff == nil {
			t.Errorf("Engine() = %+v: a seal kind and a handoff renderer are required", d)
		}
	})
	t.Run("plain request passes byte for byte", func(t *testing.T) {
		h := NewHarness(t, a)
		tr, f := a.Parse(h.Env, fx.Plain)
		if f != nil {
			t.Fatalf("Parse: %v", f)
		}
		if tr.Changed(h.Env) {
			t.Fatal("Changed() on a request compactd has nothing to do with")
		}
		out := tr.Body(h.Env)
		if !bytes.Equal(out, fx.Plain) {
			t.Fatalf("Body() = %s\nwant the client's bytes %s", out, fx.Plain)
		}
		if len(out) > 0 && &out[0] != &fx.Plain[0] {
			t.Error("Body() copied the client's bytes; it must hand them on as they came")
		}
	})
	t.Run("handoff: carried equals memo equals the compacting turn", func(t *testing.T) {
		h := NewHarness(t, a)
		first, f := a.Parse(h.Env, fx.Long)
		if f != nil {
			t.Fatalf("Parse(Long): %v", f)
		}
		c := h.Compact(t, a, first, fx.Carry == nil)
		compacted := raws(first.Units())

		next, f := a.Parse(h.Env, fx.Next)
		if f != nil {
			t.Fatalf("Parse(Next): %v", f)
		}
		mem := h.Engine.Remembered(h.Env.Ctx, a.Engine(), engine.Scope{Tenant: Tenant, Owner: "owner"}, api.Raws[json.RawMessage](next.Units()))
		if mem == nil || mem.Opened == nil {
			t.Fatal("the memo does not remember the compaction for the next turn's history")
		}
		next.Remember(h.Env, mem)
		viaMemo := raws(next.Units())
		if len(viaMemo) <= len(compacted) || !sameUnits(viaMemo[:len(compacted)], compacted) {
			t.Errorf("the memo's handoff does not continue the compacting turn's conversation:\nmemo:      %s\ncompacted: %s", join(viaMemo), join(compacted))
		}
		if fx.Carry == nil {
			return
		}
		carried, f := a.Parse(h.Env, fx.Carry(c))
		if f != nil {
			t.Fatalf("Parse(Carry): %v", f)
		}
		if got := raws(carried.Units()); !sameUnits(got, viaMemo) {
			t.Errorf("a carried compaction hands off other bytes than the memo's record of it:\ncarried: %s\nmemo:    %s", join(got), join(viaMemo))
		}
		if carried.Prev() == nil || carried.Prev().ID != c.ID {
			t.Errorf("Prev() after a carried compaction = %v, want %s", carried.Prev(), c.ID)
		}
	})
	if fx.CheckJSON != nil {
		t.Run("JSON answer carries the compaction", func(t *testing.T) {
			h := NewHarness(t, a)
			tr, f := a.Parse(h.Env, fx.Long)
			if f != nil {
				t.Fatalf("Parse(Long): %v", f)
			}
			c := h.Compact(t, a, tr, false)
			rw := tr.Rewriter()
			if rw == nil || !rw.Rewrites() || !rw.Carries() {
				t.Fatal("a turn that issued a compaction has no rewriter that carries it")
			}
			out, why := rw.JSON(fx.JSONAnswer)
			if why != "" {
				t.Fatalf("JSON: %s", why)
			}
			fx.CheckJSON(t, out, c)
		})
	}
	if fx.CheckSSE != nil {
		t.Run("SSE answer carries the compaction", func(t *testing.T) {
			h := NewHarness(t, a)
			tr, f := a.Parse(h.Env, fx.Long)
			if f != nil {
				t.Fatalf("Parse(Long): %v", f)
			}
			tr.Stream().Streamed = true
			c := h.Compact(t, a, tr, false)
			body := tr.Rewriter().Events(nopCloser{bytes.NewReader(fx.SSEAnswer)})
			if body == nil {
				t.Fatal("Events() = nil for a turn that issued a compaction")
			}
			var evs []sse.Event
			rd := sse.NewReader(body)
			for {
				ev, err := rd.Next()
				if err != nil {
					break
				}
				if d := bytes.TrimSpace(ev.Data); len(d) > 0 && !bytes.Equal(d, []byte("[DONE]")) && !jsonValid(d) {
					t.Fatalf("event %q: data is not JSON: %s", ev.Name, d)
				}
				ev.Data, ev.Raw = bytes.Clone(ev.Data), bytes.Clone(ev.Raw) // the reader reuses its buffers
				evs = append(evs, ev)
			}
			fx.CheckSSE(t, evs, c)
		})
	}
	t.Run("a fault in a committed stream ends it", func(t *testing.T) {
		for _, f := range []*fault.Fault{turn.UpstreamInterrupted(), {Kind: fault.Unavailable, Code: fault.CodeCompactionUnavailable, Message: "m"}} {
			b := a.FaultEvent(f, &turn.Stream{Streamed: true, Committed: true, Seq: 7, ResponseID: "resp_1"})
			evs := events(t, b)
			if len(evs) == 0 {
				t.Fatalf("FaultEvent(%s) wrote no event: %q", f.Code, b)
			}
			last := bytes.TrimSpace(evs[len(evs)-1].Data)
			if !jsonValid(last) || !a.Terminal(last) {
				t.Errorf("FaultEvent(%s) ends with %q, which Terminal does not take as the end of the stream", f.Code, last)
			}
			if body := a.Fault(f).Body(); !jsonValid(body) {
				t.Errorf("Fault(%s).Body() is not JSON: %s", f.Code, body)
			}
		}
	})
	t.Run("keep-alives are nothing a parser acts on", func(t *testing.T) {
		for _, first := range []bool{true, false} {
			for _, ev := range events(t, a.KeepAlive(first)) {
				if len(ev.Data) == 0 && ev.Name == "" {
					continue // a comment
				}
				if !contains(fx.Ignorable, ev.Name) {
					t.Errorf("KeepAlive(%v) sends event %q (%s), which the API's parsers do not skip", first, ev.Name, ev.Data)
				}
			}
		}
	})
}

func events(t *testing.T, b []byte) []sse.Event {
	t.Helper()
	var out []sse.Event
	rd := sse.NewReader(bytes.NewReader(b))
	for {
		ev, err := rd.Next()
		if err != nil {
			return out
		}
		if !ev.Terminated {
			t.Errorf("an event compactd wrote is not terminated: %q", ev.Raw)
		}
		ev.Data, ev.Raw = bytes.Clone(ev.Data), bytes.Clone(ev.Raw) // the reader reuses its buffers
		out = append(out, ev)
	}
}

func raws(items []api.Item) [][]byte {
	out := make([][]byte, len(items))
	for i, it := range items {
		out[i] = it.Raw
	}
	return out
}

func sameUnits(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func join(b [][]byte) string { return string(bytes.Join(b, []byte("\n  "))) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

func jsonValid(b []byte) bool { return jsonx.Valid(b) == nil }

// summarise is a summariser that always answers the same summary.
type summarise func()

func (s summarise) Summarize(context.Context, summarizer.Request) (summarizer.Result, error) {
	s()
	return summarizer.Result{Summary: "summary of the conversation", Model: "sum-model"}, nil
}

// Chunked hands out src in pieces of at most n bytes, so event boundaries fall anywhere in a
// rewriter's reads.
func Chunked(src []byte, n int) io.ReadCloser {
	return io.NopCloser(&chunkedReader{src: src, n: max(n, 1)})
}

type chunkedReader struct {
	src []byte
	n   int
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if len(c.src) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.src))
	copy(p, c.src[:k])
	c.src = c.src[k:]
	return k, nil
}

// SSEData splits an SSE body into the data payloads of its events, with compactd's reader; data
// that is not JSON fails the test.
func SSEData(t testing.TB, body []byte) []gjson.Result {
	t.Helper()
	var out []gjson.Result
	rd := sse.NewReader(bytes.NewReader(body))
	for {
		ev, err := rd.Next()
		if err != nil {
			return out
		}
		if !ev.HasData() {
			continue
		}
		if !gjson.ValidBytes(ev.Data) {
			t.Fatalf("event data is not JSON: %q", ev.Data)
		}
		out = append(out, gjson.ParseBytes(append([]byte(nil), ev.Data...)))
	}
}

// ResponsesStream returns a Responses SSE body as the fake upstream writes it, with deltas text
// deltas, and the number of events in it.
func ResponsesStream(tb testing.TB, deltas int) ([]byte, int) {
	tb.Helper()
	fake := fakeupstream.New(fakeupstream.Options{Deltas: deltas, DropBodies: true})
	body := workload.Request(8<<10, workload.BodyOptions{Stream: true})
	w := httptest.NewRecorder()
	fake.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/responses", bytes.NewReader(body)))
	if w.Code != http.StatusOK {
		tb.Fatalf("fake upstream: %d %s", w.Code, w.Body)
	}
	out := w.Body.Bytes()
	return out, bytes.Count(out, []byte("\n\n"))
}
