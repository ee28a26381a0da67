// Package turn is the seam between compactd's front and the APIs it serves: the contracts an
// API's adapter (internal/dialect/<api>) implements and the one turn pipeline in the front
// (proxy.serveTurn) drives.
//
// One request on a compacting route is one Turn. The front reads the body and hands it to the
// route's Adapter, chosen once when the route was registered; Parse gives back a Turn that owns
// everything API-specific about the request: its skim, the compaction it carries (opened, its
// handoff applied), the client's threshold, its conversation as neutral units, how a compaction
// is rendered into it, the body the upstream reads and how the upstream's answer is rewritten.
// The front owns the order of the steps — policy, memo, count, speculate, compact (holding the
// stream while it runs), recall, forward — and everything that is the same for every API: the
// gate, budgets, metrics, the event log, the failure policy, keep-alives, the recall loop.
// The engine (internal/engine) owns the compaction itself and sees neither.
//
// What an adapter can do beyond the basics it says by implementing the optional interfaces
// (Explicit, AgentCompaction, Recaller, PassThrough, UpstreamHeaders): the front asserts them
// once per turn, so no adapter carries stubs for what its API does not have.
package turn

import (
	"context"
	"io"
	"net/http"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/compact"
	"github.com/compactd/compactd/internal/dialect"
	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/fault"
)

// Adapter is one API. It is stateless: every request's state lives in its Turn.
type Adapter interface {
	Dialect
	// Parse reads one request into a Turn: skimmed and validated, foreign compactions dropped
	// or refused (Env.Foreign), the compaction it carries opened (Env.Open) and its handoff
	// applied. A body compactd will not forward is answered with the fault, and nothing of it
	// reaches the upstream.
	Parse(env *Env, body []byte) (Turn, *fault.Fault)
}

// Dialect is an API's wire, as far as the front needs it before (or without) a turn: the gate
// answers in it, the stream guard ends streams in it, the metrics are labelled with its name.
type Dialect interface {
	// Name is the API's one name (routes, memo, summariser, failure policy, metrics, logs).
	Name() dialect.Name
	// Engine is what the compaction engine needs of the API: its seal kind, its handoff text,
	// its memo canonicalisation and its renderer of a user message.
	Engine() engine.Dialect
	// Words are what the API calls things, for the messages compactd writes.
	Words() Words
	// Fault is f in the API's error envelope, for an answer not yet committed.
	Fault(f *fault.Fault) Envelope
	// FaultEvent is f as the terminal error event(s) of a stream compactd already committed, numbered on
	// from st where the API numbers its events.
	FaultEvent(f *fault.Fault, st *Stream) []byte
	// KeepAlive is what holds a committed stream open while compactd compacts: bytes every
	// parser of the API skips or expects (an SSE comment, a ping). first is the first one.
	KeepAlive(first bool) []byte
	// Terminal reports whether an SSE event's trimmed data ends the API's stream normally; a
	// stream that stops before one has broken off.
	Terminal(data []byte) bool
}

// Words are an API's names for what a client holds.
type Words struct {
	// Compaction is what the API calls a compaction on the wire: "item" or "block".
	Compaction string
	// Held is what the client holds of a conversation ("items", "messages and compaction
	// blocks"), for a message that says it is still good.
	Held string
	// UpstreamFlag is the flag naming the API's upstream (--upstream, --anthropic-upstream).
	UpstreamFlag string
}

// Envelope is an error rendered in an API's envelope.
type Envelope interface {
	Write(w http.ResponseWriter) // status, headers (Retry-After) and body
	Body() []byte
}

// Stream is the neutral state of a turn's response: whether the client asked for a stream,
// whether compactd already committed it (sent its own 200 and keep-alives while it compacted,
// so the upstream's status can only be reported inside the stream), and where the API's event
// numbering stands.
type Stream struct {
	Streamed   bool
	Committed  bool
	ResponseID string // Responses: the response id the stream's events carry
	Seq        int    // Responses: the next free sequence number
}

