// Package chat is the OpenAI Chat Completions API's adapter (POST /v1/chat/completions) behind
// compactd's one turn pipeline (internal/turn): OpenAI's older API and the one most agents on
// local models speak (Qwen Code, Aider, Cline, Continue), forwarded to --upstream.
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
// turns after it (Turn.Remember), so a client that resends its whole history costs one summary
// per compaction.
//
// Below the threshold, or without a policy, the request is forwarded as it came, byte for byte,
// and so is its response. The body is skimmed either way (api.ParseChatRequest): a body compactd
// cannot read safely is a 400 in OpenAI's envelope and is never forwarded.
package chat

import (
	"bytes"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/handoff"
	"github.com/compactd/compactd/internal/relay"
	"github.com/compactd/compactd/internal/sse"
	"github.com/compactd/compactd/internal/turn"
)

// SealKind binds a Chat compaction's sealed payload: it never opens as another API's item or
// block.
const SealKind = "openai.chat.compaction"

// Adapter is the Chat Completions API, named "chat" everywhere (dialect.Chat): logs, metrics,
// speculation keys, its --compact-threshold route, and its failure policy, which follows the
// responses one unless --failure-policy names chat.
type Adapter struct{}

var _ turn.Adapter = Adapter{}

func (Adapter) Name() dialect.Name { return dialect.Chat }

// Engine: the handoff is the Responses text. Its one claim about the window — "the user's most
// recent messages are kept verbatim above" — is true of Chat too: Compaction keeps the same
// window (instructions and the newest user messages) before the handoff.
func (Adapter) Engine() engine.Dialect {
	return engine.Dialect{Name: dialect.Chat, SealKind: SealKind, Handoff: handoff.Text, Memo: true,
		UserMessage: api.ChatUserMessage}
}

func (Adapter) Words() turn.Words {
	return turn.Words{Compaction: "item", Held: "messages", UpstreamFlag: "--upstream"}
}

func (Adapter) Fault(f *fault.Fault) turn.Envelope { return api.OpenAIFault(f) }

// FaultEvent is a data-only chunk holding OpenAI's error envelope, {"error":{…}}: what a Chat
// Completions stream carries when it fails (the openai SDKs' stream decoders end the stream with
// an error on a chunk with an "error" member). No [DONE] follows it: a client that reads chunks
// without checking for errors must not take the stream for a finished, empty answer.
func (Adapter) FaultEvent(f *fault.Fault, _ *turn.Stream) []byte {
	return errorChunk(api.OpenAIFault(f))
}

func errorChunk(e *api.OpenAIError) []byte { return sse.AppendEvent(nil, "", e.Body()) }

// KeepAlive is an SSE comment, which every parser of the API skips.
func (Adapter) KeepAlive(bool) []byte { return relay.KeepAlive }

// doneMarker is the data of the event that ends a Chat Completions stream.
var doneMarker = []byte("[DONE]")

// Terminal: a Chat Completions stream ends with `data: [DONE]` (an error chunk ends it too).
func (Adapter) Terminal(data []byte) bool {
	return bytes.Equal(data, doneMarker) || len(data) > 0 && data[0] == '{' && gjson.GetBytes(data, "error").Exists()
}

// Parse skims a Chat Completions body. There is nothing else to read: Chat has no compaction on
// the wire to open or hand off, and no foreign compaction to drop; what compactd does to the
// turn is the operator's policy alone (Turn.Threshold).
func (a Adapter) Parse(env *turn.Env, body []byte) (turn.Turn, *fault.Fault) {
	req, err := api.ParseChatFrom(body, env.ResumeFrom(body))
	if err != nil {
		return nil, api.BodyFault(err)
	}
	env.Skimmed(body, req)
	return &Turn{req: req, msgs: req.Messages, stream: turn.Stream{Streamed: req.Stream}}, nil
}
