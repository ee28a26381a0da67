// Package workload builds the request bodies compactd's benchmarks send: OpenAI Responses requests
// shaped like a coding agent's turns (Codex CLI 0.169, see /work/shared/fixtures): developer
// instructions, environment context, user prompts, reasoning items with ciphertext, exec_command
// function calls and their outputs (source code, test logs), assistant messages.
//
// The shape matters more than the exact bytes: skimming cost scales with the number of items and
// strings, token counting with how prose-like the text is, and a body of one huge string would
// flatter both. Everything is deterministic (a fixed-seed PCG), so two runs send the same bytes
// and micro-benchmarks in different packages measure the same inputs. It imports nothing from
// compactd, so any package's internal tests may use it.
package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// BodyOptions are the top-level fields of a request built by Body.
type BodyOptions struct {
	Model  string // default "gpt-5.4"
	Stream bool
	// CompactThreshold adds context_management [{"type":"compaction","compact_threshold":N}]
	// when > 0, which makes compactd skim and count the request.
	CompactThreshold int
	PromptCacheKey   string // default a fixed UUID-like key
}

// words is the vocabulary of generated prose: agent-session English.
var words = strings.Fields(`the a to of and in is that for it with on this as be are we not
file test function error handler request response should will can value return type config path
build run fix change add update remove check use when then if else before after because so
compaction summary token context model stream item input output proxy upstream client server
latency budget cache prefix history turn session message tool call result pass fail line module
package import struct field method interface slice map string byte int parse encode decode`)

// identifiers is the vocabulary of generated code.
var identifiers = strings.Fields(`ctx req resp err body items buf n i j k out cfg srv log key id
seq total limit count raw data w r t s p c opts tokens window summary payload sealed`)

type gen struct{ r *rand.Rand }

func newGen(seed uint64) *gen { return &gen{r: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))} }

func (g *gen) word(ws []string) string { return ws[g.r.IntN(len(ws))] }

// prose returns about n bytes of sentences.
func (g *gen) prose(n int) string {
	var b strings.Builder
	for b.Len() < n {
		k := 6 + g.r.IntN(12)
		for i := range k {
			w := g.word(words)
			if i == 0 {
				w = strings.ToUpper(w[:1]) + w[1:]
			}
			b.WriteString(w)
			if i < k-1 {
				b.WriteByte(' ')
			}
		}
		b.WriteString(". ")
	}
	return b.String()
}

// code returns about n bytes of Go-like source with line numbers, as `nl -ba`/`sed -n` output.
func (g *gen) code(n int) string {
	var b strings.Builder
	for line := 1; b.Len() < n; line++ {
		fmt.Fprintf(&b, "%6d\t", line)
		switch g.r.IntN(6) {
		case 0:
			fmt.Fprintf(&b, "func (%s *%s) %s(%s context.Context, %s []byte) (int, error) {\n",
				g.word(identifiers), strings.ToUpper(g.word(identifiers)[:1])+"x", strings.ToUpper(g.word(identifiers)[:1])+g.word(identifiers), g.word(identifiers), g.word(identifiers))
		case 1:
			fmt.Fprintf(&b, "\tif %s != nil {\n\t\treturn 0, fmt.Errorf(\"%s %s: %%w\", %s)\n\t}\n", g.word(identifiers), g.word(words), g.word(words), g.word(identifiers))
		case 2:
			fmt.Fprintf(&b, "\t%s := %s.%s(%s, %d)\n", g.word(identifiers), g.word(identifiers), strings.ToUpper(g.word(words)[:1])+g.word(words), g.word(identifiers), g.r.IntN(4096))
		case 3:
			fmt.Fprintf(&b, "\t// %s\n", g.prose(40+g.r.IntN(60)))
		case 4:
			fmt.Fprintf(&b, "\tfor _, %s := range %s {\n\t\t%s += len(%s.Raw)\n\t}\n", g.word(identifiers), g.word(identifiers), g.word(identifiers), g.word(identifiers))
		default:
			b.WriteString("}\n")
		}
	}
	return b.String()
}

