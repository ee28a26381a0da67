package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/owner"
	"github.com/compactd/compactd/internal/skimcache"
	"github.com/compactd/compactd/internal/turn"
)

// The one turn pipeline. Every compacting route of every API is served by serveTurn through the
// route's adapter (internal/dialect/<api>, behind internal/turn's seam), in one order:
//
//	read the body (limits, budget) → adapter.Parse (skim, foreign policy, open the carried
//	compaction, hand it off) → an agent's own compaction, answered by compactd → an explicit
//	compaction, answered by compactd → pass-through when the turn needs nothing → threshold:
//	the client's or the operator's policy; transparent turns first get the memo's compaction →
//	count → speculate below the threshold, compact above it (the stream held open meanwhile) →
//	recall → the body-sized rebuild reserved → forward, the answer rewritten on its way back.
//
// What differs by API is the adapter's; everything here is the same for all of them.

// serveTurn is the handler of a's route.
func (s *Server) serveTurn(a turn.Adapter, upstream *url.URL) http.HandlerFunc {
	rp := s.newTurnProxy(upstream, a)
	return func(w http.ResponseWriter, r *http.Request) {
		p := &pipe{s: s, w: w, r: r, a: a, rp: rp, upstream: upstream}
		early := false
		if s.earlyEligible(r) {
			p.asSent = s.asSent.slot(p.skimScope())
			early = p.asSent.Load()
		}
		onBuf := p.onBodyBuffer(early)
		defer func() {
			p.early.abort() // whatever the turn did, nothing of the early request outlives it
			if p.early != nil {
				s.metrics.EarlyForward(apiName(a), p.earlyCommitted)
			}
		}()
		body, ok := s.readBody(w, r, a, onBuf)
		if !ok {
			return
		}
		p.body = body
		p.env = turn.Env{Front: p, Ctx: r.Context(), Header: r.Header, Counter: s.cfg.Counter, Engine: s.engine,
			Retain: s.cfg.RetainTokens, Options: s.turnOptions}
		t, f := a.Parse(&p.env, body)
		if f != nil {
			p.early.abort()
			if p.asSent != nil {
				p.asSent.Store(false)
			}
			writeFault(w, a, f)
			return
		}
		p.t = t
		p.serve()
		p.early.abort()
		if p.asSent != nil {
			p.asSent.Store(p.forwardedAsSent)
		}
		if p.released && p.out != nil && p.out.done() {
			s.bodies.put(body) // nothing was handed the body, and the transport is done with it
			if r, ok := t.(turn.Releaser); ok {
				r.Release() // nor anything the skim made of it
			}
		}
	}
}

// onBodyBuffer is readBody's onBuf for the turn: handed a declared body's buffer before it is
// read, it starts the early forward (early: the client's last turn went as it came), and the
// function it returns advances the skim cache's MAC after each read, while the bytes just read
// are still in the CPU's cache (skimcache.BodyMAC), and lets the early forward go on. nil when
// the turn needs neither (a small body reads as before).
func (p *pipe) onBodyBuffer(early bool) func([]byte) func(int) {
	if !early && !p.s.skims.Wants(int(min(p.r.ContentLength, p.s.cfg.MaxBodyBytes))) {
		return nil
	}
	return func(buf []byte) func(int) {
		var filled func(int)
		if early {
			p.early = startEarly(p.w, p.r, buf, p.rp)
			filled = p.early.filled
		}
		m := p.s.skims.NewBodyMAC(buf)
		if m == nil {
			return filled
		}
		p.bodyMAC = m
		return func(n int) {
			m.Advance(buf[:n])
			if filled != nil {
				filled(n)
			}
		}
	}
}

// earlyEligible reports whether r's body is one an early forward may start for (early.go): a
// declared length of Config.EarlyForwardBytes or more, within the body limit.
func (s *Server) earlyEligible(r *http.Request) bool {
	n := s.cfg.EarlyForwardBytes
	return n > 0 && r.ContentLength >= n && r.ContentLength <= s.cfg.MaxBodyBytes
}

