package eventlog

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact/summarizer"
	"github.com/compactd/compactd/internal/engine"
)

// Source is what every row says of the request it came from.
type Source struct {
	Tenant, Owner string
	Route         string // the route pattern the request matched ("" outside a route)
	Client        string // ClientKind of its headers
	API           string // the dialect's name (responses, messages, chat)
}

// Client kinds of the event log, from the request's headers (ClientKind).
const (
	ClientCodex      = "codex"
	ClientClaudeCode = "claude_code"
	ClientChatAgent  = "chat_agent"
	ClientSDK        = "sdk"
	ClientOther      = "other"
)

// chatAgents are user-agent words of the Chat Completions agents compactd is used with.
var chatAgents = []string{"qwen", "aider", "cline", "continue", "opencode", "goose", "kilo", "roo-code", "crush"}

// ClientKind names the kind of client a request came from, by the headers that kind sends:
// Codex (its originator or user agent, or any x-codex-* header), Claude Code (its session
// header or claude-cli user agent: what proxy's agent compaction recognises it by), the Chat
// agents (their user agents), the OpenAI and Anthropic SDKs (their user agents and x-stainless-*
// headers). Headers prove nothing about a client; this is a label for the console, never a
// decision.
func ClientKind(h http.Header) string {
	ua := strings.ToLower(h.Get("User-Agent"))
	if strings.Contains(ua, "codex") || strings.Contains(strings.ToLower(h.Get("Originator")), "codex") {
		return ClientCodex
	}
	for k := range h {
		if strings.HasPrefix(k, "X-Codex-") {
			return ClientCodex
		}
	}
	if h.Get("X-Claude-Code-Session-Id") != "" || strings.Contains(ua, "claude-cli") || strings.Contains(ua, "claude-code") {
		return ClientClaudeCode
	}
	for _, a := range chatAgents {
		if strings.Contains(ua, a) {
			return ClientChatAgent
		}
	}
	if h.Get("X-Stainless-Lang") != "" || strings.Contains(ua, "openai") || strings.Contains(ua, "anthropic") {
		return ClientSDK
	}
	return ClientOther
}

// event is the row every recording starts from: the source's tenant, owner, client and route.
func event(src Source, kind, conversation string) archive.Event {
	return archive.Event{Tenant: src.Tenant, Owner: src.Owner, Conversation: conversation, Kind: kind,
		CreatedAt: time.Now(), API: src.API, Client: src.Client, Route: src.Route}
}

// extractiveModel is the model name of a summary the extractive failure policy wrote.
const extractiveModel = "compactd-extractive"

// Compaction records a successful compaction c that took took: its figures and, sealed, its
// handoff text. conversation is the archive conversation the turn compacted under; c's archive
// reference, when it has one, names the conversation and owner instead. Nothing is recorded
// for a compaction archived under no conversation.
func (r *Recorder) Compaction(src Source, conversation, trigger string, c *engine.Compaction, took time.Duration) {
	if r == nil || c == nil || c.Payload == nil {
		return
	}
	conv, owner := conversation, ""
	if a := c.Payload.Archive; a != nil {
		conv, owner = a.Conversation, a.Owner
	}
	if conv == "" {
		return // not archived under a conversation: nothing to show it in
	}
	e := event(src, archive.EventCompaction, conv)
	if owner != "" {
		e.Owner = owner
	}
	e.Trigger, e.Outcome, e.Model, e.Item = trigger, "ok", c.Payload.Model, c.ID
	if c.Payload.Model == extractiveModel {
		e.Outcome = string(engine.PolicyExtractive)
	}
	if c.Speculated {
		e.Flags = "speculation"
	}
	if a := c.Payload.Archive; a != nil {
		e.Segment = a.ID
	}
	e.Before, e.After, e.Items, e.Latency = c.Payload.TokensBefore, c.Payload.TokensAfter, c.Payload.ItemsReplaced, took
	if c.Summary != "" || c.Ledger != "" {
		e.Content = &archive.EventContent{Summary: c.Summary, Ledger: c.Ledger}
	}
	r.Add(e)
}

// CompactionFailed records a compaction under conversation that could not be completed, with
// what the failure policy (the route's, policy) made of it, and, sealed, the error. Nothing is
// recorded outside a conversation.
func (r *Recorder) CompactionFailed(src Source, conversation, trigger, model string, policy engine.FailurePolicy, err error) {
	if r == nil || conversation == "" {
		return
	}
	e := event(src, archive.EventCompactionFailed, conversation)
	e.Trigger, e.Model, e.Outcome = trigger, model, failureOutcome(policy, trigger, err)
	e.Flags = failureClass(err)
	e.Content = &archive.EventContent{Error: err.Error()}
	r.Add(e)
}

// failureOutcome is what a failed compaction turned into: canceled, busy, passthrough (the turn
// was forwarded uncompacted) or fail (the client got an error). Passthrough applies to the
// threshold triggers only (threshold, policy, agent: an explicit route must answer with a
// compaction) and never to a full queue or a client gone (engine.PassThrough).
func failureOutcome(policy engine.FailurePolicy, trigger string, err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, summarizer.ErrBusy):
		return "busy"
	case policy == engine.PolicyPassthrough && (trigger == "threshold" || trigger == "policy" || trigger == "agent"):
		return string(engine.PolicyPassthrough)
	}
	return string(engine.PolicyFail)
}

// failureClass is a word for why a compaction failed.
func failureClass(err error) string {
	var te *engine.TimeoutError
	switch p := engine.PushbackOf(err); {
	case errors.As(err, &te):
		return "timeout"
	case errors.Is(err, summarizer.ErrCircuitOpen):
		return "circuit_open"
	case p.RateLimited:
		return "rate_limited"
	case p.Overloaded:
		return "overloaded"
	}
	return "error"
}

// MemoApplied records that the memo applied a remembered compaction m to a turn, and reports
// whether it did: only a compaction archived under a conversation is recorded (and a nil
// recorder records nothing).
func (r *Recorder) MemoApplied(src Source, m *engine.Memory) bool {
	if r == nil || m == nil || m.Opened == nil || m.Opened.Payload == nil || m.Opened.Payload.Archive == nil {
		return false
	}
	a := m.Opened.Payload.Archive
	if a.Conversation == "" {
		return false
	}
	e := event(src, archive.EventMemoApplied, a.Conversation)
	e.Item, e.Segment, e.Items = m.Opened.ID, a.ID, m.Items
	r.Add(e)
	return true
}

// Recall records one recall search of conversation with, sealed, its query and the excerpts it
// returned (its outcome failed when err is not nil). Nothing is recorded outside a conversation.
func (r *Recorder) Recall(src Source, conversation, query string, hits []archive.Hit, err error) {
	if r == nil || conversation == "" {
		return
	}
	e := event(src, archive.EventRecall, conversation)
	e.Items, e.Outcome = len(hits), "ok"
	if err != nil {
		e.Outcome = "failed"
	}
	c := &archive.EventContent{Query: query}
	for _, h := range hits {
		c.Excerpts = append(c.Excerpts, archive.EventExcerpt{Segment: h.SegmentID, Item: h.ItemIndex, Text: h.Excerpt})
	}
	e.Content = c
	r.Add(e)
}