// testLog returns about n bytes of `go test` output.
func (g *gen) testLog(n int) string {
	var b strings.Builder
	for b.Len() < n {
		name := "Test" + strings.ToUpper(g.word(words)[:1]) + g.word(words) + strings.ToUpper(g.word(words)[:1]) + g.word(words)
		fmt.Fprintf(&b, "=== RUN   %s\n--- PASS: %s (0.%02ds)\n", name, name, g.r.IntN(100))
		if g.r.IntN(8) == 0 {
			fmt.Fprintf(&b, "    %s_test.go:%d: %s\n", g.word(identifiers), 10+g.r.IntN(400), g.prose(50))
		}
	}
	b.WriteString("PASS\nok  \tgithub.com/compactd/compactd/proxy\t1.234s\n")
	return b.String()
}

// ciphertext returns n bytes of base64-looking reasoning ciphertext.
func (g *gen) ciphertext(n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[g.r.IntN(len(alphabet))]
	}
	return "gAAAAAB" + string(b)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func message(role, id, partType, text string) []byte {
	m := map[string]any{"type": "message", "role": role, "id": id,
		"content": []any{map[string]any{"type": partType, "text": text}}}
	if role == "assistant" {
		m["status"] = "completed"
		m["content"] = []any{map[string]any{"type": partType, "text": text, "annotations": []any{}}}
	}
	return mustJSON(m)
}

// Preamble is the first items of every Codex session: the developer instructions and the
// environment context. Agents send them on every turn.
func Preamble() [][]byte {
	g := newGen(1)
	return [][]byte{
		message("developer", "msg_dev0001", "input_text", "You are a coding agent running in the Codex CLI, a terminal-based coding assistant. "+g.prose(6000)),
		message("developer", "msg_dev0002", "input_text", "<skills_instructions>\n## Skills\n"+g.prose(1500)+"\n</skills_instructions>"),
		message("user", "msg_env0001", "input_text", "<environment_context>\n  <cwd>/home/dev/project</cwd>\n  <shell>bash</shell>\n  <current_date>2026-11-29</current_date>\n  <timezone>Etc/UTC</timezone>\n</environment_context>"),
	}
}

// Step returns the items of agent step i (one to three items, a few KB): a user prompt, a
// reasoning item plus exec_command call, the command's output, or an assistant message, in a
// fixed rotation. Steps are deterministic in i and distinct for distinct i.
func Step(i int) [][]byte {
	g := newGen(uint64(i) + 1000)
	callID := fmt.Sprintf("call_%08d", i)
	switch i % 4 {
	case 0:
		return [][]byte{message("user", fmt.Sprintf("msg_u%08d", i), "input_text", g.prose(200+g.r.IntN(600)))}
	case 1:
		return [][]byte{
			mustJSON(map[string]any{"type": "reasoning", "id": fmt.Sprintf("rs_%08d", i),
				"summary":           []any{map[string]any{"type": "summary_text", "text": "**" + g.prose(30) + "** " + g.prose(200)}},
				"encrypted_content": g.ciphertext(1200 + g.r.IntN(1200))}),
			mustJSON(map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%08d", i), "call_id": callID, "name": "exec_command",
				"arguments": fmt.Sprintf(`{"cmd":"sed -n 1,%dp internal/%s/%s.go","workdir":"/home/dev/project","yield_time_ms":10000}`, 100+g.r.IntN(300), g.word(identifiers), g.word(words))}),
		}
	case 2:
		out := ""
		if g.r.IntN(3) == 0 {
			out = g.testLog(1500 + g.r.IntN(4000))
		} else {
			out = g.code(2000 + g.r.IntN(8000))
		}
		return [][]byte{mustJSON(map[string]any{"type": "function_call_output", "call_id": fmt.Sprintf("call_%08d", i-1),
			"output": "Chunk ID: " + callID + "\nWall time: 0.0123 seconds\nProcess exited with code 0\nOutput:\n" + out})}
	default:
		return [][]byte{message("assistant", fmt.Sprintf("msg_a%08d", i), "output_text", g.prose(150+g.r.IntN(500)))}
	}
}

// Items returns the preamble plus as many steps as fit in about size bytes of item JSON (below
// 32 KB only the environment context of the preamble, so a small turn stays small). The same size
// always gives the same items.
func Items(size int) [][]byte {
	items := Preamble()
	if size < 32<<10 {
		items = items[2:]
	}
	total := 0
	for _, it := range items {
		total += len(it) + 1
	}
	for i := 0; total < size; i++ {
		for _, it := range Step(i) {
			items = append(items, it)
			total += len(it) + 1
		}
	}
	return items
}