// pipe is one turn on its way through the pipeline.
type pipe struct {
	s        *Server
	w        http.ResponseWriter
	r        *http.Request
	a        turn.Adapter
	t        turn.Turn
	env      turn.Env // the adapter's view of the front (its Front is the pipe itself)
	body     []byte   // the client's bytes
	rp       http.Handler
	upstream *url.URL
	c        *engine.Compaction // the compaction this turn made, if any
	fl       flight             // what the answer's hooks rewrite (forward), in the pipe's own allocation
	skimHit  skimcache.Hit      // the remembered skim the body's was resumed from (ResumeFrom)
	bodyMAC  *skimcache.BodyMAC // the skim cache's MAC of the body, advanced as it was read
	scope    string             // the skim cache's scope of the request (skimScope), once made
	// out is the upstream body of the turn's forward: once the transport has read it to the end
	// (and never replayed it), and released says nothing else was handed the client's bytes,
	// their buffer is reused.
	out interface{ done() bool }
	// released: the turn ended in a forward with no threshold (nothing counted, speculated,
	// compacted or remembered) and no recall: what it forwarded is all that read its body.
	released    bool
	noThreshold bool // the turn has no threshold
	// early is the body's early forward (early.go), nil when none was started; asSent the
	// client's slot of the prediction that starts one, nil for a body too small to have one.
	early           *early
	asSent          *atomic.Bool
	forwardedAsSent bool // the turn went upstream exactly as the client sent it
	earlyCommitted  bool // ... and as the early forward
}

func (p *pipe) serve() {
	if p.early != nil && p.t.Changed(&p.env) {
		p.early.abort() // the body goes upstream rebuilt, if at all
	}
	if p.agent() {
		return // an agent's own compaction, answered by compactd
	}
	if d, ok := p.t.(turn.Deferred); ok {
		if f := d.Refusal(); f != nil {
			writeFault(p.w, p.a, f) // put off by Parse in case the turn was an agent's compaction
			return
		}
	}
	if p.explicit() {
		return // an explicit compaction, answered by compactd
	}
	policy := p.s.cfg.Policy.ForRoute(p.a.Name())
	if pt, ok := p.t.(turn.PassThrough); ok && pt.PassThrough(&p.env, policy.Threshold > 0) {
		p.forward(api.Splice{p.body}, nil)
		p.released = true
		return
	}
	if p.threshold(policy) {
		return
	}
	rc := p.recall()
	if p.c == nil && (rc != nil || p.t.Changed(&p.env)) && !holdOf(p.r).Rebuild() {
		budgetRefused(p.w, p.a, p.s.budget, p.s.metrics) // a body-sized rebuild, beside the body
		return
	}
	if rc != nil {
		st, r := p.t.Stream(), p.r
		if uh, ok := p.t.(turn.UpstreamHeaders); ok {
			r = r.Clone(r.Context()) // every round goes upstream with the turn's headers
			uh.UpstreamHeaders(r.Header)
		}
		p.s.recall.run(p.w, r, rc.rt, rc.d, p.a, p.upstream, st.Streamed, st.Committed)
		return
	}
	// No threshold and no recall: nothing (no compaction, speculation, memo or archive) was
	// handed the client's bytes but the forward.
	p.released = p.noThreshold && rc == nil && p.c == nil
	if sp, ok := p.t.(turn.Spliced); ok && p.t.Changed(&p.env) {
		if parts := sp.Splice(&p.env); parts != nil {
			p.forward(parts, p.t.Rewriter())
			return
		}
	}
	p.forward(api.Splice{p.t.Body(&p.env)}, p.t.Rewriter())
}