// Turn is one request of one API, from Parse to the rewritten answer. The front calls its
// methods in the order listed; a Turn is used by one goroutine at a time.
type Turn interface {
	// Stream is the turn's response state, shared with the front.
	Stream() *Stream
	// Model is the model the client asked for.
	Model() string
	// Prev is the compaction the turn's conversation already applies (carried by the client or
	// applied from the memo), nil if none: a new compaction chains to it, recall reads its
	// archive.
	Prev() *engine.Opened
	// Threshold is the client's own compaction threshold on this turn (zero when it set none)
	// and whether the client speaks a compaction protocol on it (a carried compaction, a
	// context_management it sent): a turn that does not is compacted transparently under the
	// operator's policy, with nothing added to its answer. ok false: compactd never compacts this
	// turn (a previous_response_id chain keeps its history upstream).
	Threshold() (th compact.Threshold, speaks, ok bool)
	// Units is the conversation as the upstream is to see it, one unit per item or message:
	// what the memo is keyed by.
	Units() []api.Item
	// Remember applies the compaction the memo recorded for a prefix of the turn's units:
	// the conversation becomes the window kept of that prefix, the handoff, the tail kept
	// verbatim behind it, then what came after.
	Remember(env *Env, mem *engine.Memory)
	// Tokens is the conversation's size as the upstream will count it, up to limit (0: all).
	Tokens(env *Env, limit int) int
	// Speculation is what a background compaction of the turn needs (Units, Prefix, Retain);
	// the front fills in tenant, owner, conversation, auth and the figures.
	Speculation(env *Env) engine.SpecRequest
	// Compaction is the engine request that compacts the turn's conversation (Finish renders
	// the compacted conversation into the turn); transparent says the client asked for
	// nothing. The front fills in tenant, owner and auth.
	Compaction(env *Env, total int, transparent bool) engine.Request
	// Compacted puts the compaction in force: the conversation becomes its rendering, and,
	// unless transparent, the compaction goes back to the client in the answer.
	Compacted(c *engine.Compaction, transparent bool)
	// Changed reports whether Body differs from the client's bytes; the front reserves the
	// memory for a body-sized rebuild before it asks for one.
	Changed(env *Env) bool
	// Body is what the upstream reads: the client's bytes when nothing changed, else the
	// rewritten body.
	Body(env *Env) []byte
	// Rewriter rewrites the upstream's answer for the client; nil: the answer passes as the
	// upstream sent it (a stream held to the event cap only), as it would without compactd.
	Rewriter() Rewriter
}

// Rewriter rewrites the upstream's answer to a turn compactd changed, as it streams back. The
// front guards the stream (an upstream that breaks off ends in the API's error event, not a
// cut) and answers what cannot be rewritten with a 502 in the API's envelope; the Rewriter only
// edits what it is handed.
type Rewriter interface {
	// Rewrites reports whether the answer is edited at all (false: it passes through, guarded).
	Rewrites() bool
	// Carries reports that the answer is to carry a new compaction: a failure then tells the
	// client that what it holds is still valid.
	Carries() bool
	// Events wraps a successful SSE body in the API's event rewriter; nil: it passes.
	Events(body io.ReadCloser) io.ReadCloser
	// JSON rewrites a successful JSON answer (whole and valid); why says what makes it one
	// compactd cannot pass on.
	JSON(body []byte) (out []byte, why string)
	// UpstreamError renders an upstream's error answer (status, body) into a stream compactd
	// already committed.
	UpstreamError(status int, body []byte) []byte
}

// Spliced is a Turn whose changed body can go upstream as pieces (api.Splice): the client's
// bytes that stay, never copied, and the few compactd wrote between them. The front writes the
// pieces one after another as the body, so a 2 MB handoff turn is not first joined into a second
// 2 MB buffer. Splice returns nil when the turn's body must be written whole (Body).
type Spliced interface {
	Splice(env *Env) api.Splice
}

// StreamValidation is a Rewriter that says whether the front's guard ends its stream at an event
// that is not JSON. Without it a stream is validated whenever the Rewriter Rewrites: its Events
// splice into the events and must never do so blindly. A Rewriter that edits no event (Chat
// Completions, whose only rewriting is an upstream error reported into a stream compactd
// committed) says false: the upstream's events then pass as it sent them, as they would without
// compactd, and the guard still ends a stream that breaks off or sends an event over the cap.
type StreamValidation interface {
	ValidatesEvents() bool
}

// The optional abilities.

