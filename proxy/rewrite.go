package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/turn"
)

// The answer's way back. A turn forwarded with a Rewriter (pipe.forward) has its answer guarded
// and rewritten here, the same for every API: the adapter's Rewriter edits what it is handed;
// what it cannot be handed becomes a 502 (or, on a stream compactd already committed, the API's
// terminal error event), never a 200 with broken JSON.

// newTurnProxy is the ReverseProxy of a's route: the upstream call of every turn it forwards.
func (s *Server) newTurnProxy(target *url.URL, a turn.Dialect) *httputil.ReverseProxy {
	terminal := a.Terminal // one method value per route, not one per stream
	log := s.log
	return s.newReverseProxy(target, a, func(resp *http.Response) error { return rewriteAnswer(log, resp, a, terminal) })
}

// rewriteAnswer is the ModifyResponse of a turn's upstream call.
func rewriteAnswer(log *slog.Logger, resp *http.Response, a turn.Dialect, terminal func([]byte) bool) error {
	if e := earlyOf(resp.Request.Context()); e != nil {
		// An early forward's answer is handled as the turn decides: with its flight once
		// committed; an aborted one's goes nowhere.
		if <-e.decided; e.wasAborted() {
			return errEarlyAborted
		}
	}
	f := flightFrom(resp.Request.Context())
	if f == nil {
		guardPassThrough(resp, a) // the event cap, nothing else
		return nil
	}
	rw, st := f.rw, f.t.Stream()
	// A broken upstream stream ends in an error event, not a cut; on a turn compactd rewrites,
	// so does an event that is not JSON.
	validate := rw.Rewrites()
	if sv, ok := rw.(turn.StreamValidation); ok {
		validate = validate && sv.ValidatesEvents()
	}
	guardTurn(resp, a, f, terminal, validate)
	if !rw.Rewrites() {
		return nil
	}
	if resp.StatusCode/100 != 2 {
		if st.Committed {
			// The headers are gone already: report the upstream's error inside the stream.
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			relay.ReplaceBody(resp, rw.UpstreamError(resp.StatusCode, body))
		}
		return nil // passed through unchanged
	}
	isSSE := relay.IsEventStream(resp.Header)
	switch {
	case isSSE && !st.Streamed:
		resp.Body.Close()
		refuseAnswer(log, resp, a, f, "is an event stream, but the request was not streamed")
		return nil
	case !isSSE && st.Committed:
		// compactd already answered with a stream: a JSON body cannot follow its events.
		resp.Body.Close()
		refuseAnswer(log, resp, a, f, "is JSON, but the request was streamed")
		return nil
	case isSSE:
		if body := rw.Events(resp.Body); body != nil {
			resp.Body = body
			resp.Header.Del("Content-Length")
			resp.ContentLength = -1
		}
		return nil
	}
	body, why, err := relay.ReadJSON(resp)
	if err != nil {
		return err // the client went away
	}
	if why == "" {
		body, why = rw.JSON(body)
	}
	if why != "" {
		refuseAnswer(log, resp, a, f, why)
		return nil
	}
	relay.ReplaceBody(resp, body)
	return nil
}

// guardTurn guards a turn's successful stream: it ends normally at a's terminal event; broken
// off, or (validate) sending an event that is not JSON, it ends with a's error event instead,
// numbered on from the upstream's sequence numbers.
func guardTurn(resp *http.Response, a turn.Dialect, f *flight, terminal func([]byte) bool, validate bool) {
	if !relay.Guardable(resp) {
		return // not a stream: no guard, and no closure allocated for one
	}
	relay.Guard(resp, relay.GuardOptions{Terminal: terminal, Validate: validate, Fail: func(seq int, why string) []byte {
		e := turn.UpstreamInterrupted()
		if why != "" {
			e = turn.UpstreamInvalid(a.Words(), f.rw.Carries(), why)
		}
		st := *f.t.Stream()
		st.Seq = seq
		return a.FaultEvent(e, &st)
	}})
}

// refuseAnswer replaces an upstream answer compactd cannot rewrite with a 502 in a's envelope,
// or, when compactd already committed the stream, with a's terminal error events.
func refuseAnswer(log *slog.Logger, resp *http.Response, a turn.Dialect, f *flight, why string) {
	log.Warn("upstream response not passed on: compactd cannot rewrite it", "api", apiName(a), "reason", why, "status", resp.StatusCode)
	e := turn.UpstreamInvalid(a.Words(), f.rw.Carries(), why)
	var body []byte
	if st := f.t.Stream(); st.Committed {
		body = a.FaultEvent(e, st)
	} else {
		body = a.Fault(e).Body()
		resp.StatusCode, resp.Status = http.StatusBadGateway, "502 Bad Gateway"
		resp.Header.Set("Content-Type", "application/json")
	}
	resp.Trailer = nil
	relay.ReplaceBody(resp, body)
}
