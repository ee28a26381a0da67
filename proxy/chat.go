package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/compactd/compactd/internal/turn"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	dialectname "github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/sse"
	"github.com/tidwall/gjson"
)

// The Chat Completions route, POST /v1/chat/completions: OpenAI's older API and the one most
// agents on local models speak (Qwen Code, Aider, Cline, Continue), forwarded to --upstream.
//
// Chat Completions has no compaction protocol — no context_management, no compaction item — so
// the only compaction here is the operator's policy (--compact-threshold chat=N), and it is
// transparent: past the threshold compactd compacts the upstream's view of the conversation
// (system and developer messages and the newest user messages kept verbatim, then one user
// message holding the handoff, then what a speculative compaction kept behind it), and the
// upstream's response goes back to the client untouched, JSON or SSE, usage as the upstream
// reports it (it is what the upstream processed). What compactd did is said in the
// X-Compactd-Compaction response header (or, once compactd committed a stream while it waited on
// the summariser, in an SSE comment), and the conversation memo re-applies the compaction on the
// turns after it (viewChat), so a client that resends its whole history costs one summary per
// compaction.
//
// Below the threshold, or without a policy, the request is forwarded as it came, byte for byte,
// and so is its response. The body is skimmed either way (api.ParseChatRequest): a body compactd
// cannot read safely is a 400 in OpenAI's envelope and is never forwarded.

// chatSealKind binds a Chat compaction's sealed payload: it never opens as another dialect's
// item or block.
const chatSealKind = "openai.chat.compaction"

// chatDialect is the Chat Completions API, named "chat" everywhere (dialectname.Chat): logs,
// metrics, speculation keys, its --compact-threshold route, and its failure policy, which
// follows the responses one unless --failure-policy names chat.
type chatDialect struct{}

var dialectChat legacyDialect = chatDialect{}

func (chatDialect) Name() dialectname.Name { return dialectname.Chat }
func (chatDialect) Words() turn.Words {
	return turn.Words{Compaction: "item", Held: "messages", UpstreamFlag: "--upstream"}
}

// Engine: the handoff is the Responses text. Its one claim about the window — "the user's most
// recent messages are kept verbatim above" — is true of Chat too: chatCompactIn keeps the same
// window (instructions and the newest user messages) before the handoff.
func (chatDialect) Engine() engine.Dialect {
	return engine.Dialect{Name: dialectname.Chat, SealKind: chatSealKind, Handoff: handoff.Text, Memo: true,
		UserMessage: api.ChatUserMessage}
}

// compactionItem is nil: Chat has no compaction item on the wire (the compaction is transparent).
func (chatDialect) compactionItem(*engine.Compaction) []byte { return nil }

// KeepAlive is an SSE comment, which Chat stream parsers skip.
func (chatDialect) KeepAlive(bool) []byte {
	return []byte(": compactd is compacting the conversation\n\n")
}
func (chatDialect) Fault(f *fault.Fault) turn.Envelope { return api.OpenAIFault(f) }

// Terminal: a Chat Completions stream ends with `data: [DONE]` (an error chunk ends it too).
func (chatDialect) Terminal(data []byte) bool {
	return bytes.Equal(data, doneMarker) || len(data) > 0 && data[0] == '{' && gjson.GetBytes(data, "error").Exists()
}
func (chatDialect) modifyResponse(s *Server) func(*http.Response) error { return s.modifyChatResponse }

// FaultEvent is a data-only chunk holding OpenAI's error envelope, {"error":{…}}: what a Chat
// Completions stream carries when it fails (the openai SDKs' stream decoders end the stream with
// an error on a chunk with an "error" member). No [DONE] follows it: a client that reads chunks
// without checking for errors must not take the stream for a finished, empty answer.
func (chatDialect) FaultEvent(f *fault.Fault, _ *turn.Stream) []byte {
	return chatErrorChunk(api.OpenAIFault(f))
}

func chatErrorChunk(e *api.OpenAIError) []byte { return sse.AppendEvent(nil, "", e.Body()) }

// chatRoute is the handler of POST /v1/chat/completions, with the route's own reverse proxy:
// its ModifyResponse touches only a stream compactd committed itself.
func (s *Server) chatRoute() http.HandlerFunc {
	rp := s.newReverseProxy(s.cfg.Upstream, dialectChat)
	return func(w http.ResponseWriter, r *http.Request) { s.handleChat(w, r, rp) }
}

// chatView is the conversation as the upstream is to see it, before it is counted: the client's
// messages, with the compaction the memo remembers for a prefix of them applied.
type chatView struct {
	msgs []api.ChatMessage
	prev *engine.Opened // the compaction the view already applies, which a new one chains to
	mem  *engine.Memory // the memo's answer for the client's messages; a compaction is recorded against it
}