// Explicit is a turn that may ask compactd to compact and answer it itself, without calling
// the upstream's model: Responses' /v1/responses/compact and compaction_trigger, Messages'
// on-demand compaction.
type Explicit interface {
	// Explicit reports whether this turn is such a request, its trigger for logs and metrics
	// (compact_endpoint, compaction_trigger, on_demand) and the engine request to run; a
	// refusal before anything is compacted comes as a fault.
	Explicit(env *Env) (trigger string, req engine.Request, f *fault.Fault, ok bool)
	// Nothing is the fault to answer when there was nothing to summarise (nil: the request
	// allows an empty compaction, so there is always an answer).
	Nothing() *fault.Fault
	// ExplicitKeepAlive is what holds the stream open while the compaction runs (nil: the
	// adapter's KeepAlive).
	ExplicitKeepAlive() func(first bool) []byte
	// Answer writes the answer to the compaction (after the keep-alives, when committed).
	Answer(w http.ResponseWriter, c *engine.Compaction)
}

// AgentCompaction is a turn that may be an agent's own compaction request (Codex's local
// compaction, Claude Code's /compact): compactd answers it with its own summary, in exactly the
// shape the agent parses.
type AgentCompaction interface {
	// Agent reports whether the turn is one, the agent's name (X-Compactd-Agent-Compaction),
	// and the engine request that summarises what the agent asked to summarise.
	Agent(env *Env) (agent string, req engine.Request, ok bool)
	// AgentAnswer writes the summary the agent parses; note, when set, tells the model the
	// recall tool can search what the summary replaced.
	AgentAnswer(w http.ResponseWriter, c *engine.Compaction, note string)
}

// Pauser is a turn whose client asked to stop after a compaction (Messages'
// pause_after_compaction): once its threshold compaction is made, the front answers with
// AnswerPause instead of calling the model.
type Pauser interface {
	Pauses() bool
	AnswerPause(w http.ResponseWriter, c *engine.Compaction)
}

// PassThrough is a turn that may need nothing of compactd at all: it is then forwarded as it
// came and its answer passed back untouched.
type PassThrough interface {
	// PassThrough reports so; policy says the route has a threshold policy, which needs the
	// turn counted.
	PassThrough(env *Env, policy bool) bool
}

// ArchiveRef is a turn that names its archive without a compaction of its own: a turn after an
// agent compaction compactd answered, whose conversation carries compactd's signed reference
// (Env.FindRef), so its recall reads what that compaction archived.
type ArchiveRef interface {
	ArchiveRef(env *Env) (conversation, owner string, ok bool)
}

// UpstreamHeaders is a turn that edits the headers of the request the upstream gets (a beta
// flag only compactd implements, taken out).
type UpstreamHeaders interface {
	UpstreamHeaders(h http.Header)
}

// AgentNothing is an AgentCompaction whose API has its own answer for an agent compaction that
// had nothing to summarise once the stream is committed (keep-alives went out, so the turn can
// no longer go on as the agent's own request): a skip other than not_smaller, or the
// summariser's nothing-to-summarise. Without it the front answers compactionFailure's fault.
type AgentNothing interface {
	AgentNothing() *fault.Fault
}

// Deferred is a turn whose refusal Parse put off: a turn that may be an agent's compaction
// request compactd answers itself, without reading what the refusal is about (Messages: a
// context_management it does not apply to the agent's summary). Once the front goes on with the
// turn as an ordinary one (agent compaction off, not taken, or skipped before anything was
// committed) it answers Refusal, when not nil, before anything else.
type Deferred interface {
	Refusal() *fault.Fault
}

// Releaser is a turn whose skim keeps tables worth reusing (api's Release). The front calls
// Release once the turn is over, and only when nothing made from the request outlives it (no
// compaction, speculation, memo, archive or recall was handed any of it): then it reuses the
// body's buffer too.
type Releaser interface {
	Release()
}

// Env is what an adapter may use of the front for one request: the request's context and
// headers, the counter and engine, the operator's settings, and the front's services (Front).
type Env struct {
	Front
	Ctx    context.Context
	Header http.Header // the client's request headers
	// Counter counts tokens; Engine partitions, keeps windows and counts items.
	Counter *compact.Counter
	Engine  *engine.Engine
	// Retain is the budget of newest user messages kept verbatim.
	Retain  int
	Options Options
}