// NewItem returns a fresh function_call_output unique to n, the item a new turn adds to a
// history that was seen before.
func NewItem(n int) []byte {
	g := newGen(uint64(n) + 1<<40)
	return mustJSON(map[string]any{"type": "function_call_output", "call_id": fmt.Sprintf("call_new%08d", n),
		"output": "Process exited with code 0\nOutput:\n" + g.testLog(600)})
}

// NewRound returns a fresh tool round trip unique to n — an exec_command function_call and its
// function_call_output — as one fragment of an input array (the two items comma-joined), the
// items a new turn adds to a history that was seen before. Unlike NewItem alone, the output
// answers a call, as the real API requires ("No tool call found for function call output").
func NewRound(n int) []byte {
	callID := fmt.Sprintf("call_new%08d", n)
	call := mustJSON(map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_new%08d", n), "call_id": callID, "name": "exec_command",
		"arguments": `{"cmd":"go test ./...","workdir":"/home/dev/project","yield_time_ms":10000}`})
	return append(append(call, ','), NewItem(n)...)
}

// Answered returns items with the output of a trailing function_call appended, if the history
// ends in one (Items may stop right after a call): a history that more items will follow must
// have answered every call, or the real API refuses it ("No tool output found for function
// call").
func Answered(items [][]byte) [][]byte {
	if len(items) == 0 {
		return items
	}
	var last struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
	}
	if json.Unmarshal(items[len(items)-1], &last) != nil || last.Type != "function_call" {
		return items
	}
	return append(items[:len(items):len(items)], mustJSON(map[string]any{"type": "function_call_output", "call_id": last.CallID,
		"output": "Process exited with code 0\nOutput:\nok"}))
}

// tools is the tools array Codex sends (abridged to its most common tool).
const tools = `[{"type":"function","name":"exec_command","description":"Runs a command in a PTY, returning output or a session ID for ongoing interaction.","strict":false,"parameters":{"type":"object","properties":{"cmd":{"type":"string","description":"Shell command to execute."},"workdir":{"type":"string","description":"Optional working directory to run the command in; defaults to the turn cwd."},"yield_time_ms":{"type":"number","description":"How long to wait (in milliseconds) for output before yielding."}},"required":["cmd"],"additionalProperties":false}},{"type":"function","name":"apply_patch","description":"Use the apply_patch tool to edit files.","strict":false,"parameters":{"type":"object","properties":{"input":{"type":"string","description":"The entire contents of the apply_patch command"}},"required":["input"],"additionalProperties":false}}]`

// Body renders a Responses request around items, in Codex's field order.
func Body(items [][]byte, o BodyOptions) []byte {
	if o.Model == "" {
		o.Model = "gpt-5.4"
	}
	if o.PromptCacheKey == "" {
		o.PromptCacheKey = "01a22679-79f0-7c11-bef8-f2764cce1ad3"
	}
	n := 1024
	for _, it := range items {
		n += len(it) + 1
	}
	b := make([]byte, 0, n)
	b = fmt.Appendf(b, `{"model":%q,"stream":%t,"input":[`, o.Model, o.Stream)
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	b = append(b, `],"tools":`...)
	b = append(b, tools...)
	b = append(b, `,"tool_choice":"auto","parallel_tool_calls":true,"reasoning":{"summary":"auto"},"store":false,"include":["reasoning.encrypted_content"]`...)
	if o.CompactThreshold > 0 {
		b = fmt.Appendf(b, `,"context_management":[{"type":"compaction","compact_threshold":%d}]`, o.CompactThreshold)
	}
	b = fmt.Appendf(b, `,"prompt_cache_key":%q}`, o.PromptCacheKey)
	return b
}

// Request is Body(Items(size), o): a request of about size bytes.
func Request(size int, o BodyOptions) []byte {
	return Body(Items(size-len(tools)-300), o)
}

// The same agent session in the other two dialects, for the benchmarks of the Messages and Chat
// Completions routes: each step's items become what Claude Code (Anthropic Messages) or an agent
// on a local model (Chat Completions) would send for it, so the body has as many messages,
// blocks and strings per byte as the Responses one.

// itemParts is one Responses item, read back: its kind, role, text, call id, tool name and
// arguments.
type itemParts struct {
	kind, role, text, callID, name, args string
}

