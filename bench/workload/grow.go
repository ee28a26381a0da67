package workload

import (
	"bytes"
	"fmt"
	"sync"
)

// A growing conversation is what an agent sends: each request is the previous one with the
// turn's new items appended to its conversation array — a user prompt, an assistant message, or
// a reasoning item, a tool call and its output (2–10 KB, up to ~50 KB every ninth turn) — and
// every other byte the same. A benchmark that resends one fixed body measures a cache that
// always hits, or a skim that never could; this is the load compactd's incremental skim is for.

// Dialect is the API a growing conversation speaks.
type Dialect int

const (
	Responses Dialect = iota
	Messages
	Chat
)

// GrowOptions shape a growing conversation.
type GrowOptions struct {
	// From and To are the body sizes a conversation starts at and ends past; the next request
	// after To begins a new conversation (a new id, new content) at From.
	From, To int
	// Stream asks for an SSE answer (Responses: "stream":true; the others as their APIs spell it).
	Stream bool
	// Lead are raw Responses items put first in input (a compaction item compactd issued:
	// every later turn then is a handoff). Responses only.
	Lead [][]byte
}

// Grower is one client's stream of growing conversations; Next is safe for concurrent use, but
// a client drives one Grower, as an agent drives one conversation.
type Grower struct {
	d    Dialect
	o    GrowOptions
	seed int // distinct per Grower: its conversations' content never repeats another's

	mu    sync.Mutex
	conv  int    // conversations begun
	step  int    // the next step index of the current conversation
	items []byte // the conversation array's elements so far, comma-joined
}

// NewGrower returns the conversations of client id.
func NewGrower(d Dialect, id int, o GrowOptions) *Grower {
	return &Grower{d: d, o: o, seed: id}
}

// Clone is an independent copy of g in its present state: the same conversation, whose next
// requests are g's next requests. Side-by-side rounds give every target a clone of one state, so
// each target is sent the same bodies.
func (g *Grower) Clone() *Grower {
	g.mu.Lock()
	defer g.mu.Unlock()
	return &Grower{d: g.d, o: g.o, seed: g.seed, conv: g.conv, step: g.step, items: bytes.Clone(g.items)}
}

// Advance moves g on by one request, as Next does, without rendering the body.
func (g *Grower) Advance() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.advance()
}

// stepBase spaces the steps of different conversations apart (a 2 MB conversation takes ~600).
const stepBase = 4096

// Next is the body of the conversation's next request.
func (g *Grower) Next() []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.advance()
	return g.body()
}

// advance moves the conversation on by one request: a new one past To (mu held).
func (g *Grower) advance() {
	if g.items == nil || len(g.items) >= g.o.To {
		g.begin()
	} else {
		g.turn()
	}
}

// begin starts a new conversation: the preamble, a first prompt naming it, then steps up to From.
func (g *Grower) begin() {
	g.conv++
	g.items = g.items[:0]
	if g.d == Responses {
		for _, it := range g.o.Lead {
			g.add(it)
		}
	}
	for _, it := range Preamble() {
		g.add(it)
	}
	g.add(message("user", fmt.Sprintf("msg_first%04d%04d", g.seed, g.conv), "input_text",
		fmt.Sprintf("Conversation %d of client %d: fix the failing tests in internal/%s.", g.conv, g.seed, identifiers[(g.seed+g.conv)%len(identifiers)])))
	// Each conversation's steps are its own (no item of it repeats another's), and begin at a
	// multiple of 4, so a tool call always comes before its output.
	g.step = (g.seed*64 + g.conv) * stepBase
	for len(g.items) < g.o.From {
		g.turn()
	}
}

// turn appends one turn's items: a user prompt, an assistant message, or a reasoning item with a
// tool call and the call's output (the call and its output come in one turn: the output answers
// the call the model made in the previous response); every ninth turn adds a large tool output.
func (g *Grower) turn() {
	for {
		i := g.step
		g.step++
		for _, it := range Step(i) {
			g.add(it)
		}
		if i%4 != 1 {
			break // a call (i%4 == 1) is answered in the same turn
		}
	}
	if g.step%9 == 0 {
		callID := fmt.Sprintf("call_big%08d", g.step)
		gen := newGen(uint64(g.step) + 1<<41)
		g.add(mustJSON(map[string]any{"type": "function_call", "id": "fc_big" + callID, "call_id": callID, "name": "exec_command",
			"arguments": `{"cmd":"go test -v ./...","workdir":"/home/dev/project"}`}))
		g.add(mustJSON(map[string]any{"type": "function_call_output", "call_id": callID,
			"output": "Process exited with code 1\nOutput:\n" + gen.testLog(40<<10)}))
	}
}

// add appends one Responses item, rendered in the Grower's dialect.
func (g *Grower) add(item []byte) {
	at := len(g.items)
	if at > 0 {
		g.items = append(g.items, ',')
	}
	var ok bool
	switch g.d {
	case Messages:
		g.items, ok = renderMessages(g.items, partsOf(item))
	case Chat:
		g.items, ok = renderChat(g.items, partsOf(item))
	default:
		g.items, ok = append(g.items, item...), true
	}
	if !ok {
		g.items = g.items[:at]
	}
}

// body renders the request around the items, in the field order each client sends.
func (g *Grower) body() []byte {
	b := bytes.NewBuffer(make([]byte, 0, len(g.items)+8<<10))
	switch g.d {
	case Messages:
		fmt.Fprintf(b, `{"model":"claude-sonnet-5-5","max_tokens":32000,"stream":%t,"system":%s,"messages":[`, g.o.Stream, mustJSON(partsOf(Preamble()[0]).text))
		b.Write(g.items)
		b.WriteString(`],"tools":[{"name":"Bash","description":"Run a shell command.","input_schema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}]}`)
	case Chat:
		fmt.Fprintf(b, `{"model":"qwen3-coder","stream":%t,"messages":[`, g.o.Stream)
		b.Write(g.items)
		b.WriteString(`],"tools":[{"type":"function","function":{"name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}}],"tool_choice":"auto"}`)
	default:
		fmt.Fprintf(b, `{"model":"gpt-5.4","stream":%t,"input":[`, g.o.Stream)
		b.Write(g.items)
		b.WriteString(`],"tools":`)
		b.WriteString(tools)
		fmt.Fprintf(b, `,"tool_choice":"auto","parallel_tool_calls":true,"store":false,"prompt_cache_key":"conv-%04d-%04d"}`, g.seed, g.conv)
	}
	return b.Bytes()
}