// Front is what the front does for an adapter during one request. The front's implementation is
// the request's own pipeline state, so an Env costs no allocation of its own.
type Front interface {
	// Open opens a compaction sealed for this API at param (the request path of its
	// encrypted_content): id is the id sent beside it ("" none), sig its signature ("" none).
	// A failure is logged and counted, and comes back as the 400 to answer.
	Open(param, encryptedContent, id, sig string) (*engine.Opened, *fault.Fault)
	// HandedOff counts one carried compaction handed off.
	HandedOff()
	// Foreign reports n compactions compactd did not issue, at where (for the warning): it
	// counts them and says whether the operator's policy rejects them (else they are dropped,
	// with a warning header).
	Foreign(n int, where string) (reject bool)
	// Conversation is the archive conversation of the turn: the one a header or key names,
	// else prev's, else a new id; Label is the same without the new id ("" when none is named).
	Conversation(key string, prev *engine.Opened) string
	Label(key string, prev *engine.Opened) string
	// Recalls reports whether the recall tool can apply to any turn (an archive, recall on);
	// FindRef finds and verifies, for the request's tenant, the signed archive reference an
	// agent compaction's summary carries (AgentRecallText) in text.
	Recalls() bool
	FindRef(text string) (conversation, owner string, ok bool)
	// ResumeFrom is the remembered skim (api.Prefix) of an earlier body of this tenant and API
	// that body begins with, proved by a keyed MAC over those bytes; nil when there is none.
	// Parse skims from it (api.Parse*From), then calls Skimmed with what it skimmed, so the
	// conversation's next request resumes from this one.
	ResumeFrom(body []byte) *api.Prefix
	Skimmed(body []byte, s interface{ Prefix() *api.Prefix })
}

// Options are the operator's settings an adapter reads.
type Options struct {
	StripCodexFields     bool // drop Codex-only fields before forwarding
	ApplyEdits           bool // Messages: compactd applies context-editing edits itself
	AllowEditedSummaries bool // Messages: accept a compaction block whose summary the client edited
}

// Faults every API's turns share, worded with the API's Words.

// UpstreamUnavailable is the 502 when the upstream could not be reached.
func UpstreamUnavailable(w Words) *fault.Fault {
	return &fault.Fault{Kind: fault.Upstream, Code: fault.CodeUpstreamUnavailable,
		Message: "compactd could not reach the upstream API; check the URL compactd is configured with (" + w.UpstreamFlag + ") and that it is reachable, then retry"}
}

// UpstreamInterrupted is the error a stream ends with when the upstream's broke off.
func UpstreamInterrupted() *fault.Fault {
	return &fault.Fault{Kind: fault.Upstream, Code: fault.CodeUpstreamInterrupted,
		Message: "the upstream API's stream ended before its answer was complete; retry the request"}
}

// UpstreamInvalid is the 502 for an upstream answer compactd cannot pass on: why says what is
// wrong with it. It tells the client the retry is safe: when the turn compacted (compacted), the
// new compaction never reached it, and everything it holds is still valid.
func UpstreamInvalid(w Words, compacted bool, why string) *fault.Fault {
	msg := "compactd could not pass on the upstream API's answer: the upstream's response " + why + "."
	if compacted {
		msg += " The compaction itself succeeded and the " + w.Held + " you hold are still valid, so retrying the turn is safe."
	} else {
		msg += " Nothing you hold is affected; retry the request."
	}
	return &fault.Fault{Kind: fault.Upstream, Code: fault.CodeUpstreamInvalid, Message: msg}
}

// CommitStream sends the 200 and headers of an SSE response compactd writes itself (a held
// turn's keep-alive, or an answer compactd renders): nothing after it may change the status.
func CommitStream(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
}

// WriteEvents writes events compactd rendered itself as the rest of an SSE response, committed
// first unless committed says a keep-alive already did, and flushes them.
func WriteEvents(w http.ResponseWriter, committed bool, events []byte) {
	if !committed {
		CommitStream(w)
	}
	_, _ = w.Write(events)
	_ = http.NewResponseController(w).Flush()
}

// AgentRecallNote opens the sentence compactd adds to the summary of an agent compaction it
// archived: it tells the model that the recall tool can search what the summary replaced. The
// turns after such a compaction carry no compaction of compactd's, only the agent's own
// continuation message with the summary, so the sentence ends with a reference compactd signed
// (tenant, conversation and owner under a server key): that, not the sentence or a session
// header, is what later turns prove the archive is theirs with (ArchiveRef, Env.FindRef).
const AgentRecallNote = "The conversation before this summary is archived verbatim by compactd"

// AgentRecallText is the note with the tool's name and the signed reference.
func AgentRecallText(tool, ref string) string {
	return AgentRecallNote + ": call the " + tool + " tool to search it when a detail (a file's content, a command's output, an exact value) is missing here (archive reference " + ref + ")."
}
