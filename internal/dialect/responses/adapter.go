// Package responses is the OpenAI Responses API's adapter (POST /v1/responses and
// /v1/responses/compact) behind compactd's one turn pipeline (internal/turn).
//
// A Responses client carries compactd's compaction back as an opaque item of type compaction
// whose encrypted_content compactd sealed; Parse opens the latest one and hands it off (the
// window it kept, a user message holding the handoff text, then what came after), and a turn
// that compacts puts its new item at output[0] of the upstream's answer, in JSON or in the SSE
// stream. The explicit routes (/v1/responses/compact, a turn ending in compaction_trigger) are
// answered by compactd itself; Codex's local compaction turn is upgraded (codex.go).
package responses

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/turn"
)

// SealKind binds a Responses compaction: it never opens as another API's.
const SealKind = "openai.compaction"

// Adapter is the Responses API. The zero value serves POST /v1/responses; with CompactEndpoint
// it serves POST /v1/responses/compact, which always compacts and never calls the model.
type Adapter struct {
	CompactEndpoint bool
}

var _ turn.Adapter = Adapter{}

func (Adapter) Name() dialect.Name { return dialect.Responses }

func (Adapter) Engine() engine.Dialect {
	return engine.Dialect{Name: dialect.Responses, SealKind: SealKind, Handoff: handoff.Text, Memo: true,
		UserMessage: api.UserMessage}
}

func (Adapter) Words() turn.Words {
	return turn.Words{Compaction: "item", Held: "items", UpstreamFlag: "--upstream"}
}

func (Adapter) Fault(f *fault.Fault) turn.Envelope { return api.OpenAIFault(f) }

// FaultEvent is OpenAI's two closing events, `error` and `response.failed`, numbered on from the
// stream's sequence numbers.
func (Adapter) FaultEvent(f *fault.Fault, st *turn.Stream) []byte {
	seq, id := 0, ""
	if st != nil {
		seq, id = st.Seq, st.ResponseID
	}
	return api.OpenAIFault(f).SSE(seq, id)
}

// KeepAlive is an SSE comment, which every parser of the API skips.
func (Adapter) KeepAlive(bool) []byte { return relay.KeepAlive }

func (Adapter) Terminal(data []byte) bool {
	switch relay.EventType(data) {
	case "response.completed", "response.failed", "response.incomplete", "error":
		return true
	}
	return false
}

// Parse skims a Responses body, applies the foreign-items policy, checks a compaction_trigger,
// opens the latest compaction item and hands it off, and validates context_management (unless
// the turn is an explicit or agent compaction compactd answers itself).
func (a Adapter) Parse(env *turn.Env, body []byte) (turn.Turn, *fault.Fault) {
	req, err := api.ParseResponsesFrom(body, env.ResumeFrom(body))
	if err != nil {
		return nil, api.BodyFault(err)
	}
	env.Skimmed(body, req)
	// Foreign compaction items (OpenAI's own, say) are dropped or refused before anything else
	// reads the input.
	if req, err = foreign(env, req); err != nil {
		var f *fault.Fault
		if errors.As(err, &f) {
			return nil, f
		}
		return nil, api.BodyFault(err)
	}
	t := &Turn{a: a, env: env, req: req, items: req.Items, stream: turn.Stream{Streamed: req.Stream}}
	if req.Trigger >= 0 {
		if req.Trigger != len(t.items)-1 {
			return nil, fault.InvalidParam(fmt.Sprintf("input[%d]", req.Trigger), fault.CodeInvalidValue,
				"A compaction_trigger item must be the last item of input.")
		}
		if gjson.GetBytes(t.items[req.Trigger].Raw, "id").Exists() {
			return nil, fault.InvalidParam(fmt.Sprintf("input[%d].id", req.Trigger), fault.CodeInvalidValue,
				"A compaction_trigger item must not carry an id.")
		}
		t.items = t.items[:req.Trigger]
	}
	if k := req.Compaction; k >= 0 && k < len(t.items) {
		o, f := openItem(env, t.items, k)
		if f != nil {
			return nil, f
		}
		t.prev, t.changed = o, true
		t.items = handoffAt(env, t.items[:k], t.items[k+1:], o)
	}
	if a.CompactEndpoint || req.Trigger >= 0 || t.codex(env) != nil || req.ContextManagement == nil {
		return t, nil
	}
	th, err := compact.ParseContextManagement(req.ContextManagement)
	if err != nil {
		return nil, paramFault(err, "context_management")
	}
	t.th = th
	return t, nil
}

// paramFault is the 400 for a validation error from package compact.
func paramFault(err error, fallbackParam string) *fault.Fault {
	var pe *compact.ParamError
	if errors.As(err, &pe) {
		return fault.InvalidParam(pe.Param, fault.CodeInvalidValue, pe.Message)
	}
	return fault.InvalidParam(fallbackParam, fault.CodeInvalidValue, err.Error())
}

