package messages

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn"
)

// Upgrading Claude Code's own compaction. Claude Code compacts by asking the model for a summary
// in an ordinary streamed /v1/messages turn: the conversation so far, then a last user message
// with its summarisation prompt (an <analysis> block, then a <summary> block). Through compactd
// that turn is answered by compactd itself, through the same engine as every other compaction
// (compactd's summariser and failure policy, the facts ledger, the gap check, the archive), and
// rendered in exactly the shape Claude Code parses: one text block
// "<analysis>…</analysis>\n\n<summary>…</summary>", the ledger inside the summary block so it
// survives Claude Code's own handling of the reply. The agent gets a better summary and the raw
// conversation lands in the archive under its session id.
//
// Recognition is by the prompt's exact shape (isSummaryPrompt), not by words or tags a user can
// type: an ordinary turn that mentions <analysis> and <summary>, or pastes a paragraph of the
// prompt, reaches the model. Anything compactd is not sure about (a reworded prompt in a later
// release included) goes on exactly as it would without this file.

// claudeCodeAgent is the agent's name in X-Compactd-Agent-Compaction.
const claudeCodeAgent = "claude-code"

// claudeCode returns the conversation to summarise when the turn is Claude Code's compaction
// turn with something in it a summariser can read, else nil.
func (t *Turn) claudeCode(env *turn.Env) []api.Message {
	msgs, ok := claudeCodeCompaction(env.Header, t.req)
	if !ok || len(api.MessageItems(msgs)) == 0 {
		return nil
	}
	return msgs
}

// claudeCodeCompaction reports whether req is Claude Code's compaction turn, and returns the
// conversation to summarise: every message but the prompt (what Claude Code sends beside the
// prompt in the last message, the newest tool results and any user text, is kept; it is
// conversation).
//
// Required: a corroborating client identity (the x-claude-code-session-id header, or a claude-cli
// user agent); no compaction blocks or on-demand compaction (compactd's own paths handle those);
// no forced tool (Claude Code's tools stay attached to its compaction turn, tool_choice unset); a
// last user message of text and tool_result blocks whose last block is Claude Code's full
// summarisation prompt, whole (isSummaryPrompt). Claude Code's partial compactions (summarise
// the RECENT portion, or the part before the newest messages) are not upgraded: their prompts
// open differently, and compactd would summarise what Claude Code keeps.
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
	blocks := last.ContentBlocks()
	n := len(blocks)
	if n == 0 || blocks[n-1].Type != api.BlockText || !isSummaryPrompt(gjson.GetBytes(blocks[n-1].Raw, "text").Str) {
		return nil, false
	}
	kept := blocks[: n-1 : n-1]
	for _, b := range kept {
		if b.Type != api.BlockText && b.Type != "tool_result" {
			return nil, false
		}
	}
	msgs := req.Messages[: len(req.Messages)-1 : len(req.Messages)-1]
	if len(kept) > 0 {
		msgs = append(msgs, last.WithBlocks(kept))
	}
	return msgs, true
}

// Claude Code 2.1.332's full summarisation prompt as it reaches the wire (its bundled JS builds
// it in one function; internal/fixtures/claude-code-2.1.332 holds captures): a no-tools preamble
// naming the reply's shape, the prompt, optionally "\n\nAdditional Instructions:\n" with the
// /compact arguments and the PreCompact hooks' output, then a reminder naming the shape again.
// The middle varies with Claude Code's state (it inserts notes on what counts as a user message)
// and the instructions are the user's; the anchors below do not vary.
const (
	ccPreamble = "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\n" +
		"- Do NOT use Read, Bash, Grep, Glob, Edit, Write, or ANY other tool.\n" +
		"- You already have all the context you need in the conversation above.\n" +
		"- Tool calls will be REJECTED and will waste your only turn \u2014 you will fail the task.\n" +
		"- Your entire response must be plain text: "
	ccOpening = ".\n\nYour task is to create a detailed summary of the conversation so far, " +
		"paying close attention to the user's explicit requests and your previous actions.\n"
	ccSections    = "\n\nYour summary should include the following sections:\n\n1. Primary Request and Intent:"
	ccReminder    = "\n\nREMINDER: Do NOT call any tools. Respond with plain text only \u2014 "
	ccReminderEnd = ". Tool calls will be rejected and you will fail the task."
)

