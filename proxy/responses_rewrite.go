package proxy

import (
	"fmt"
	"io"
	"net/http"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/sse"
)

// modifyResponse rewrites an upstream response for a turn that compacted: the compaction item goes
// to output[0], in JSON or in the SSE stream. What compactd cannot rewrite — a body cut off,
// invalid or over the size limit, an event stream to a non-streaming request, a non-JSON event —
// becomes a 502 (or, on a stream already under way, the terminal error events) in OpenAI's
// dialect, never a 200 with broken JSON.
func (s *Server) modifyResponse(resp *http.Response) error {
	t := turnFrom(resp.Request.Context())
	if t != nil {
		// A broken upstream stream ends in an error event, not a cut; on a turn compactd
		// rewrites, so does an event that is not JSON.
		guardResponsesStream(resp, t.rewrite())
	}
	if t == nil || !t.rewrite() {
		return nil
	}
	isSSE := relay.IsEventStream(resp.Header)
	if resp.StatusCode/100 != 2 {
		if t.committed {
			// Headers are gone already: report the upstream's error inside the stream.
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			e := upstreamErrorFromBody(resp.StatusCode, body)
			relay.ReplaceBody(resp, e.SSE(t.seq, t.responseID))
		}
		return nil // passed through unchanged
	}
	if isSSE && !t.stream {
		resp.Body.Close()
		s.unrewritable(resp, dialectOpenAI, t.item != nil, "is an event stream, but the request was not streamed")
		return nil
	}
	if !isSSE && t.committed {
		// compactd already answered with a stream: a JSON body cannot follow its events.
		resp.Body.Close()
		s.unrewritable(resp, dialectOpenAI, t.item != nil, "is JSON, but the request was streamed")
		return nil
	}
	if t.item == nil {
		return nil
	}
	if isSSE {
		resp.Body = newSSERewriter(resp.Body, t)
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
		return nil
	}
	body, why, err := relay.ReadJSON(resp)
	if err != nil {
		return err // the client went away
	}
	if why == "" {
		var ok bool
		if body, ok = api.PrependToArray(body, "output", t.item); !ok {
			why = "has no output array"
		}
	}
	if why != "" {
		s.unrewritable(resp, dialectOpenAI, true, why)
		return nil
	}
	relay.ReplaceBody(resp, body)
	return nil
}

// unrewritable replaces an upstream response compactd cannot rewrite with a 502 in the route's
// dialect's envelope (OpenAI's or Anthropic's), or, when compactd already committed the stream,
// with the dialect's terminal error events.
func (s *Server) unrewritable(resp *http.Response, d dialect, compacted bool, why string) {
	s.log.Warn("upstream response not passed on: compactd cannot rewrite it", "api", d.String(), "reason", why, "status", resp.StatusCode)
	t := turnFrom(resp.Request.Context())
	e := invalidUpstream(d, compacted, why)
	var body []byte
	if t != nil && t.committed {
		body = d.errorEvent(e, t)
	} else {
		ae := d.renderError(e)
		body = ae.(interface{ Body() []byte }).Body()
		resp.StatusCode, resp.Status = http.StatusBadGateway, "502 Bad Gateway"
		resp.Header.Set("Content-Type", "application/json")
	}
	resp.Trailer = nil
	relay.ReplaceBody(resp, body)
}

// invalidUpstreamMessage tells the client what went wrong and that the retry is safe: when the
// turn compacted, the new item never reached the client, and everything it holds is still valid.
func invalidUpstreamMessage(compacted bool, why, held string) string {
	msg := "compactd could not pass on the upstream API's answer: the upstream's response " + why + "."
	if compacted {
		return msg + " The compaction itself succeeded and the " + held + " you hold are still valid, so retrying the turn is safe."
	}
	return msg + " Nothing you hold is affected; retry the request."
}

// invalidUpstream is the 502 for an upstream answer compactd cannot pass on.
func invalidUpstream(d dialect, compacted bool, why string) *fault.Fault {
	return &fault.Fault{Kind: fault.Upstream, Code: fault.CodeUpstreamInvalid, Message: invalidUpstreamMessage(compacted, why, d.held())}
}

// upstreamErrorFromBody keeps the upstream's own message and code when it sent an OpenAI envelope
// (checked for validity and depth before it is walked).
func upstreamErrorFromBody(status int, body []byte) *api.OpenAIError {
	e := &api.OpenAIError{Status: status, Type: "server_error", Message: fmt.Sprintf("upstream answered HTTP %d", status)}
	if jsonx.Valid(body) != nil {
		return e
	}
	if m := gjson.GetBytes(body, "error.message"); m.Exists() {
		e.Message = m.String()
		e.Type = gjson.GetBytes(body, "error.type").String()
		e.Code = gjson.GetBytes(body, "error.code").String()
	}
	return e
}

var doneMarker = []byte("[DONE]")

// dataPrefix starts a data line.
var dataPrefix = []byte("data:")

