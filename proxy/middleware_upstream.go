package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/compactd/compactd/internal/compact/summarizer"
	dialectname "github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/h1"
	"github.com/compactd/compactd/internal/metrics"
	"github.com/compactd/compactd/internal/relay"
)

// instrumentedTransport wraps Config.Transport: it times every upstream round trip (to response
// headers, then every body read), adds that waiting time to the request's state, counts the
// round trip by status class, and for model turns records the GenAI "chat" operation with the
// token usage the upstream reported.
type instrumentedTransport struct {
	next http.RoundTripper
	m    *metrics.Metrics
}

func (t *instrumentedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	st := stateFrom(req.Context())
	upstream := "openai"
	if st != nil {
		upstream = st.upstream
	}
	if st != nil && st.outBody != nil && req.Body != nil && req.ContentLength == st.outLen {
		// The forward's own body (pipe.forward), in place of the ReverseProxy's wrapper of it,
		// once. The wrapper exists to fail reads after the handler returned; these bytes are in
		// memory, and their buffer is reused only once the transport has read them to the end
		// (pipe.out).
		r2 := *req
		r2.Body = st.outBody
		small := st.outSmall
		st.outBody, st.outSmall = nil, nil
		if h, ok := t.next.(*h1.Transport); ok && h.Direct(&r2) {
			req = &r2 // compactd's own client: the head and a small body in one write, a large body in one more
		} else if req.ContentLength > copyBufferSize {
			req = &r2 // net/http's Transport: written whole by bulkConn, not through its copy buffer
		} else if small != nil {
			// A small body: the head and the body in one write (net/http flushes the head by
			// itself first for a body it does not know to be in memory). The bytes are the
			// forward's own, in a buffer the pool never gets back (pipe.forward), so they outlive
			// any late read.
			r2.Body = io.NopCloser(bytes.NewReader(small))
			req = &r2
		}
	}
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	if e := earlyOf(req.Context()); e != nil && e.wasAborted() {
		// A withdrawn early forward (early.go) is neither the upstream's answer nor its failure.
		if err == nil {
			resp.Body.Close()
		}
		return nil, errEarlyAborted
	}
	d := time.Since(start)
	st.addUpstream(d)
	switch {
	case err == nil:
		t.m.UpstreamRoundTrip(upstream, resp.StatusCode, d.Seconds())
	case req.Context().Err() != nil:
		// The client went away: not the upstream's failure.
		t.m.UpstreamCanceled(upstream, d.Seconds())
	default:
		t.m.UpstreamRoundTrip(upstream, 0, d.Seconds())
	}
	if err != nil {
		return nil, err
	}
	var ub *upstreamBody
	if st != nil && st.upstreamBodyUsed.CompareAndSwap(false, true) {
		ub = &st.upstreamBody // the request's first round trip (most have one): no allocation
	} else {
		ub = &upstreamBody{}
	}
	ub.rc, ub.st, ub.m, ub.start, ub.provider = resp.Body, st, t.m, start, upstream
	if t.m != nil && isModelTurn(req) {
		ub.turn = true
		ub.model = st.model()
		if resp.StatusCode/100 == 2 {
			ub.usage.SSE = relay.IsEventStream(resp.Header)
			ub.scan = true
		}
	}
	resp.Body = ub
	return resp, nil
}

// CloseIdleConnections passes through, so http.Client.CloseIdleConnections still works.
func (t *instrumentedTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// isModelTurn reports whether req asks the upstream model for a turn (a GenAI "chat" operation).
func isModelTurn(req *http.Request) bool {
	if req.Method != http.MethodPost {
		return false
	}
	p := req.URL.Path
	return strings.HasSuffix(p, "/responses") || strings.HasSuffix(p, "/messages") || strings.HasSuffix(p, "/chat/completions")
}

// upstreamBody times reads of an upstream response body (compactd waiting on the upstream) and,
// for model turns, finds the usage in it (metrics.Usage) for the GenAI "chat" operation.
type upstreamBody struct {
	rc       io.ReadCloser
	st       *reqState
	m        *metrics.Metrics
	start    time.Time
	provider string
	model    string

	usage      metrics.Usage
	once       sync.Once
	turn, scan bool // a model turn; its usage is looked for (a 2xx answer)
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	t := time.Now()
	n, err := b.rc.Read(p)
	b.st.addUpstream(time.Since(t))
	if b.scan && n > 0 {
		b.usage.Feed(p[:n])
	}
	if err != nil {
		b.finish(err == io.EOF)
	}
	return n, err
}

func (b *upstreamBody) Close() error {
	err := b.rc.Close()
	b.finish(false)
	return err
}

// finish records the GenAI chat operation once: at the end of the body or when the proxy closes
// it (client gone, rewrite finished).
func (b *upstreamBody) finish(eof bool) {
	b.once.Do(func() {
		if !b.turn {
			return
		}
		in, out := b.usage.Finish(eof)
		b.m.GenAI("chat", b.provider, b.model, time.Since(b.start).Seconds(), in, out)
	})
}

// instrumentedSummarizer times each summarisation, adds the time to the request's state and
// records latency, tokens, outcome and the GenAI "compaction" operation. Decorating the interface
// keeps the engine free of metrics code.
type instrumentedSummarizer struct {
	next summarizer.Summarizer
	m    *metrics.Metrics
	// provider is the GenAI provider label of the summariser's wire API: "anthropic" for the
	// Messages API, "openai" for the others (and a Summarizer that does not say).
	provider string
	live     *liveStats // the console's latency chart (stats.go)
}

func newInstrumentedSummarizer(next summarizer.Summarizer, m *metrics.Metrics, live *liveStats) instrumentedSummarizer {
	provider := "openai"
	if summarizer.APIOf(next) == dialectname.Messages {
		provider = "anthropic"
	}
	return instrumentedSummarizer{next: next, m: m, provider: provider, live: live}
}

func (s instrumentedSummarizer) Summarize(ctx context.Context, req summarizer.Request) (summarizer.Result, error) {
	start := time.Now()
	res, err := s.next.Summarize(ctx, req)
	d := time.Since(start)
	stateFrom(ctx).addSummariser(d)
	outcome := "ok"
	switch {
	case err == nil:
	case errors.Is(err, summarizer.ErrNothingToSummarize):
		outcome = "nothing"
	case errors.Is(err, context.Canceled) || ctx.Err() != nil && !errors.Is(err, summarizer.ErrUnavailable):
		outcome = "canceled"
	default:
		outcome = "failed"
	}
	s.m.Summarised(outcome, d.Seconds(), res.Usage.InputTokens, res.Usage.OutputTokens, res.Calls)
	if outcome == "ok" || outcome == "failed" {
		s.live.summarised(d, outcome == "failed")
		model := res.Model
		if model == "" {
			model = req.Model
		}
		s.m.GenAI("compaction", s.provider, model, d.Seconds(), res.Usage.InputTokens, res.Usage.OutputTokens)
	}
	return res, err
}
