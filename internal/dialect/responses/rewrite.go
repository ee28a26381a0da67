package responses

import (
	"fmt"
	"io"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn"
)

// The Responses rewriter: a turn that compacted gets its compaction item at output[0] of the
// upstream's answer, in JSON or in the stream.

// Rewrites: every turn that compacted, or whose stream compactd committed (the upstream's
// status can then only be reported inside the stream).
func (t *Turn) Rewrites() bool { return t.item != nil || t.stream.Committed }
func (t *Turn) Carries() bool  { return t.item != nil }

// JSON puts the item first in output.
func (t *Turn) JSON(body []byte) ([]byte, string) {
	if t.item == nil {
		return body, ""
	}
	out, ok := api.PrependToArray(body, "output", t.item)
	if !ok {
		return nil, "has no output array"
	}
	return out, ""
}

// UpstreamError carries an upstream error into a committed stream: OpenAI's closing events with
// the upstream's own message and code when it sent an OpenAI envelope.
func (t *Turn) UpstreamError(status int, body []byte) []byte {
	return UpstreamError(status, body).SSE(t.stream.Seq, t.stream.ResponseID)
}

// UpstreamError keeps the upstream's own message and code when it sent an OpenAI envelope
// (checked for validity and depth before it is walked).
func UpstreamError(status int, body []byte) *api.OpenAIError {
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

// Stream rewrites a stream when the turn carries an item; otherwise the stream passes (still
// guarded by the front).
func (t *Turn) Events(body io.ReadCloser) io.ReadCloser {
	if t.item == nil {
		return nil
	}
	r := &sseRewriter{t: t}
	return relay.NewEventRewriter(body, r.rewriteEvent, func() []byte {
		return t.a.FaultEvent(turn.UpstreamInvalid(t.a.Words(), true, "sent an event that is not valid JSON"), &t.stream)
	})
}

// sseRewriter streams an upstream SSE body through, one event at a time: it injects the
// compaction item's output_item.added/done pair after response.created/in_progress, shifts every
// later output_index by one, keeps sequence numbers monotonic, and puts the item in the final
// response object's output. Nothing is buffered beyond the event being rewritten, and nothing of
// it is copied: an event it leaves alone goes on byte for byte, one it changes is spliced.
type sseRewriter struct {
	t *Turn

	injected bool
	shift    int    // added to output_index once the item is in
	seqDelta int    // added to sequence_number once the item is in
	pre      []byte // the injected events, before the event they precede
	scratch  []byte // the lines before the current event's data, when it changed
	edits    []relay.Splice
}

// rewriteEvent rewrites one event: it appends ev.Raw when nothing changes, else the pieces of
// its new rendering (valid until the next event).
func (r *sseRewriter) rewriteEvent(out [][]byte, ev *sse.Event, data []byte) [][]byte {
	if len(data) == 0 || data[0] != '{' {
		return append(out, ev.Raw) // a comment, keep-alive or [DONE]: pass through
	}
	typ := relay.EventType(data)
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
	sq := gjson.GetBytes(next, "sequence_number")
	seq := int(sq.Int())
	if !sq.Exists() {
		seq = r.t.stream.Seq
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
func (t *Turn) observeSeq(data []byte, delta int) {
	if sq := gjson.GetBytes(data, "sequence_number"); sq.Exists() && int(sq.Int())+delta+1 > t.stream.Seq {
		t.stream.Seq = int(sq.Int()) + delta + 1
	}
	if t.stream.ResponseID == "" {
		if id := gjson.GetBytes(data, "response.id"); id.Exists() {
			t.stream.ResponseID = id.String()
		}
	}
}
