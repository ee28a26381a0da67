package turn

import (
	"encoding/json"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/fault"
	"github.com/compactd/compactd/internal/relay"
)

// The recall tool. After a compaction compactd offers the upstream's model a hidden tool that
// searches the conversation's archive; the front runs the loop (rounds, the archive search, JSON
// and SSE relaying, renumbering, errors), and a turn's Recall says how its API spells each
// step: the tool's JSON, how a round's calls are found, how a result is fed back, how usage is
// summed and how the final answer is rendered.

// Recaller is a turn that can offer the recall tool.
type Recaller interface {
	// Recall is the turn's side of the loop, or nil when recall does not apply to it (the
	// client's tool choice leaves the model no way to call the tool, the client has a tool of
	// the same name, n > 1, a prefill to continue, …). tool is the tool as the operator
	// configured it. The first round starts from the turn's conversation as Body would send
	// it.
	Recall(env *Env, tool RecallTool) Recall
}

// RecallTool is the recall tool's definition, the same in every API.
type RecallTool struct {
	Name, Description string
	// Parameters is the JSON schema of its arguments ({"query": string}).
	Parameters map[string]any
}

// Recall is one turn's side of the recall loop. One value serves one turn.
type Recall interface {
	// Request renders the next round's upstream body. On the last round the model may not
	// call the tool.
	Request(last bool) []byte
	// JSONRound reads a round's whole JSON response (valid JSON), adding its usage to the
	// sum; why says what makes it unusable.
	JSONRound(data []byte) (items []RecallItem, why string)
	// FinalJSON renders the client's answer from the final round's response and the units
	// the client sees.
	FinalJSON(data []byte, visible [][]byte) []byte
	// Event reads one event of a streamed round (valid JSON data), following the round's
	// content.
	Event(name string, data []byte) RecallEvent
	// Reindex is the edit that sets the output index of an EvItem event (ok false: it has
	// that index already, or none).
	Reindex(data []byte, index int64) (e relay.Splice, ok bool)
	// Render appends the pieces of an event for the client, its data edited by edits
	// (Reindex's), without copying the data (relay.SpliceEvent).
	Render(out [][]byte, name string, data []byte, edits []relay.Splice) [][]byte
	// Compacted reports whether the turn compacted; Prelude then renders the compaction unit,
	// which the stream carries at index 0.
	Compacted() bool
	Prelude() []byte
	// StreamRound ends a streamed round after its EvStop: its units, usage added to the sum.
	StreamRound() (items []RecallItem, why string)
	// FinalStream renders the stream's closing events.
	FinalStream(visible [][]byte) []byte
	// Answer appends a round that called the tool to the upstream history: its units (the
	// client's tool calls already taken out), then the results of the recall calls, in order.
	Answer(items []RecallItem, results []string)
	// ErrorEvents renders a failure into a stream already under way: the fault compactd
	// answers, or (status > 0) the upstream's own error answer.
	ErrorEvents(f *fault.Fault, status int, body []byte) []byte
}

// DoneStopper is a Recall whose streams end with [DONE]: DoneStops reports whether the round
// seen so far is complete, so that [DONE] is its EvStop (Chat Completions, when the upstream
// sends no usage chunk).
type DoneStopper interface{ DoneStops() bool }

// RecallItem is one output unit of a round: a Responses output item, a Messages content
// block, a Chat message's text or tool call.
type RecallItem struct {
	Raw  []byte
	Tool bool        // a tool call the caller answers (the client's or compactd's)
	Call *RecallCall // a call of the recall tool
}

// RecallCall is one call of the recall tool.
type RecallCall struct{ ID, Query string }

// RecallEventKind is what an event of a streamed round is to the loop.
type RecallEventKind int

// The kinds of event.
const (
	EvPass  RecallEventKind = iota // relayed as it is (pings, unknown events)
	EvStart                        // the response opens (created, message_start): relayed in the first round only
	EvItem                         // belongs to the output unit at Index
	EvEnd                          // closes the round (message_delta): kept by the API, never relayed
	EvStop                         // the stream's last event (response.completed, message_stop): likewise
	EvError                        // the upstream failed the stream: relayed, and the turn ends
)

// RecallEvent is the API's reading of one event.
type RecallEvent struct {
	Kind  RecallEventKind
	Index int64
	Start bool // EvItem: the event opens the unit
	Tool  bool // the unit it opens is a tool call
	Call  bool // the unit it opens is a call of the recall tool
	Data  []byte
}

// RecallAllowed reports whether a request's tools and tool_choice (raw JSON; nil when absent)
// leave room for the recall tool named name: the tool choice lets the model call it (not
// "none", not one other named tool), and the client brings no tool of that name (theirs wins;
// compactd then offers nothing). Responses and Messages name a tool at its top, Chat
// Completions in its function.
func RecallAllowed(tools, toolChoice []byte, name string) bool {
	if !toolChoiceAllows(gjson.ParseBytes(toolChoice), name) {
		return false
	}
	clash := false
	gjson.ParseBytes(tools).ForEach(func(_, t gjson.Result) bool {
		clash = t.Get("name").Str == name || t.Get("function.name").Str == name
		return !clash
	})
	return !clash
}

// toolChoiceAllows reports whether a client's tool_choice lets the model call the recall tool:
// not "none", and not one named tool (Responses: "none", {"type":"none"} or {"type":"function",
// "name":…}; Messages: {"type":"none"} or {"type":"tool","name":…}).
func toolChoiceAllows(tc gjson.Result, name string) bool {
	if tc.Type == gjson.String {
		return tc.Str != "none"
	}
	switch tc.Get("type").Str {
	case "none":
		return false
	case "tool", "function", "custom":
		return tc.Get("name").Str == name
	}
	return true
}

// MustJSON marshals a static tool definition.
func MustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // static maps of strings
	}
	return b
}