// threshold applies the client's threshold or the operator's policy: the memo's compaction for a
// transparent turn, then the count, then speculation below the threshold or a compaction above
// it. It reports whether the turn has been answered.
func (p *pipe) threshold(policy compact.Policy) bool {
	th, speaks, ok := p.t.Threshold()
	if !ok {
		p.noThreshold = true
		return false
	}
	limit, trigger := policy.Effective(th)
	if limit <= 0 {
		p.noThreshold = true
		return false
	}
	s, ctx := p.s, p.r.Context()
	// transparent: the operator's policy for a client that asked for nothing: its compactions go
	// to the memo, and come back from it.
	transparent := trigger == "policy" && !speaks
	var mem *engine.Memory
	if transparent {
		mem = s.engine.Remembered(ctx, p.a.Engine(), s.scope(ctx), api.Raws[json.RawMessage](p.t.Units()))
		if mem != nil && mem.Opened != nil {
			p.t.Remember(&p.env, mem)
			p.markApplied(mem)
		}
	}
	total := p.t.Tokens(&p.env, limit)
	if !compact.Over(total, limit) {
		if s.engine.Speculating(total, limit) {
			sr := p.t.Speculation(&p.env)
			sr.Dialect, sr.Tenant, sr.Owner, sr.Auth = p.a.Engine(), s.tenantOf(ctx), s.ownerOf(ctx), s.summariserAuth(p.r)
			sr.Total, sr.Limit = total, limit
			s.engine.Speculate(sr)
		}
		return false
	}
	req := p.t.Compaction(&p.env, total, transparent)
	req.Memory = mem
	st := p.t.Stream()
	if !holdOf(p.r).Compaction() {
		s.metrics.BudgetRefused()
		writeFaultTo(p.w, p.a, st, budgetExceeded(s.budget))
		return true
	}
	c, err := p.compactHeld(ctx, req, p.a.KeepAlive)
	switch {
	case engine.SkipReason(err) != "":
		// It could not make the turn meaningfully smaller: the turn goes on as it came.
		p.compactionSkipped(trigger, err)
		return false
	case err != nil:
		p.compactionFailed(trigger, req.Model, err)
		if !st.Committed && p.passThroughOnFailure(err) {
			return false // forward the turn as it came
		}
		if f := compactionFailure(err); f != nil {
			writeFaultTo(p.w, p.a, st, f)
		}
		return true
	}
	p.compacted(trigger, c)
	p.c = c.Compaction
	p.t.Compacted(c.Compaction, transparent)
	if transparent {
		markCompactedTurn(p.w, st, c)
	}
	if pa, ok := p.t.(turn.Pauser); ok && pa.Pauses() {
		pa.AnswerPause(p.w, c.Compaction)
		return true
	}
	return false
}

// compactHeld runs one compaction of the turn: a streamed turn is held open with tick while
// it runs (nothing for the first interval, so a quick summariser still gets a proper status),
// and the stream is marked committed when a keep-alive went out. This is the one place a turn
// waits on the summariser.
func (p *pipe) compactHeld(ctx context.Context, req engine.Request, tick func(first bool) []byte) (*compaction, error) {
	p.early.abort() // a compaction changes the turn: the early request is not it
	s, st := p.s, p.t.Stream()
	req.Dialect, req.Tenant, req.Owner, req.Auth = p.a.Engine(), s.tenantOf(ctx), s.ownerOf(ctx), s.summariserAuth(p.r)
	if rs := stateFrom(ctx); rs != nil {
		rs.conversation = req.Conversation // the event log's (eventlog.go)
	}
	var ka *keepAlive
	if st.Streamed {
		ka = startKeepAlive(p.w, s.cfg.KeepAlive, tick)
	}
	start := time.Now()
	s.live.compacting.Add(1)
	c, err := s.engine.Compact(ctx, req)
	s.live.compacting.Add(-1)
	st.Committed = st.Committed || ka != nil && ka.Stop()
	if err != nil {
		return nil, err
	}
	return &compaction{Compaction: c, took: time.Since(start)}, nil
}