// viewChat looks the turn's messages up in the conversation memo and applies the compaction it
// recorded for the longest prefix of them: the kept window of that prefix, the handoff, the
// verbatim tail a speculative compaction kept, then the messages after the prefix — the bytes the
// compacting turn sent upstream followed by what came after, so the prompt cache keeps hitting.
func (s *Server) viewChat(w http.ResponseWriter, r *http.Request, req *api.ChatRequest) chatView {
	v := chatView{msgs: req.Messages}
	v.mem = s.engine.Remembered(r.Context(), dialectChat.Engine(), s.scope(r.Context()), api.Raws[json.RawMessage](api.ChatUnits(req.Messages)))
	if v.mem == nil || v.mem.Opened == nil {
		return v
	}
	o, n := v.mem.Opened, v.mem.Items
	tail := min(o.Payload.Tail, n)
	head := req.Messages[:n-tail]
	items, _ := api.ChatItems(head)
	win := s.engine.Partition(items, s.cfg.RetainTokens)
	kept := s.engine.KeepWindow(dialectChat.Engine(), nil, items, win, s.cfg.RetainTokens)
	var text string
	if o.Payload.Summary != "" || o.Payload.Ledger != "" {
		text = handoff.Text(o.Payload.Summary, o.Payload.Ledger)
	}
	raw := chatContext(kept, text, req.Messages[n-tail:n])
	msgs := make([]api.ChatMessage, 0, len(raw)+len(req.Messages)-n)
	for i, m := range raw {
		// The handoff is compactd's, not the user's: a later compaction summarises it again and
		// never keeps it as one of the newest user messages (which the next turn, counting the
		// client's messages, would not keep either).
		msgs = append(msgs, api.ChatMessage{Raw: m, Role: gjsonRole(m), Handoff: text != "" && i == len(kept)})
	}
	v.msgs, v.prev = append(msgs, req.Messages[n:]...), o
	s.markApplied(w, r, dialectChat, v.mem)
	return v
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request, rp http.Handler) {
	body, ok := s.readBody(w, r, dialectChat)
	if !ok {
		return
	}
	req, err := api.ParseChatRequest(body)
	if err != nil {
		writeFault(w, dialectChat, api.BodyFault(err))
		return
	}
	limit, trigger := s.cfg.Policy.ForRoute(dialectChat.Name()).Effective(compact.Threshold{})
	if limit <= 0 {
		forwardChat(w, r, rp, nil, body)
		return
	}
	v := s.viewChat(w, r, req)
	units := api.ChatUnits(v.msgs)
	total, _ := s.cfg.Counter.Request(nil, units, chatTools(req), limit)
	if !compact.Over(total, limit) {
		msgs := v.msgs
		s.engine.Speculate(engine.SpecRequest{Dialect: dialectChat.Engine(), Tenant: s.tenantOf(r.Context()), Model: req.Model,
			Owner: s.ownerOf(r.Context()), Conversation: conversationLabel(r, "", v.prev),
			Auth: s.summariserAuth(r), Units: units, Prefix: func(n int) []api.Item { items, _ := api.ChatItems(msgs[:n]); return items },
			Retain: s.cfg.RetainTokens, Total: total, Limit: limit})
		if v.prev != nil {
			if !holdOf(r).Rebuild() {
				s.budgetRefused(w, dialectChat) // the remembered compaction applied: a body-sized rebuild
				return
			}
			if d := s.chatRecallFor(r.Context(), req, v.prev, nil); d != nil {
				s.forwardChatRecall(w, r, nil, d, api.Raws[[]byte](v.msgs)) // recall_chat.go
				return
			}
			body = req.WithMessages(api.Raws[[]byte](v.msgs)) // the remembered compaction, applied
		}
		forwardChat(w, r, rp, nil, body)
		return
	}
	t := &turnState{Stream: turn.Stream{Streamed: req.Stream}}
	msgs, c, answered := s.compactChat(w, r, t, trigger, req, v, total)
	if answered {
		return
	}
	if msgs == nil && v.prev != nil {
		msgs = api.Raws[[]byte](v.msgs)
	}
	if d := s.chatRecallFor(r.Context(), req, v.prev, c); d != nil && msgs != nil {
		s.forwardChatRecall(w, r, t, d, msgs)
		return
	}
	out := body // nothing to compact, or forwarded uncompacted under the passthrough policy
	if msgs != nil {
		out = req.WithMessages(msgs)
	}
	forwardChat(w, r, rp, t, out)
}