func partsOf(item []byte) itemParts {
	var v struct {
		Type      string `json:"type"`
		Role      string `json:"role"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Output    string `json:"output"`
		Content   []struct {
			Text string `json:"text"`
		} `json:"content"`
		Summary []struct {
			Text string `json:"text"`
		} `json:"summary"`
	}
	if err := json.Unmarshal(item, &v); err != nil {
		panic(err)
	}
	p := itemParts{kind: v.Type, role: v.Role, callID: v.CallID, name: v.Name, args: v.Arguments, text: v.Output}
	for _, c := range v.Content {
		p.text += c.Text
	}
	for _, s := range v.Summary {
		p.text += s.Text
	}
	return p
}

// sessionBody renders the preamble and then steps 0, 1, … with render (which appends one item's
// rendering and reports whether it rendered anything) until about size bytes, between head and
// tail.
func sessionBody(size int, head, tail string, render func(dst []byte, p itemParts) ([]byte, bool)) []byte {
	b := make([]byte, 0, size+16<<10)
	b = append(b, head...)
	first := true
	add := func(item []byte) {
		at := len(b)
		if !first {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = render(b, partsOf(item)); !ok {
			b = b[:at]
			return
		}
		first = false
	}
	for _, it := range Preamble() {
		add(it)
	}
	for i := 0; len(b) < size-len(tail); i++ {
		for _, it := range Step(i) {
			add(it)
		}
	}
	return append(b, tail...)
}

// MessagesRequest is an Anthropic Messages request of about size bytes: the session's
// instructions as the system prompt, user prompts as text, exec_command calls as tool_use blocks
// and their outputs as tool_result blocks, the reasoning summaries as thinking blocks.
func MessagesRequest(size int) []byte {
	system := partsOf(Preamble()[0]).text
	head := string(mustJSON(map[string]any{"model": "claude-sonnet-5-5", "max_tokens": 32000, "system": system}))
	head = head[:len(head)-1] + `,"messages":[`
	return sessionBody(size, head, `]}`, renderMessages)
}

// renderMessages appends item p as Claude Code would send it on the Messages API (false: it
// sends nothing for it).
func renderMessages(b []byte, p itemParts) ([]byte, bool) {
	{
		var m map[string]any
		switch {
		case p.kind == "message" && p.role == "developer":
			return b, false // the system prompt
		case p.kind == "message":
			m = map[string]any{"role": p.role, "content": []any{map[string]any{"type": "text", "text": p.text}}}
		case p.kind == "reasoning":
			m = map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "thinking", "thinking": p.text, "signature": "sig" + p.text[:min(16, len(p.text))]}}}
		case p.kind == "function_call":
			m = map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_" + p.callID, "name": "Bash",
				"input": json.RawMessage(p.args)}}}
		case p.kind == "function_call_output":
			m = map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_" + p.callID, "content": p.text}}}
		default:
			return b, false
		}
		return append(b, mustJSON(m)...), true
	}
}

// CountTokensRequest is MessagesRequest as a count_tokens request (no max_tokens).
func CountTokensRequest(size int) []byte {
	b := MessagesRequest(size)
	return bytes.Replace(b, []byte(`"max_tokens":32000,`), nil, 1)
}

// ChatRequest is a Chat Completions request of about size bytes: the instructions as the system
// message, user and assistant messages, exec_command calls as assistant tool_calls and their
// outputs as tool messages.
func ChatRequest(size int) []byte {
	head := `{"model":"qwen3-coder","stream":false,"messages":[`
	return sessionBody(size, head, `],"tool_choice":"auto"}`, renderChat)
}

// renderChat appends item p as an agent on Chat Completions would send it (false: nothing).
func renderChat(b []byte, p itemParts) ([]byte, bool) {
	{
		var m map[string]any
		switch p.kind {
		case "message":
			role := p.role
			if role == "developer" {
				role = "system"
			}
			m = map[string]any{"role": role, "content": p.text}
		case "function_call":
			m = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": p.callID, "type": "function",
				"function": map[string]any{"name": p.name, "arguments": p.args}}}}
		case "function_call_output":
			m = map[string]any{"role": "tool", "tool_call_id": p.callID, "content": p.text}
		default:
			return b, false // reasoning: Chat Completions carries none back
		}
		return append(b, mustJSON(m)...), true
	}
}
