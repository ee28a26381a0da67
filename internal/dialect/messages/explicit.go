package messages

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn"
)

// The turns compactd answers with the compaction itself: on-demand compaction (`compaction:
// {type: summarize}`: the conversation is summarised into a signed block and nothing is
// sampled) and a threshold compaction with pause_after_compaction.

// onDemandTrigger is the on-demand compaction's trigger in logs and metrics.
const onDemandTrigger = "on_demand"

// Explicit: a request with an on-demand `compaction`. A conversation with nothing a summariser
// can read is refused before anything is compacted.
func (t *Turn) Explicit(env *turn.Env) (string, engine.Request, *fault.Fault, bool) {
	if !t.onDemand {
		return "", engine.Request{}, nil, false
	}
	if len(api.MessageItems(t.view)) == 0 {
		return onDemandTrigger, engine.Request{}, t.Nothing(), true
	}
	if ids := pendingToolUses(t.view); len(ids) > 0 {
		return onDemandTrigger, engine.Request{}, incompleteTurn(ids), true
	}
	total, _ := env.Counter.Request(t.req.System, api.CountItems(t.view), t.req.Tools, 0)
	r := t.compactIn(env, t.view, t.prev)
	r.Instructions, r.TokensBefore, r.Sign, r.Explicit = t.instructions, total, true, true
	return onDemandTrigger, r, nil, true
}

// Nothing is Anthropic's refusal of an on-demand compaction with nothing to summarise.
func (t *Turn) Nothing() *fault.Fault { return nothingToSummarize() }

func nothingToSummarize() *fault.Fault {
	return fault.InvalidParam("", fault.CodeCompactionNothing, "messages holds no user or assistant content to summarize.")
}

// pendingToolUses are the ids of the tool_use blocks of msgs' last turn when that turn is the
// assistant's (role:"system" messages after it skipped, consecutive assistant messages one
// turn): calls whose results the client has not sent yet.
func pendingToolUses(msgs []api.Message) []string {
	var ids []string
	for i := len(msgs) - 1; i >= 0 && msgs[i].Role != "user"; i-- {
		if msgs[i].Role != "assistant" {
			continue // a system message
		}
		for _, b := range msgs[i].Blocks {
			if b.Type == "tool_use" {
				ids = append(ids, gjson.GetBytes(b.Raw, "id").Str)
			}
		}
	}
	return ids
}

// incompleteTurn is Anthropic's refusal of an on-demand compaction that "ends on an assistant
// turn that is not finished" (@anthropic-ai/sdk 1.17.0 CompactionIncompleteTurnError): a
// summary of it would carry the tool calls but not their ids, and the tool_result blocks the
// client sends next would answer a tool_use the upstream no longer sees, which it refuses.
func incompleteTurn(ids []string) *fault.Fault {
	return fault.InvalidParam("messages", fault.CodeCompactionIncompleteTurn,
		"the conversation ends on an assistant turn that is not finished: tool_use "+strings.Join(ids, ", ")+
			" has no tool_result yet. Send the tool results first, then compact.")
}

// ExplicitKeepAlive: the adapter's ping.
func (t *Turn) ExplicitKeepAlive() func(first bool) []byte { return nil }

// Answer writes the on-demand compaction: its signed block alone.
func (t *Turn) Answer(w http.ResponseWriter, c *engine.Compaction) {
	t.writeCompactionMessage(w, c, nil, true)
}

// AnswerPause writes the threshold compaction a pause_after_compaction turn stops at, with the
// edits compactd applied.
func (t *Turn) AnswerPause(w http.ResponseWriter, c *engine.Compaction) {
	t.writeCompactionMessage(w, c, t.applied, false)
}

// writeCompactionMessage answers a turn that ends with the compaction (pause_after_compaction,
// or on-demand): a message whose only block is the compaction block, stop_reason "compaction",
// and usage whose only iteration is the compaction's (top-level counts are of sampling, which did
// not happen).
func (t *Turn) writeCompactionMessage(w http.ResponseWriter, c *engine.Compaction, applied []api.AppliedEdit, signed bool) {
	sig := ""
	if signed {
		sig = c.Signature
	}
	id := engine.NewID("msg_")
	usage := []byte(`{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"iterations":`)
	usage = append(append(usage, iterationsJSON(c.Usage, nil)...), '}')
	var cm []byte
	if len(applied) > 0 {
		cm = api.AppliedEditsJSON(applied)
	}
	head := func(content string, stop string) []byte {
		b := []byte(`{"id":`)
		b = api.AppendString(b, id)
		b = append(b, `,"type":"message","role":"assistant","model":`...)
		b = api.AppendString(b, t.req.Model)
		b = append(b, `,"content":`...)
		b = append(b, content...)
		b = append(b, `,"stop_reason":`...)
		b = append(b, stop...)
		return append(b, `,"stop_sequence":null`...)
	}
	if !t.req.Stream {
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
	turn.WriteEvents(w, t.stream.Committed, b)
}