// compactChat compacts a turn past the threshold and returns the messages the upstream gets and
// the compaction (nil: the turn goes on as it came). answered reports that the client has been answered (a failure).
// A successful compaction is reported to the client here, and it is where the memo will record
// it (the compacted prefix of v.msgs → the compaction), so the next turn applies it in viewChat.
func (s *Server) compactChat(w http.ResponseWriter, r *http.Request, t *turnState, trigger string, req *api.ChatRequest, v chatView, total int) ([][]byte, *compaction, bool) {
	var msgs [][]byte
	c, answered := s.thresholdCompaction(w, r, t, trigger, s.chatCompactIn(r, req, v, total, &msgs))
	if c == nil {
		return nil, nil, answered
	}
	markCompactedTurn(w, t.st(), c)
	return msgs, c, false
}

// chatCompactIn is the engine's view of compacting a Chat conversation: its neutral items
// (api.ChatItems), one unit per message for speculation and the kept tail, the retain budget of
// newest user messages, and, as the compacted context, written to *out: the kept window (the
// client's own message bytes; a user message the budget had to shorten, shortened), the handoff
// as one user message, and the messages a speculative compaction kept verbatim behind it.
func (s *Server) chatCompactIn(r *http.Request, req *api.ChatRequest, v chatView, total int, out *[][]byte) compactIn {
	msgs := v.msgs
	items, _ := api.ChatItems(msgs)
	return compactIn{
		dialect: dialectChat,
		Request: engine.Request{
			Model: req.Model, Conversation: conversationID(r, "", v.prev), Auth: s.summariserAuth(r),
			Items: items, Units: api.ChatUnits(msgs),
			Prefix:       func(n int) []api.Item { p, _ := api.ChatItems(msgs[:n]); return p },
			TokensBefore: total, Prev: v.prev, Retain: s.cfg.RetainTokens, Speculate: true,
			Memory: v.mem, Covers: len(req.Messages),
		},
		finish: func(c *compaction) (int, int) {
			o := chatContext(c.Kept, c.Handoff, msgs[len(msgs)-c.Tail:])
			*out = o
			counted := make([]api.Item, len(o))
			for i, raw := range o {
				counted[i] = api.Item{Raw: raw}
			}
			after, _ := s.cfg.Counter.Request(nil, counted, chatTools(req), 0)
			return after, len(msgs) - c.Tail - len(c.Kept)
		},
	}
}

// chatContext is the compacted Chat context: the window's kept messages (the client's own bytes,
// and the user message the retain budget shortened, which KeepWindow writes as a Chat message),
// the handoff as one user message (when there is one), then the messages kept verbatim behind it.
func chatContext(kept []api.Item, handoffText string, tail []api.ChatMessage) [][]byte {
	o := make([][]byte, 0, len(kept)+1+len(tail))
	for _, it := range kept {
		o = append(o, it.Raw)
	}
	if handoffText != "" {
		o = append(o, api.ChatUserMessage(handoffText))
	}
	for _, m := range tail {
		o = append(o, m.Raw)
	}
	return o
}

func gjsonRole(raw []byte) string { return gjson.GetBytes(raw, "role").Str }

// chatTools is what the upstream reads as the request's tools: tools, or the deprecated
// functions.
func chatTools(req *api.ChatRequest) []byte {
	if req.Tools != nil {
		return req.Tools
	}
	return req.Functions
}

// forwardChat sends body to the upstream through rp. t is nil for pass-through (the response is
// relayed untouched); a committed t has compactd's own 200 already on the wire.
func forwardChat(w http.ResponseWriter, r *http.Request, rp http.Handler, t *turnState, body []byte) {
	ctx := r.Context()
	if t != nil {
		ctx = withTurn(ctx, t)
	}
	out := withBody(r, ctx, body)
	var rw http.ResponseWriter = w
	if t != nil && t.Committed {
		rw = committedWriter{w}
	}
	rp.ServeHTTP(rw, out)
}

// modifyChatResponse passes every response through untouched (a stream but for the event cap,
// guardPassThrough), except on a stream compactd committed itself (keep-alives while the summariser ran): there the upstream's status can no
// longer be sent, so an upstream error becomes the stream's error chunk, and a JSON answer to
// the streamed request (which cannot follow the stream's comments) a 502 error chunk.
func (s *Server) modifyChatResponse(resp *http.Response) error {
	t := turnFrom(resp.Request.Context())
	if t != nil {
		// A turn compactd compacted: a stream that breaks off before [DONE] ends with an error
		// chunk, not a cut that looks like a short answer.
		guardChatStream(resp, false)
	} else {
		guardPassThrough(resp, dialectChat) // the event cap, nothing else
	}
	if t == nil || !t.Committed {
		return nil
	}
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		relay.ReplaceBody(resp, chatErrorChunk(upstreamErrorFromBody(resp.StatusCode, body)))
		return nil
	}
	if !relay.IsEventStream(resp.Header) {
		resp.Body.Close()
		// Nothing the client holds is affected: the compaction lives only in the upstream's view.
		s.unrewritable(resp, dialectChat, false, "is JSON, but the request was streamed")
	}
	return nil
}