// sseRewriter streams an upstream Responses SSE body through, one event at a time: it injects the
// compaction item's output_item.added/done pair after response.created/in_progress, shifts every
// later output_index by one, keeps sequence numbers monotonic, and puts the item in the final
// response object's output. Nothing is buffered beyond the event being rewritten, and nothing of
// it is copied: an event it leaves alone goes on byte for byte, one it changes is spliced.
type sseRewriter struct {
	t *turnState

	injected bool
	shift    int    // added to output_index once the item is in
	seqDelta int    // added to sequence_number once the item is in
	pre      []byte // the injected events, before the event they precede
	scratch  []byte // the lines before the current event's data, when it changed
	edits    []relay.Splice
}

func newSSERewriter(body io.ReadCloser, t *turnState) *relay.EventRewriter {
	r := &sseRewriter{t: t}
	return relay.NewEventRewriter(body, r.rewriteEvent, func() []byte {
		return dialectOpenAI.errorEvent(invalidUpstream(dialectOpenAI, t.item != nil, "sent an event that is not valid JSON"), t)
	})
}

// rewriteEvent rewrites one event: it appends ev.Raw when nothing changes, else the pieces of
// its new rendering (valid until the next event).
func (r *sseRewriter) rewriteEvent(out [][]byte, ev *sse.Event, data []byte) [][]byte {
	if len(data) == 0 || data[0] != '{' {
		return append(out, ev.Raw) // a comment, keep-alive or [DONE]: pass through
	}
	typ := eventType(data)
	if !r.injected {
		switch typ {
		case "response.created", "response.in_progress", "error", "response.failed":
			// Before the first output event the item goes in; a failing stream gets no item, so
			// the client retries the whole turn.
			r.t.observeSeq(data, 0)
			return append(out, ev.Raw)
		}
		r.pre = r.injectEvents(data)
		out = append(out, r.pre)
	}
	edits := r.edits[:0]
	if r.seqDelta != 0 {
		if sq := relay.GetAlias(data, "sequence_number"); sq.Exists() {
			if e, ok := relay.NumberAt(sq, sq.Int()+int64(r.seqDelta)); ok {
				edits = append(edits, e)
			}
		}
	}
	if oi := relay.GetAlias(data, "output_index"); oi.Exists() {
		if e, ok := relay.NumberAt(oi, oi.Int()+int64(r.shift)); ok {
			edits = append(edits, e)
		}
	}
	switch typ {
	case "response.completed", "response.incomplete", "response.failed", "response.done":
		if e, ok := relay.PrependAt(relay.GetAlias(data, "response.output"), r.t.item); ok {
			edits = append(edits, e)
		}
	}
	r.edits = edits
	r.t.observeSeq(data, r.seqDelta)
	if len(edits) == 0 {
		return append(out, ev.Raw)
	}
	return relay.SpliceEvent(out, &r.scratch, ev, data, edits)
}

// injectEvents renders the compaction item's added/done pair, numbered from the sequence number
// of the event they precede, and arms the shifting of everything after.
func (r *sseRewriter) injectEvents(next []byte) []byte {
	r.injected = true
	seq := int(gjson.GetBytes(next, "sequence_number").Int())
	hasSeq := gjson.GetBytes(next, "sequence_number").Exists()
	if !hasSeq {
		seq = r.t.seq
	}
	r.shift, r.seqDelta = 1, 2
	return compactionItemEvents(nil, r.t.itemID, r.t.item, 0, seq)
}

// compactionItemEvents renders response.output_item.added (empty encrypted_content) and
// response.output_item.done (the full item) for a compaction item at outputIndex.
func compactionItemEvents(dst []byte, itemID string, item []byte, outputIndex, seq int) []byte {
	added := []byte(`{"type":"response.output_item.added","output_index":0,"item":null,"sequence_number":0}`)
	added, _ = sjson.SetBytes(added, "output_index", outputIndex)
	added, _ = sjson.SetRawBytes(added, "item", api.CompactionItem(itemID, ""))
	added, _ = sjson.SetBytes(added, "sequence_number", seq)
	done := []byte(`{"type":"response.output_item.done","output_index":0,"item":null,"sequence_number":0}`)
	done, _ = sjson.SetBytes(done, "output_index", outputIndex)
	done, _ = sjson.SetRawBytes(done, "item", item)
	done, _ = sjson.SetBytes(done, "sequence_number", seq+1)
	dst = sse.AppendEvent(dst, "response.output_item.added", added)
	return sse.AppendEvent(dst, "response.output_item.done", done)
}

// observeSeq remembers the next free sequence number (the event's, data's own plus delta, and
// one) and the response id, for errors compactd has to append to a stream.
func (t *turnState) observeSeq(data []byte, delta int) {
	if sq := gjson.GetBytes(data, "sequence_number"); sq.Exists() && int(sq.Int())+delta+1 > t.seq {
		t.seq = int(sq.Int()) + delta + 1
	}
	if t.responseID == "" {
		if id := gjson.GetBytes(data, "response.id"); id.Exists() {
			t.responseID = id.String()
		}
	}
}