// openItem opens the compaction item at input[k].
func openItem(env *turn.Env, items []api.Item, k int) (*engine.Opened, *fault.Fault) {
	param := fmt.Sprintf("input[%d].encrypted_content", k)
	raw := items[k].Raw
	ec := gjson.GetBytes(raw, "encrypted_content")
	if ec.Type != gjson.String || ec.Str == "" {
		return nil, &fault.Fault{Code: fault.CodeInvalidEncryptedContent, Param: param,
			Message: "The compaction item has no encrypted_content; send the item back exactly as compactd returned it."}
	}
	given := gjson.GetBytes(raw, "id")
	id := given.Str
	if given.Exists() && id == "" {
		id = "\x00" // an id that is there but empty never matches the sealed one
	}
	return env.Open(param, ec.Str, id, "")
}

// foreign applies the foreign-items policy. With no foreign item it returns req itself. Under
// drop it returns the request re-skimmed from a body whose input lacks them, so every later step
// works on what the upstream will see (the second skim is paid only by requests that hold one);
// under reject the 400 naming them.
func foreign(env *turn.Env, req *api.ResponsesRequest) (*api.ResponsesRequest, error) {
	idx := foreignIndexes(req.Items)
	if len(idx) == 0 {
		return req, nil
	}
	where := make([]string, len(idx))
	for i, k := range idx {
		where[i] = fmt.Sprintf("input[%d]", k)
	}
	if env.Foreign(len(idx), strings.Join(where, ",")) {
		return nil, fault.InvalidParam(where[0]+".encrypted_content", "foreign_compaction_item", fmt.Sprintf(
			"%s is a %s item compactd did not issue (its encrypted_content is not in compactd's cmp_… format; it was most likely issued by OpenAI before this conversation was routed through compactd), so compactd cannot open it. Remove it from input, or run compactd with --foreign-items drop (COMPACTD_FOREIGN_ITEMS=drop) to drop such items and continue without the history they replaced.",
			strings.Join(where, ", "), req.Items[idx[0]].Type))
	}
	kept := make([][]byte, 0, len(req.Items)-len(idx))
	next := 0
	for i, it := range req.Items {
		if next < len(idx) && idx[next] == i {
			next++
			continue
		}
		kept = append(kept, it.Raw)
	}
	return api.ParseResponsesRequest(req.WithInput(kept, false))
}

// foreignIndexes returns the indexes of the foreign compaction items of items: only compaction
// and compaction_summary items can be foreign; other items with an encrypted_content
// (reasoning) are the upstream's business.
func foreignIndexes(items []api.Item) []int {
	var idx []int
	for i, it := range items {
		if (it.Type == api.TypeCompaction || it.Type == api.TypeCompactionSummary) && api.IsForeign(gjson.GetBytes(it.Raw, "encrypted_content")) {
			idx = append(idx, i)
		}
	}
	return idx
}

// handoffAt is the context after the compaction o of the items before: the window compaction
// kept of them, the handoff message, the verbatim tail a speculative compaction kept (the last
// Payload.Tail of before), then after. A compaction item in the input and a compaction the memo
// remembers for a prefix (the transparent policy) render the same bytes.
func handoffAt(env *turn.Env, before, after []api.Item, o *engine.Opened) []api.Item {
	env.HandedOff()
	tail := min(o.Payload.Tail, len(before))
	head := before[:len(before)-tail]
	w := env.Engine.Partition(head, env.Retain)
	out := make([]api.Item, 0, len(w.Instructions)+len(w.Retained)+1+tail+len(after))
	out = env.Engine.KeepWindow(Adapter{}.Engine(), out, head, w, env.Retain)
	if o.Payload.Summary != "" || o.Payload.Ledger != "" {
		out = append(out, handoffItem(handoff.Text(o.Payload.Summary, o.Payload.Ledger)))
	}
	out = append(out, before[len(before)-tail:]...)
	return append(out, after...)
}

// handoffItem is the handoff: a user message holding the handoff text.
func handoffItem(text string) api.Item {
	return api.Item{Raw: api.UserMessage(text), Type: "message", Role: "user", Handoff: true}
}

// rawItems returns the items' JSON, without Codex-only metadata when strip is set.
func rawItems(items []api.Item, strip bool) [][]byte {
	out := make([][]byte, len(items))
	for i, it := range items {
		out[i] = it.Raw
		if strip && bytes.Contains(it.Raw, []byte(`"internal_chat_message_metadata_passthrough"`)) {
			out[i], _ = sjson.DeleteBytes(it.Raw, "internal_chat_message_metadata_passthrough")
		}
	}
	return out
}
