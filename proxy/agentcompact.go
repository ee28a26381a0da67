package proxy

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/sse"
)

// Upgrading an agent's own compaction. Claude Code compacts by asking the model for a summary in
// an ordinary streamed /v1/messages turn: the conversation so far, then a last user message with
// its summarisation prompt (an <analysis> block, then a <summary> block). Through compactd that
// turn is answered by compactd itself, through the same core as every other compaction
// (compactCore: compactd's summariser and failure policy, the facts ledger, the gap check, the
// archive), and rendered in exactly the shape Claude Code parses: one text block
// "<analysis>…</analysis>\n\n<summary>…</summary>", the ledger inside the summary block so it
// survives Claude Code's own handling of the reply. The agent gets a better summary and the raw
// conversation lands in the archive under its session id.
//
// Recognition is by structure and markers, never one exact sentence, so a reworded prompt in a
// later release is still recognised, and anything compactd is not sure about goes on exactly as
// it would without this file.

// agentTrigger is the compaction trigger of upgraded agent compactions in logs and metrics.
const agentTrigger = "agent"

// agentCompactionHeader tells a client (and a test) that compactd answered the request itself.
const agentCompactionHeader = "X-Compactd-Agent-Compaction"

// claudeCodeCompaction reports whether req is Claude Code's compaction turn, and returns the
// conversation to summarise: every message but the prompt (a tool_result sent beside the prompt
// in the last message is kept; it is conversation).
//
// Required: a corroborating client identity (the x-claude-code-session-id header, or a claude-cli
// user agent); no compaction blocks or on-demand compaction (compactd's own paths handle those);
// no forced tool; a last user message of only text and tool_result blocks whose text asks for a
// summary of the conversation and names both the <analysis> and <summary> tags. Claude Code's
// partial compaction ("summarise the RECENT portion", earlier messages kept intact) is not
// upgraded: compactd would summarise what Claude Code keeps.
func claudeCodeCompaction(h http.Header, req *api.MessagesRequest) ([]api.Message, bool) {
	if h.Get("X-Claude-Code-Session-Id") == "" && !strings.Contains(strings.ToLower(h.Get("User-Agent")), "claude-cli") {
		return nil, false
	}
	if len(req.Blocks) > 0 || req.Compaction != nil || len(req.Messages) < 2 {
		return nil, false
	}
	switch gjson.GetBytes(req.Body, "tool_choice.type").Str {
	case "tool", "any":
		return nil, false
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role != "user" {
		return nil, false
	}
	var text strings.Builder
	var kept []api.Block
	for _, b := range last.Blocks {
		switch b.Type {
		case api.BlockText:
			text.WriteString(gjson.GetBytes(b.Raw, "text").Str)
			text.WriteByte('\n')
		case "tool_result":
			kept = append(kept, b)
		default:
			return nil, false
		}
	}
	if !isSummaryPrompt(text.String()) {
		return nil, false
	}
	msgs := req.Messages[: len(req.Messages)-1 : len(req.Messages)-1]
	if len(kept) > 0 {
		msgs = append(msgs, last.WithBlocks(kept))
	}
	return msgs, true
}

// isSummaryPrompt reports whether text is a summarisation prompt of the shape Claude Code sends:
// it asks for a summary of the conversation and instructs both an <analysis> and a <summary>
// tag. Case-insensitive markers, not a sentence.
func isSummaryPrompt(text string) bool {
	t := strings.ToLower(text)
	if !strings.Contains(t, "<analysis>") || !strings.Contains(t, "<summary>") {
		return false
	}
	if !strings.Contains(t, "summar") || !strings.Contains(t, "conversation") {
		return false
	}
	// Partial compaction: only the recent messages are to be summarised.
	return !strings.Contains(t, "recent portion")
}

// agentCompaction answers req itself when it is an agent's compaction turn, and reports whether
// it did (or otherwise answered the client, e.g. with an error). false: the caller goes on as if
// this did not exist.
func (s *Server) agentCompaction(w http.ResponseWriter, r *http.Request, req *api.MessagesRequest) bool {
	if s.cfg.NoAgentCompaction {
		return false
	}
	msgs, ok := claudeCodeCompaction(r.Header, req)
	if !ok || len(api.MessageItems(msgs)) == 0 {
		return false
	}
	mt := &msgTurn{t: &turn{stream: req.Stream}}
	w.Header().Set(agentCompactionHeader, "claude-code")
	var ka *keepAlive
	if req.Stream {
		ka = startKeepAlive(w, s.cfg.KeepAlive, dialectAnthropic.keepAlive)
	}
	total, _ := s.cfg.Counter.Request(req.System, api.CountItems(msgs), req.Tools, 0)
	in := s.messagesCompactIn(r, req, msgs, nil)
	in.Conversation, in.TokensBefore = conversationID(r, "", nil), total // the agent's session id, as a label
	c, err := s.compactCore(withAgentSummariser(r.Context()), in)
	mt.t.committed = ka != nil && ka.Stop()
	if err != nil {
		if errors.Is(err, errNothingToCompact) || errors.Is(err, summarizer.ErrNothingToSummarize) {
			if mt.t.committed {
				s.writeAnthropicError(w, mt, compactionError(http.StatusBadRequest, "invalid_request_error",
					"compaction_nothing_to_summarize", "messages holds no user or assistant content to summarize."))
				return true
			}
			w.Header().Del(agentCompactionHeader)
			return false // the agent's own request, as it came
		}
		s.compactionFailed(r, dialectAnthropic, agentTrigger, req.Model, err)
		if !mt.t.committed && s.passThroughOnFailure(w, dialectAnthropic, err) {
			w.Header().Del(agentCompactionHeader)
			s.forwardMessages(w, r, nil, req.Body) // the agent summarises as it would have
			return true
		}
		if e := compactionFailure(err); e != nil {
			e.writeTo(w, dialectAnthropic, mt.t)
		}
		return true
	}
	s.compacted(r, dialectAnthropic, agentTrigger, c)
	ledger := c.Ledger
	if cfg := s.cfg.Recall.withDefaults(); c.Payload != nil && c.Payload.Archive != nil && !cfg.Disabled {
		// The turns after this one offer the recall tool over the archive; the note says so, and
		// its signed reference is what they prove the archive is theirs with.
		a := c.Payload.Archive
		ref := s.owners.Ref(s.tenantOf(r.Context()), a.Conversation, a.Owner)
		ledger = strings.TrimSpace(ledger + "\n\n" + agentRecallText(cfg.ToolName, ref))
	}
	s.writeAgentSummary(w, req, mt, claudeCodeSummaryText(c.Summary, ledger), c.Usage)
	return true
}

// claudeCodeSummaryText is the reply Claude Code parses: it drops the <analysis> block and keeps
// what is inside <summary>, so the ledger goes inside the summary block.
func claudeCodeSummaryText(summary, ledger string) string {
	var b strings.Builder
	b.WriteString("<analysis>\nThis summary was written by compactd from the whole conversation; the facts ledger in it lists hard facts (paths, numbers, identifiers) verbatim.\n</analysis>\n\n<summary>\n")
	b.WriteString(strings.TrimSpace(summary))
	if ledger = strings.TrimSpace(ledger); ledger != "" {
		b.WriteString("\n\n")
		b.WriteString(ledger)
	}
	b.WriteString("\n</summary>")
	return b.String()
}

// writeAgentSummary answers a Messages turn with one assistant text block: a Messages JSON body,
// or, when the request streamed, the Messages SSE sequence (message_start, one text block's
// start/delta/stop, message_delta with the usage and stop reason, message_stop). The usage is
// the compaction's: what the summariser (and gap check) read and wrote.
func (s *Server) writeAgentSummary(w http.ResponseWriter, req *api.MessagesRequest, mt *msgTurn, text string, u summarizer.Usage) {
	id := newID("msg_compactd_")
	in, out := strconv.FormatInt(u.InputTokens, 10), strconv.FormatInt(u.OutputTokens, 10)
	model := api.AppendString(nil, req.Model)
	if !req.Stream {
		b := make([]byte, 0, len(text)+256)
		b = append(b, `{"id":"`+id+`","type":"message","role":"assistant","model":`...)
		b = append(b, model...)
		b = append(b, `,"content":[`...)
		b = append(b, api.TextBlock(text)...)
		b = append(b, `],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":`+in+`,"output_tokens":`+out+`}}`...)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
		return
	}
	start := append(append([]byte(`{"type":"message_start","message":{"id":"`+id+`","type":"message","role":"assistant","model":`), model...),
		`,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`+in+`,"output_tokens":0}}}`...)
	delta := append(append([]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`), api.AppendString(nil, text)...), "}}"...)
	var b []byte
	b = sse.AppendEvent(b, "message_start", start)
	b = sse.AppendEvent(b, "content_block_start", []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
	b = sse.AppendEvent(b, "content_block_delta", delta)
	b = sse.AppendEvent(b, "content_block_stop", []byte(`{"type":"content_block_stop","index":0}`))
	b = sse.AppendEvent(b, "message_delta", []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":`+in+`,"output_tokens":`+out+`}}`))
	b = sse.AppendEvent(b, "message_stop", []byte(`{"type":"message_stop"}`))
	writeEventStream(w, mt.t.committed, b)
}

// The agent summariser: Config.AgentSummarizer writes the summaries (and gap checks) of upgraded
// agent compactions. compactCore calls s.cfg.Summarizer; New routes that through agentRouting,
// which picks the agent summariser for calls made under withAgentSummariser's context.

type agentSummariserKey struct{}

func withAgentSummariser(ctx context.Context) context.Context {
	return context.WithValue(ctx, agentSummariserKey{}, true)
}

type agentRouting struct{ main, agent summarizer.Summarizer }

func (a agentRouting) api() string { return summarizer.APIOf(a.main) }

func (a agentRouting) Summarize(ctx context.Context, req summarizer.Request) (summarizer.Result, error) {
	if on, _ := ctx.Value(agentSummariserKey{}).(bool); on {
		return a.agent.Summarize(ctx, req)
	}
	return a.main.Summarize(ctx, req)
}

// Codex. Codex 0.169 with a provider not named "OpenAI" compacts locally: a streamed
// /v1/responses turn with no tools whose last input item is a user message asking for a handoff
// summary ("CONTEXT CHECKPOINT COMPACTION"), its x-codex-turn-metadata saying request_kind
// "compaction" (internal/fixtures/codex-0.169/local_compaction_request.json). Codex takes the
// reply's output text as the summary and puts it, behind its own prefix, into the next turn.

// codexCompaction reports whether req is Codex's local compaction turn, and returns the input
// to summarise: every item but the prompt.
func codexCompaction(h http.Header, req *api.ResponsesRequest, items []api.Item) ([]api.Item, bool) {
	ua := strings.ToLower(h.Get("User-Agent") + " " + h.Get("Originator"))
	if !strings.Contains(ua, "codex") || req.Trigger >= 0 || req.Compaction >= 0 || len(items) < 2 {
		return nil, false
	}
	if t := gjson.ParseBytes(req.Tools); len(req.Tools) > 0 && t.Type != gjson.Null && len(t.Array()) > 0 {
		return nil, false
	}
	last := items[len(items)-1]
	if last.Type != "message" || last.Role != "user" {
		return nil, false
	}
	kind := gjson.Get(h.Get("X-Codex-Turn-Metadata"), "request_kind").Str
	text := strings.ToLower(api.MessageText(last.Raw))
	marked := strings.Contains(text, "summar") && (strings.Contains(text, "handoff") || strings.Contains(text, "checkpoint"))
	if !marked || (kind != "" && kind != "compaction") {
		return nil, false
	}
	return items[: len(items)-1 : len(items)-1], true
}

// codexAgentCompaction answers Codex's local compaction turn itself; false: go on as usual.
func (s *Server) codexAgentCompaction(w http.ResponseWriter, r *http.Request, req *api.ResponsesRequest, items []api.Item) bool {
	if s.cfg.NoAgentCompaction {
		return false
	}
	in, ok := codexCompaction(r.Header, req, items)
	if !ok {
		return false
	}
	t := &turn{stream: req.Stream}
	w.Header().Set(agentCompactionHeader, "codex")
	var ka *keepAlive
	if req.Stream {
		ka = startKeepAlive(w, s.cfg.KeepAlive, dialectOpenAI.keepAlive)
	}
	total, _ := s.cfg.Counter.Request(req.Instructions, in, req.Tools, 0)
	cin := s.responsesCompactIn(r, compactRequest{model: req.Model, items: in, tokensBefore: total, conversation: conversationID(r, req.PromptCacheKey, nil)})
	cin.Retain = 0 // Codex keeps its own recent user messages; the summary covers everything
	c, err := s.compactCore(withAgentSummariser(r.Context()), cin)
	t.committed = ka != nil && ka.Stop()
	if err != nil {
		if errors.Is(err, errNothingToCompact) && !t.committed {
			w.Header().Del(agentCompactionHeader)
			return false
		}
		s.compactionFailed(r, dialectOpenAI, agentTrigger, req.Model, err)
		if !t.committed && s.passThroughOnFailure(w, dialectOpenAI, err) {
			w.Header().Del(agentCompactionHeader)
			s.forwardBody(w, r, &turn{stream: req.Stream}, req.Body)
			return true
		}
		if e := compactionFailure(err); e != nil {
			e.writeTo(w, dialectOpenAI, t)
		}
		return true
	}
	s.compacted(r, dialectOpenAI, agentTrigger, c)
	text := strings.TrimSpace(c.Summary)
	if l := strings.TrimSpace(c.Ledger); l != "" {
		text += "\n\n" + l
	}
	writeResponsesText(w, req, t, text, c.Usage)
	return true
}

// writeResponsesText answers a Responses turn with one assistant message: a response object, or
// when streamed the Responses SSE sequence (created, output_item.added, output_text.delta,
// output_item.done, completed with usage).
func writeResponsesText(w http.ResponseWriter, req *api.ResponsesRequest, t *turn, text string, u summarizer.Usage) {
	respID, msgID := newID("resp_"), newID("msg_")
	model := string(api.AppendString(nil, req.Model))
	usage := `{"input_tokens":` + strconv.FormatInt(u.InputTokens, 10) + `,"input_tokens_details":{"cached_tokens":0},"output_tokens":` +
		strconv.FormatInt(u.OutputTokens, 10) + `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":` +
		strconv.FormatInt(u.InputTokens+u.OutputTokens, 10) + `}`
	quoted := string(api.AppendString(nil, text))
	item := `{"id":"` + msgID + `","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":` + quoted + `,"annotations":[]}]}`
	resp := func(status, output, usage string) string {
		return `{"id":"` + respID + `","object":"response","status":"` + status + `","model":` + model + `,"output":[` + output + `],"usage":` + usage + `}`
	}
	if !req.Stream {
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
		b = sse.AppendEvent(b, name, []byte(`{"type":"`+name+`","sequence_number":`+strconv.Itoa(seq)+`,`+body+`}`))
		seq++
	}
	ev("response.created", `"response":`+resp("in_progress", "", "null"))
	ev("response.output_item.added", `"output_index":0,"item":{"id":"`+msgID+`","type":"message","role":"assistant","status":"in_progress","content":[]}`)
	ev("response.output_text.delta", `"item_id":"`+msgID+`","output_index":0,"content_index":0,"delta":`+quoted)
	ev("response.output_item.done", `"output_index":0,"item":`+item)
	ev("response.completed", `"response":`+resp("completed", item, usage))
	writeEventStream(w, t.committed, b)
}
