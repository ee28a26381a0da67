package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/sse"
)

// modifyMessagesResponse rewrites an Anthropic upstream response for a turn compactd changed:
// the compaction block goes to content[0] (JSON) or is streamed as block 0 with the upstream's
// blocks re-indexed (SSE); usage gains iterations; applied edits are reported; a count_tokens
// answer gains original_input_tokens. Pass-through responses (no msgTurn) are not touched but
// for the event cap on a stream (guardPassThrough), nor are upstream errors, unless compactd
// already committed a stream, when the upstream's error body becomes an SSE error event.
func (s *Server) modifyMessagesResponse(resp *http.Response) error {
	mt := msgTurnFrom(resp.Request)
	if mt != nil {
		// A broken upstream stream ends in an error event, not a cut; on a turn compactd
		// rewrites, so does an event that is not JSON.
		guardMessagesStream(resp, mt.rewrites())
	} else {
		guardPassThrough(resp, dialectAnthropic) // the event cap, nothing else
	}
	if mt == nil || !mt.rewrites() {
		return nil
	}
	if resp.StatusCode/100 != 2 {
		if mt.t.Committed {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			relay.ReplaceBody(resp, upstreamErrorEvent(resp.StatusCode, body))
		}
		return nil
	}
	compacted := mt.block != nil
	isSSE := relay.IsEventStream(resp.Header)
	switch {
	case isSSE && !mt.t.Streamed:
		resp.Body.Close()
		s.unrewritable(resp, dialectAnthropic, compacted, "is an event stream, but the request was not streamed")
		return nil
	case !isSSE && mt.t.Committed:
		resp.Body.Close()
		s.unrewritable(resp, dialectAnthropic, compacted, "is JSON, but the request was streamed")
		return nil
	case isSSE:
		if mt.block != nil || len(mt.applied) > 0 {
			resp.Body = newMsgSSERewriter(resp.Body, mt)
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
		if mt.countTokens {
			body = withOriginalInputTokens(body, mt.removed)
		} else {
			body, why = rewriteMessageJSON(body, mt)
		}
	}
	if why != "" {
		s.unrewritable(resp, dialectAnthropic, compacted, why)
		return nil
	}
	relay.ReplaceBody(resp, body)
	return nil
}

// upstreamErrorEvent carries an upstream error into a stream compactd already committed: the
// upstream's own error envelope when it sent one (Claude Code matches on its wording), else an
// api_error naming the status. The body is checked for validity and depth before it is walked.
func upstreamErrorEvent(status int, body []byte) []byte {
	var compacted bytes.Buffer
	if jsonx.Valid(body) == nil && gjson.GetBytes(body, "type").Str == "error" && json.Compact(&compacted, body) == nil {
		return sse.AppendEvent(nil, "error", compacted.Bytes())
	}
	e := &api.AnthropicError{Status: status, Type: "api_error", Message: "upstream answered HTTP " + strconv.Itoa(status)}
	return e.SSE()
}

func withOriginalInputTokens(body []byte, removed int) []byte {
	n := gjson.GetBytes(body, "input_tokens")
	if !n.Exists() {
		return body
	}
	orig := n.Int() + int64(removed)
	if o := gjson.GetBytes(body, "context_management.original_input_tokens"); o.Exists() {
		orig = o.Int() + int64(removed) // the upstream applied edits of its own too
	}
	out, err := sjson.SetBytes(body, "context_management.original_input_tokens", orig)
	if err != nil {
		return body
	}
	return out
}

// rewriteMessageJSON puts the compaction block first in content, adds usage.iterations and
// reports applied edits. body is valid JSON; why is set when it has no content array to take the
// block.
func rewriteMessageJSON(body []byte, mt *msgTurn) (_ []byte, why string) {
	if mt.block != nil {
		out, ok := api.PrependToArray(body, "content", mt.block)
		if !ok {
			return nil, "has no content array"
		}
		body = out
		u := gjson.GetBytes(body, "usage")
		iters := iterationsJSON(mt.compUsage, messageIteration(u, u, gjson.GetBytes(body, "model").Str))
		if out, err := sjson.SetRawBytes(body, "usage.iterations", iters); err == nil {
			body = out
		}
	}
	if len(mt.applied) > 0 {
		if out, err := sjson.SetRawBytes(body, "context_management", api.AppliedEditsJSON(mt.applied)); err == nil {
			body = out
		}
	}
	return body, ""
}

// compactionIteration renders the summariser's usage as a usage.iterations entry.
func compactionIteration(u summarizer.Usage) []byte {
	b := []byte(`{"type":"compaction","input_tokens":`)
	b = strconv.AppendInt(b, u.InputTokens, 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, u.OutputTokens, 10)
	b = append(b, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":`...)
	b = strconv.AppendInt(b, u.CachedTokens, 10)
	return append(b, `,"cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0}}`...)
}

// messageIteration renders the upstream's sampling as a usage.iterations entry: input and cache
// figures from start (message_start's usage, or the JSON usage), output from final.
func messageIteration(start, final gjson.Result, model string) []byte {
	in := start.Get("input_tokens").Int()
	if v := final.Get("input_tokens"); v.Exists() {
		in = v.Int()
	}
	b := []byte(`{"type":"message","input_tokens":`)
	b = strconv.AppendInt(b, in, 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, final.Get("output_tokens").Int(), 10)
	b = append(b, `,"cache_creation_input_tokens":`...)
	b = strconv.AppendInt(b, start.Get("cache_creation_input_tokens").Int(), 10)
	b = append(b, `,"cache_read_input_tokens":`...)
	b = strconv.AppendInt(b, start.Get("cache_read_input_tokens").Int(), 10)
	b = append(b, `,"model":`...)
	b = api.AppendString(b, model)
	return append(b, '}')
}

func iterationsJSON(u summarizer.Usage, message []byte) []byte {
	elems := [][]byte{compactionIteration(u)}
	if message != nil {
		elems = append(elems, message)
	}
	return api.JSONArray(elems)
}

// msgSSERewriter streams an upstream Messages SSE body through one event at a time: after
// message_start it inserts the compaction block as block 0 (content_block_start with null
// content, one compaction_delta, content_block_stop), shifts every later block index by one,
// and completes message_delta's usage with iterations and context_management with applied
// edits. Nothing is buffered beyond the event being rewritten; pings and unknown events pass
// untouched, and the block events, which carry the text, are spliced rather than copied.
type msgSSERewriter struct {
	mt *msgTurn

	startUsage gjson.Result
	model      string
	after      []byte // the compaction block's events, after message_start
	scratch    []byte // the lines before the current event's data, when it changed
	edits      []relay.Splice
}

func newMsgSSERewriter(body io.ReadCloser, mt *msgTurn) *relay.EventRewriter {
	r := &msgSSERewriter{mt: mt}
	return relay.NewEventRewriter(body, r.rewrite, func() []byte {
		return dialectAnthropic.FaultEvent(invalidUpstream(dialectAnthropic, mt.block != nil, "sent an event that is not valid JSON"), nil)
	})
}

// rewrite rewrites one event: it appends ev.Raw when nothing changes, else the pieces of its new
// rendering (valid until the next event).
func (r *msgSSERewriter) rewrite(out [][]byte, ev *sse.Event, data []byte) [][]byte {
	if len(data) == 0 {
		return append(out, ev.Raw)
	}
	v := relay.ParseAlias(data) // its strings are data's: cloned where they outlive the event
	switch v.Get("type").Str {
	case "message_start":
		r.startUsage = gjson.Parse(strings.Clone(v.Get("message.usage").Raw))
		r.model = strings.Clone(v.Get("message.model").Str)
		out = append(out, ev.Raw)
		if r.mt.block != nil {
			r.after = compactionBlockEvents(r.after[:0], r.mt.summary, r.mt.ecStr, "")
			out = append(out, r.after)
		}
		return out
	case "content_block_start", "content_block_delta", "content_block_stop":
		// These are most of a stream's events, and they carry its text: the index is spliced in.
		if idx := v.Get("index"); r.mt.block != nil {
			if e, ok := relay.NumberAt(idx, idx.Int()+1); ok {
				r.edits = append(r.edits[:0], e)
				return relay.SpliceEvent(out, &r.scratch, ev, data, r.edits)
			}
		}
	case "message_delta":
		// One small event (usage and the stop reason), edited as a whole.
		newData := data
		if r.mt.block != nil {
			iters := iterationsJSON(r.mt.compUsage, messageIteration(r.startUsage, v.Get("usage"), r.model))
			newData, _ = sjson.SetRawBytes(newData, "usage.iterations", iters)
		}
		if len(r.mt.applied) > 0 {
			newData, _ = sjson.SetRawBytes(newData, "context_management", api.AppliedEditsJSON(r.mt.applied))
		}
		if !bytes.Equal(newData, data) {
			changed := *ev
			changed.Data = newData
			r.scratch = sse.Append(r.scratch[:0], changed)
			return append(out, r.scratch)
		}
	}
	return append(out, ev.Raw)
}

// compactionBlockEvents renders the compaction block as block 0 of a stream: start with null
// content, one compaction_delta with the summary and encrypted_content, a signature_delta when
// signed, stop.
func compactionBlockEvents(dst []byte, summary, ec, sig string) []byte {
	dst = sse.AppendEvent(dst, "content_block_start",
		[]byte(`{"type":"content_block_start","index":0,"content_block":`+api.CompactionBlockStart+`}`))
	d := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":`)
	d = api.AppendString(d, summary)
	d = append(d, `,"encrypted_content":`...)
	d = api.AppendString(d, ec)
	dst = sse.AppendEvent(dst, "content_block_delta", append(d, "}}"...))
	if sig != "" {
		d = append(d[:0], `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":`...)
		d = api.AppendString(d, sig)
		dst = sse.AppendEvent(dst, "content_block_delta", append(d, "}}"...))
	}
	return sse.AppendEvent(dst, "content_block_stop", []byte(`{"type":"content_block_stop","index":0}`))
}

// writeCompactionMessage answers a turn that ends with the compaction (pause_after_compaction,
// or on-demand): a message whose only block is the compaction block, stop_reason "compaction",
// and usage whose only iteration is the compaction's (top-level counts are of sampling, which did
// not happen).
func (s *Server) writeCompactionMessage(w http.ResponseWriter, req *api.MessagesRequest, mt *msgTurn, c *compaction, signed bool) {
	sig := ""
	if signed {
		sig = c.Signature
	}
	id := newID("msg_")
	usage := []byte(`{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"iterations":`)
	usage = append(append(usage, iterationsJSON(c.Usage, nil)...), '}')
	var cm []byte
	if len(mt.applied) > 0 {
		cm = api.AppliedEditsJSON(mt.applied)
	}
	head := func(content string, stop string) []byte {
		b := []byte(`{"id":`)
		b = api.AppendString(b, id)
		b = append(b, `,"type":"message","role":"assistant","model":`...)
		b = api.AppendString(b, req.Model)
		b = append(b, `,"content":`...)
		b = append(b, content...)
		b = append(b, `,"stop_reason":`...)
		b = append(b, stop...)
		return append(b, `,"stop_sequence":null`...)
	}
	if !req.Stream {
		b := head("["+string(api.CompactionBlock(c.Summary, c.EncryptedContent, sig))+"]", `"compaction"`)
		b = append(append(b, `,"usage":`...), usage...)
		if cm != nil {
			b = append(append(b, `,"context_management":`...), cm...)
		}
		b = append(b, '}')
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
		return
	}
	start := head("[]", "null")
	start = append(start, `,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`...)
	b := sse.AppendEvent(nil, "message_start", append(append([]byte(`{"type":"message_start","message":`), start...), '}'))
	b = compactionBlockEvents(b, c.Summary, c.EncryptedContent, sig)
	delta := []byte(`{"type":"message_delta","delta":{"stop_reason":"compaction","stop_sequence":null},"usage":`)
	delta = append(delta, usage...)
	if cm != nil {
		delta = append(append(delta, `,"context_management":`...), cm...)
	}
	b = sse.AppendEvent(b, "message_delta", append(delta, '}'))
	b = sse.AppendEvent(b, "message_stop", []byte(`{"type":"message_stop"}`))
	writeEventStream(w, mt.t.Committed, b)
}
