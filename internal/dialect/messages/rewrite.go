package messages

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn"
)

// The Messages rewriter, for a turn compactd changed: the compaction block goes to content[0]
// (JSON) or is streamed as block 0 with the upstream's blocks re-indexed (SSE); usage gains
// iterations; applied edits are reported; a count_tokens answer gains original_input_tokens.
// Upstream errors pass untouched, unless compactd already committed a stream, when the upstream's
// error body becomes an SSE error event.

// Rewrites: a turn that compacted, applied edits, counts tokens, or whose stream compactd
// committed (the upstream's status can then only be reported inside the stream).
func (t *Turn) Rewrites() bool {
	return t.block != nil || len(t.applied) > 0 || t.a.CountTokens || t.stream.Committed
}

func (t *Turn) Carries() bool { return t.block != nil }

// JSON completes a count_tokens answer with original_input_tokens, a message with the block,
// its usage and the applied edits.
func (t *Turn) JSON(body []byte) ([]byte, string) {
	if t.a.CountTokens {
		return withOriginalInputTokens(body, t.removed), ""
	}
	return rewriteMessageJSON(body, t)
}

// Events rewrites a stream when the turn carries a block or applied edits; otherwise the stream
// passes (still guarded by the front).
func (t *Turn) Events(body io.ReadCloser) io.ReadCloser {
	if t.block == nil && len(t.applied) == 0 {
		return nil
	}
	r := &sseRewriter{t: t}
	return relay.NewEventRewriter(body, r.rewrite, func() []byte {
		return t.a.FaultEvent(turn.UpstreamInvalid(t.a.Words(), t.block != nil, "sent an event that is not valid JSON"), &t.stream)
	})
}

// UpstreamError carries an upstream error into a committed stream (upstreamErrorEvent).
func (t *Turn) UpstreamError(status int, body []byte) []byte { return upstreamErrorEvent(status, body) }

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
func rewriteMessageJSON(body []byte, t *Turn) (_ []byte, why string) {
	if t.block != nil {
		out, ok := api.PrependToArray(body, "content", t.block)
		if !ok {
			return nil, "has no content array"
		}
		body = out
		u := gjson.GetBytes(body, "usage")
		iters := iterationsJSON(t.compUsage, messageIteration(u, u, gjson.GetBytes(body, "model").Str))
		if out, err := sjson.SetRawBytes(body, "usage.iterations", iters); err == nil {
			body = out
		}
	}
	if len(t.applied) > 0 {
		if out, err := sjson.SetRawBytes(body, "context_management", api.AppliedEditsJSON(t.applied)); err == nil {
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

// sseRewriter streams an upstream Messages SSE body through one event at a time: after
// message_start it inserts the compaction block as block 0 (content_block_start with null
// content, one compaction_delta, content_block_stop), shifts every later block index by one,
// and completes message_delta's usage with iterations and context_management with applied
// edits. Nothing is buffered beyond the event being rewritten; pings and unknown events pass
// untouched, and the block events, which carry the text, are spliced rather than copied.
type sseRewriter struct {
	t *Turn

	startUsage gjson.Result
	model      string
	after      []byte // the compaction block's events, after message_start
	scratch    []byte // the lines before the current event's data, when it changed
	edits      []relay.Splice
}

// rewrite rewrites one event: it appends ev.Raw when nothing changes, else the pieces of its new
// rendering (valid until the next event).
func (r *sseRewriter) rewrite(out [][]byte, ev *sse.Event, data []byte) [][]byte {
	if len(data) == 0 {
		return append(out, ev.Raw)
	}
	v := relay.ParseAlias(data) // its strings are data's: cloned where they outlive the event
	switch v.Get("type").Str {
	case "message_start":
		r.startUsage = gjson.Parse(strings.Clone(v.Get("message.usage").Raw))
		r.model = strings.Clone(v.Get("message.model").Str)
		out = append(out, ev.Raw)
		if r.t.block != nil {
			r.after = compactionBlockEvents(r.after[:0], r.t.summary, r.t.ecStr, "")
			out = append(out, r.after)
		}
		return out
	case "content_block_start", "content_block_delta", "content_block_stop":
		// These are most of a stream's events, and they carry its text: the index is spliced in.
		if idx := v.Get("index"); r.t.block != nil {
			if e, ok := relay.NumberAt(idx, idx.Int()+1); ok {
				r.edits = append(r.edits[:0], e)
				return relay.SpliceEvent(out, &r.scratch, ev, data, r.edits)
			}
		}
	case "message_delta":
		// One small event (usage and the stop reason), edited as a whole.
		newData := data
		if r.t.block != nil {
			iters := iterationsJSON(r.t.compUsage, messageIteration(r.startUsage, v.Get("usage"), r.model))
			newData, _ = sjson.SetRawBytes(newData, "usage.iterations", iters)
		}
		if len(r.t.applied) > 0 {
			newData, _ = sjson.SetRawBytes(newData, "context_management", api.AppliedEditsJSON(r.t.applied))
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
