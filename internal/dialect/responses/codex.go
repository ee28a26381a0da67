package responses

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/turn"
)

// Codex. Codex 0.169 with a provider not named "OpenAI" compacts locally: a streamed
// /v1/responses turn with no tools whose last input item is a user message asking for a handoff
// summary ("CONTEXT CHECKPOINT COMPACTION"), its x-codex-turn-metadata saying request_kind
// "compaction" (internal/fixtures/codex-0.169/local_compaction_request.json). Codex takes the
// reply's output text as the summary and puts it, behind its own prefix, into the next turn.
// compactd answers that turn itself, with its own summariser, ledger and archive.

// codexPromptOpening opens Codex's summarisation prompt (codex-rs's compact prompt template, the
// same from 0.169 to 0.171).
const codexPromptOpening = "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM that will resume the task."

// codex returns the input Codex asks to summarise (every item but its prompt) when the turn is
// Codex's local compaction turn, else nil. Codex says so itself: x-codex-turn-metadata's
// request_kind is "compaction" (which no user text can set), and then a prompt that asks for a
// handoff summary is enough (a compact_prompt override in Codex's config rewords it). Without the
// metadata, only Codex's own prompt, from its first word, is: a turn that merely mentions a
// summary or a checkpoint reaches the model.
func (t *Turn) codex(env *turn.Env) []api.Item {
	h, req, items := env.Header, t.req, t.items
	ua := strings.ToLower(h.Get("User-Agent") + " " + h.Get("Originator"))
	if !strings.Contains(ua, "codex") || req.Trigger >= 0 || req.Compaction >= 0 || len(items) < 2 || t.a.CompactEndpoint {
		return nil
	}
	if tl := gjson.ParseBytes(req.Tools); len(req.Tools) > 0 && tl.Type != gjson.Null && len(tl.Array()) > 0 {
		return nil
	}
	last := items[len(items)-1]
	if last.Type != "message" || last.Role != "user" {
		return nil
	}
	text := api.MessageText(last.Raw)
	switch gjson.Get(h.Get("X-Codex-Turn-Metadata"), "request_kind").Str {
	case "compaction":
		lower := strings.ToLower(text)
		if !strings.Contains(lower, "summar") || !strings.Contains(lower, "handoff") && !strings.Contains(lower, "checkpoint") {
			return nil
		}
	case "":
		if !strings.HasPrefix(text, codexPromptOpening) {
			return nil
		}
	default:
		return nil
	}
	return items[: len(items)-1 : len(items)-1]
}

// Agent: Codex's local compaction turn. Codex keeps its own recent user messages, so the
// summary covers everything (no retain budget), and it compacts whatever the saving.
func (t *Turn) Agent(env *turn.Env) (string, engine.Request, bool) {
	in := t.codex(env)
	if in == nil {
		return "", engine.Request{}, false
	}
	total, _ := env.Counter.Request(t.req.Instructions, in, t.req.Tools, 0)
	return "codex", engine.Request{Model: t.req.Model, Items: in, TokensBefore: total,
		Conversation: env.Conversation(t.req.PromptCacheKey, nil), Explicit: true,
		Finish: func(c *engine.Compaction) (int, int) {
			out := append(make([]api.Item, 0, len(c.Kept)+1), c.Kept...)
			if c.Handoff != "" {
				out = append(out, handoffItem(c.Handoff))
			}
			out = append(out, in[len(c.Compacted):]...)
			return env.Engine.CountItems(out), len(c.Compacted) - len(c.Window.Instructions) - len(c.Window.Retained)
		}}, true
}

// AgentAnswer answers Codex with one assistant message holding the summary and the ledger.
func (t *Turn) AgentAnswer(w http.ResponseWriter, c *engine.Compaction, _ string) {
	text := strings.TrimSpace(c.Summary)
	if l := strings.TrimSpace(c.Ledger); l != "" {
		text += "\n\n" + l
	}
	u := c.Usage
	respID, msgID := engine.NewID("resp_"), engine.NewID("msg_")
	model := string(api.AppendString(nil, t.req.Model))
	usage := `{"input_tokens":` + strconv.FormatInt(u.InputTokens, 10) + `,"input_tokens_details":{"cached_tokens":0},"output_tokens":` +
		strconv.FormatInt(u.OutputTokens, 10) + `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":` +
		strconv.FormatInt(u.InputTokens+u.OutputTokens, 10) + `}`
	quoted := string(api.AppendString(nil, text))
	item := `{"id":"` + msgID + `","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":` + quoted + `,"annotations":[]}]}`
	resp := func(status, output, usage string) string {
		return `{"id":"` + respID + `","object":"response","status":"` + status + `","model":` + model + `,"output":[` + output + `],"usage":` + usage + `}`
	}
	if !t.req.Stream {
		b := []byte(resp("completed", item, usage))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
		return
	}
	seq := 0
	var b []byte
	ev := func(name, body string) {
		b = api.AppendSSE(b, name, []byte(`{"type":"`+name+`","sequence_number":`+strconv.Itoa(seq)+`,`+body+`}`))
		seq++
	}
	ev("response.created", `"response":`+resp("in_progress", "", "null"))
	ev("response.output_item.added", `"output_index":0,"item":{"id":"`+msgID+`","type":"message","role":"assistant","status":"in_progress","content":[]}`)
	ev("response.output_text.delta", `"item_id":"`+msgID+`","output_index":0,"content_index":0,"delta":`+quoted)
	ev("response.output_item.done", `"output_index":0,"item":`+item)
	ev("response.completed", `"response":`+resp("completed", item, usage))
	turn.WriteEvents(w, t.stream.Committed, b)
}