// agent answers an agent's own compaction turn (Codex's local compaction, Claude Code's
// /compact) with compactd's summary, and reports whether the turn has been answered; false: it
// goes on as if it were not one (compactd could not make it smaller: the agent's own model
// summarises).
func (p *pipe) agent() bool {
	ag, ok := p.t.(turn.AgentCompaction)
	if !ok || p.s.cfg.NoAgentCompaction {
		return false
	}
	name, req, ok := ag.Agent(&p.env)
	if !ok {
		return false
	}
	s, st := p.s, p.t.Stream()
	p.w.Header().Set(agentCompactionHeader, name)
	if !holdOf(p.r).Compaction() {
		s.metrics.BudgetRefused()
		writeFaultTo(p.w, p.a, st, budgetExceeded(s.budget))
		return true
	}
	c, err := p.compactHeld(withAgentSummariser(p.r.Context()), req, p.a.KeepAlive)
	if err != nil {
		skipped := engine.SkipReason(err) != ""
		if skipped {
			p.compactionSkipped(agentTrigger, err)
		}
		if skipped || errors.Is(err, summarizer.ErrNothingToSummarize) {
			switch {
			case !st.Committed:
				p.w.Header().Del(agentCompactionHeader)
				return false // the agent's own request, as it came: the model summarises
			case errors.Is(err, engine.ErrNotSmaller):
				writeFaultTo(p.w, p.a, st, compactionFailure(err))
			default:
				f := compactionFailure(err)
				if an, ok := ag.(turn.AgentNothing); ok {
					f = an.AgentNothing()
				}
				writeFaultTo(p.w, p.a, st, f)
			}
			return true
		}
		p.compactionFailed(agentTrigger, req.Model, err)
		if !st.Committed && p.passThroughOnFailure(err) {
			p.w.Header().Del(agentCompactionHeader)
			p.forward(api.Splice{p.body}, p.t.Rewriter()) // the agent summarises as it would have
			return true
		}
		if f := compactionFailure(err); f != nil {
			writeFaultTo(p.w, p.a, st, f)
		}
		return true
	}
	p.compacted(agentTrigger, c)
	note := ""
	if cfg := s.cfg.Recall.withDefaults(); c.Payload != nil && c.Payload.Archive != nil && !cfg.Disabled {
		// The turns after this one offer the recall tool over the archive; the note says so, and
		// its signed reference is what they prove the archive is theirs with.
		a := c.Payload.Archive
		note = turn.AgentRecallText(cfg.ToolName, s.owners.Ref(s.tenantOf(p.r.Context()), a.Conversation, a.Owner))
	}
	ag.AgentAnswer(p.w, c.Compaction, note)
	return true
}

// explicit answers a compaction the client asked for explicitly, and reports whether it did.
func (p *pipe) explicit() bool {
	ex, ok := p.t.(turn.Explicit)
	if !ok {
		return false
	}
	trigger, req, f, ok := ex.Explicit(&p.env)
	if !ok {
		return false
	}
	s, st := p.s, p.t.Stream()
	if f != nil {
		writeFault(p.w, p.a, f)
		return true
	}
	if !holdOf(p.r).Compaction() {
		s.metrics.BudgetRefused()
		writeFault(p.w, p.a, budgetExceeded(s.budget))
		return true
	}
	keepAlive := ex.ExplicitKeepAlive()
	if keepAlive == nil {
		keepAlive = p.a.KeepAlive
	}
	c, err := p.compactHeld(p.r.Context(), req, keepAlive)
	if err != nil {
		p.compactionNotMade(trigger, req.Model, err)
		nothing := ex.Nothing()
		switch {
		case nothing != nil && (errors.Is(err, engine.ErrNothingToCompact) || errors.Is(err, summarizer.ErrNothingToSummarize)):
			f = nothing
		default:
			if f = compactionFailure(err); f == nil {
				f = &fault.Fault{Kind: fault.ClientClosed, Message: "client closed request"}
			}
		}
		writeFaultTo(p.w, p.a, st, f)
		return true
	}
	p.compacted(trigger, c)
	ex.Answer(p.w, c.Compaction)
	return true
}

// recallRun is a turn's recall: its loop state and its API's side.
type recallRun struct {
	rt *recallTurn
	d  turn.Recall
}

// recall returns the turn's recall, or nil when it does not apply: no archive, recall off, no
// archived conversation the turn may read (readSet), or the turn's API says no.
func (p *pipe) recall() *recallRun {
	rc, ok := p.t.(turn.Recaller)
	if !ok || p.s.cfg.Archive == nil {
		return nil
	}
	ctx := p.r.Context()
	conv, owners := p.s.readSet(ctx, p.t.Prev(), p.c)
	if p.t.Prev() == nil && p.c == nil {
		if ar, ok := p.t.(turn.ArchiveRef); ok {
			if c, o, ok := ar.ArchiveRef(&p.env); ok {
				conv, owners = c, owner.Set{p.s.ownerOf(ctx)}.With(o)
			}
		}
	}
	rt, ok := p.s.recall.config(conv, owners)
	if !ok {
		return nil
	}
	d := rc.Recall(&p.env, turn.RecallTool{Name: rt.cfg.ToolName, Description: rt.cfg.Description, Parameters: querySchema()})
	if d == nil {
		return nil
	}
	return &recallRun{rt: rt, d: d}
}