// ccShapes are the reply shapes the preamble and the reminder name: with the analysis scratchpad,
// and without it (Claude Code drops the analysis part for models that run without one).
var ccShapes = [...]string{"an <analysis> block followed by a <summary> block", "a <summary> block"}

// ccNotes open the paragraphs Claude Code may append after the reminder: its note on tool results
// left out of an oversized request, and its retry paragraph.
var ccNotes = [...]string{
	"Some tool results above were left out whole because they did not fit",
	"For this reply only: write what the instructions above ask for, with the summary inside <summary></summary> tags.",
}

// isSummaryPrompt reports whether text (one text block, whole) is Claude Code's full
// summarisation prompt: it begins with the preamble and the prompt's opening sentence, holds the
// prompt's list of sections, and ends with the reminder (naming the shape the preamble named),
// followed by nothing but Claude Code's own notes. A message that mentions the tags, quotes the
// prompt inside other text or asks for a summary in other words is not; nor are the partial
// compactions' prompts, which open differently.
func isSummaryPrompt(text string) bool {
	for _, shape := range ccShapes {
		head := ccPreamble + shape + ccOpening
		if !strings.HasPrefix(text, head) {
			continue
		}
		reminder := ccReminder + shape + ccReminderEnd
		i := strings.LastIndex(text, reminder)
		return i >= len(head) && strings.Contains(text[len(head):i], ccSections) && ccTail(text[i+len(reminder):])
	}
	return false
}

// ccTail reports whether what follows the reminder is Claude Code's: nothing, or paragraphs that
// open with one of its notes or are one marker tag alone ("<remote-control-device-report/>").
func ccTail(rest string) bool {
	for rest != "" {
		var ok bool
		if rest, ok = strings.CutPrefix(rest, "\n\n"); !ok {
			return false
		}
		for _, n := range ccNotes {
			if strings.HasPrefix(rest, n) {
				return true // a note runs to the end: Claude Code appends it last
			}
		}
		p, _, _ := strings.Cut(rest, "\n\n")
		if !isMarkerTag(p) {
			return false
		}
		rest = rest[len(p):]
	}
	return true
}

// isMarkerTag reports whether p is one XML-like tag, <name> or <name/>, of lower-case letters,
// digits, '-' and '_'.
func isMarkerTag(p string) bool {
	p, ok := strings.CutPrefix(p, "<")
	if !ok {
		return false
	}
	p, ok = strings.CutSuffix(p, ">")
	if !ok {
		return false
	}
	p = strings.TrimSuffix(p, "/")
	if p == "" || len(p) > 64 {
		return false
	}
	for _, c := range []byte(p) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Agent: Claude Code's compaction turn (never on count_tokens). The summary covers the
// conversation before the prompt, labelled with the agent's session, and Claude Code compacts
// whatever the saving.
func (t *Turn) Agent(env *turn.Env) (string, engine.Request, bool) {
	if t.a.CountTokens {
		return "", engine.Request{}, false
	}
	msgs := t.claudeCode(env)
	if msgs == nil {
		return "", engine.Request{}, false
	}
	total, _ := env.Counter.Request(t.req.System, api.CountItems(msgs), t.req.Tools, 0)
	r := t.compactIn(env, msgs, nil)
	r.TokensBefore, r.Explicit = total, true
	return claudeCodeAgent, r, true
}

// AgentNothing: a committed Claude Code compaction with nothing to summarise ends with the same
// refusal as an on-demand one.
func (t *Turn) AgentNothing() *fault.Fault { return nothingToSummarize() }

// AgentAnswer answers Claude Code with the summary, the ledger and, when the compaction was
// archived and recall is on, the note with its signed reference (the turns after this one offer
// the recall tool over the archive, and prove it theirs with the reference: ArchiveRef).
func (t *Turn) AgentAnswer(w http.ResponseWriter, c *engine.Compaction, note string) {
	ledger := c.Ledger
	if note != "" {
		ledger = strings.TrimSpace(ledger + "\n\n" + note)
	}
	t.writeAgentSummary(w, claudeCodeSummaryText(c.Summary, ledger), c.Usage)
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
func (t *Turn) writeAgentSummary(w http.ResponseWriter, text string, u summarizer.Usage) {
	id := engine.NewID("msg_compactd_")
	in, out := strconv.FormatInt(u.InputTokens, 10), strconv.FormatInt(u.OutputTokens, 10)
	model := api.AppendString(nil, t.req.Model)
	if !t.req.Stream {
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
	turn.WriteEvents(w, t.stream.Committed, b)
}