// forward sends body (its pieces in order) to the upstream and relays its answer, rewritten by
// rw. A nil rw is a pass-through: the answer goes back as the upstream sent it, its stream held
// to the event cap only, and the request's headers are the client's.
func (p *pipe) forward(body api.Splice, rw turn.Rewriter) {
	ctx := p.r.Context()
	_, edits := p.t.(turn.UpstreamHeaders)
	// As sent: the client's own bytes, its headers, and an answer passed on as it comes.
	p.forwardedAsSent = len(body) == 1 && sameBytes(body[0], p.body) &&
		(rw == nil || (!rw.Rewrites() && !edits && !p.t.Stream().Committed))
	if rw != nil {
		p.fl = flight{t: p.t, rw: rw}
		ctx = withFlight(ctx, &p.fl)
	}
	if p.early != nil {
		var f *flight
		if rw != nil {
			f = &p.fl
		}
		if p.forwardedAsSent && p.early.commit(f) {
			p.earlyCommitted = true
			p.out = p.early.first
			return
		}
		p.early.abort()
	}
	var out *http.Request
	if len(body) == 1 {
		out = withBody(p.r, ctx, body[0])
	} else {
		out = withSplice(p.r, ctx, body)
	}
	p.out, _ = out.Body.(interface{ done() bool })
	if st := stateFrom(ctx); st != nil {
		// This forward's body, never an earlier one's (an early forward's, withdrawn before its
		// round trip); one copy-buffer's worth or less is one write anyway.
		st.outBody, _ = out.Body.(interface {
			io.ReadCloser
			bulkBody
		})
		st.outLen, st.outSmall = out.ContentLength, nil
		if out.ContentLength <= copyBufferSize && len(body) == 1 && len(body[0]) > 0 && cap(body[0]) < poolMinBody {
			// Never a pooled buffer: net/http's transport reading it does not say when it is done.
			st.outSmall = body[0]
		}
	}
	var w http.ResponseWriter = p.w
	if rw != nil {
		if uh, ok := p.t.(turn.UpstreamHeaders); ok {
			out.Header = out.Header.Clone() // withBody shares the client's
			uh.UpstreamHeaders(out.Header)
		}
		if p.t.Stream().Committed {
			w = committedWriter{w}
		}
	}
	p.rp.ServeHTTP(w, out)
}

// The pipe is its turn's turn.Front: what the adapter asks of the front.

func (p *pipe) Open(param, ec, id, sig string) (*engine.Opened, *fault.Fault) {
	return p.s.openCompaction(p.r.Context(), p.a, param, ec, id, sig)
}
func (p *pipe) HandedOff() { p.s.metrics.HandoffApplied(apiName(p.a)) }
func (p *pipe) Foreign(n int, where string) bool {
	return p.s.foreign(p.w, p.a, n, where)
}
func (p *pipe) Conversation(key string, prev *engine.Opened) string {
	return conversationID(p.r, key, prev)
}
func (p *pipe) Label(key string, prev *engine.Opened) string {
	return conversationLabel(p.r, key, prev)
}

// Recalls: nothing a turn names can be read without an archive or with recall off.
func (p *pipe) Recalls() bool { return p.s.cfg.Archive != nil && !p.s.cfg.Recall.Disabled }
func (p *pipe) FindRef(text string) (string, string, bool) {
	if !p.Recalls() {
		return "", "", false
	}
	return p.s.owners.FindRef(p.s.tenantOf(p.r.Context()), text)
}

// flight is a forwarded turn the response hooks rewrite.
type flight struct {
	t  turn.Turn
	rw turn.Rewriter
}

type flightKey struct{}

func withFlight(ctx context.Context, f *flight) context.Context {
	return context.WithValue(ctx, flightKey{}, f)
}

func flightFrom(ctx context.Context) *flight {
	f, _ := ctx.Value(flightKey{}).(*flight)
	return f
}

// committedStream is the stream state of the turn of ctx once compactd committed its stream
// (nil otherwise): an upstream failure can then only be reported inside the stream.
func committedStream(ctx context.Context) *turn.Stream {
	if f := flightFrom(ctx); f != nil && f.t.Stream().Committed {
		return f.t.Stream()
	}
	return nil
}

// sameBytes reports whether a and b are the same bytes in memory (not merely equal ones).
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
