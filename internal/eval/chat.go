package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/english"
)

// The Chat Completions route (dialect.Chat): a generic Chat agent (ShapeChatAgent) on
// /v1/chat/completions. Chat Completions has no compaction protocol, so the client sends its
// whole history every turn and asks for nothing; the in-process compactd compacts with the Chat
// route's threshold policy (serve's --compact-threshold chat=N, here N = Config.Threshold), which
// is transparent: the upstream sees the compacted conversation, the client its usual answer, and
// compactd says what it did in the X-Compactd-Compaction response header ("compacted; …" on the
// turn it compacted, "applied; …" on the turns the conversation memo re-applied it to). A round
// has compacted when a turn of it came back "compacted".

// compactionHeader is compactd's response header on a transparent turn (proxy/compaction.go).
const compactionHeader = "X-Compactd-Compaction"

// chatTools are the chat agent's tools as a Chat Completions request declares them: the
// read_file and run_shell_command functions of Qwen Code and its kin.
func chatTools() []any {
	str := map[string]any{"type": "string"}
	fn := func(name, desc string, props map[string]any, required ...string) any {
		return map[string]any{"type": "function", "function": map[string]any{"name": name, "description": desc,
			"parameters": map[string]any{"type": "object", "properties": props, "required": required}}}
	}
	return []any{
		fn("read_file", "Reads a file from the local filesystem", map[string]any{"absolute_path": str}, "absolute_path"),
		fn("run_shell_command", "Runs a shell command with bash -c", map[string]any{"command": str, "description": str}, "command"),
	}
}

// chatToolCall is a tool step as the chat agent calls it and sees its output: a file's contents
// as they are, a command's result in Qwen Code's "Command / Directory / Stdout / Stderr /
// Error / Exit Code" layout.
func chatToolCall(s Step) (name string, args map[string]any, output string) {
	if s.Action == "read" {
		return "read_file", map[string]any{"absolute_path": "/home/dev/project/" + s.Target}, s.Output
	}
	errLine := "(none)"
	if s.Exit != 0 {
		errLine = fmt.Sprintf("exit status %d", s.Exit)
	}
	return "run_shell_command", map[string]any{"command": s.Target, "description": "Run " + strings.Fields(s.Target)[0]},
		fmt.Sprintf("Command: %s\nDirectory: (root)\nStdout: %s\nStderr: (empty)\nError: %s\nExit Code: %d\nSignal: (none)\nBackground PIDs: (none)\nProcess Group PGID: (none)",
			s.Target, s.Output, errLine, s.Exit)
}

// RenderChat appends steps to a Chat Completions history as a Chat agent sends them: user and
// assistant string messages; a tool step is an assistant message with one tool_calls entry
// (content null) and the "tool" message answering it. callSeq numbers the tool call ids.
func RenderChat(history []json.RawMessage, steps []Step, callSeq *int) []json.RawMessage {
	for _, s := range steps {
		switch s.Role {
		case "user", "assistant":
			history = append(history, js(map[string]any{"role": s.Role, "content": s.Text}))
		case "tool":
			*callSeq++
			id := fmt.Sprintf("call_%05d", *callSeq)
			name, args, output := chatToolCall(s)
			history = append(history,
				js(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
					"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": string(js(args))}}}}),
				js(map[string]any{"role": "tool", "tool_call_id": id, "content": output}))
		}
	}
	return history
}

func (s *session) chatBody(history []json.RawMessage) []byte {
	return js(map[string]any{"model": s.cfg.Model, "messages": history, "tools": chatTools(), "stream": false})
}

// postChat sends one Chat turn through compactd; compacted reports the X-Compactd-Compaction
// header saying compactd compacted this turn.
func (s *session) postChat(ctx context.Context, history []json.RawMessage) (body []byte, compacted bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/v1/chat/completions", bytes.NewReader(s.chatBody(history)))
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	if s.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.cfg.APIKey)
	}
	body, h, err := s.doHeader(req)
	if err != nil {
		return nil, false, err
	}
	if gjson.GetBytes(body, "object").Str != "chat.completion" {
		return nil, false, fmt.Errorf("the response is not a chat.completion")
	}
	return body, strings.HasPrefix(h.Get(compactionHeader), "compacted"), nil
}

const chatSystem = "You are a coding agent working in the shopco/billing repository. Answer questions about this session with the exact value only."

// runChat is run for a Chat Completions session. The model's replies are not kept, as on the
// other routes; nothing comes back to carry (the compaction lives in compactd's memo), so the
// history is the session's own messages only. A turn is sent when the history ends with a
// user or tool message: one ending with the assistant's words would ask the model to continue
// them, which agents do not send; those words go with the next turn.
func (s *session) runChat(ctx context.Context, roundDone func()) ([]Asked, error) {
	rounds := Session(s.seed, s.cfg.Checkpoints[len(s.cfg.Checkpoints)-1], s.cfg.Steps, s.cfg.Facts, s.cfg.Turns)
	history := []json.RawMessage{js(map[string]any{"role": "system", "content": chatSystem})}
	var facts []Fact
	var asked []Asked
	seq := 0
	for k, round := range rounds {
		compacted := 0
		for j, turn := range round.Turns {
			history = RenderChat(history, turn, &seq)
			if j < len(round.Turns)-1 && gjson.GetBytes(history[len(history)-1], "role").Str == "assistant" {
				continue
			}
			_, c, err := s.postChat(ctx, history)
			if err != nil {
				return nil, fmt.Errorf("round %d turn %d: %w", k+1, j+1, err)
			}
			if c {
				compacted++
				if s.meter != nil {
					s.meter.compacted()
				}
			}
		}
		if compacted == 0 {
			return nil, fmt.Errorf("round %d did not compact: its history stayed under the Chat route's threshold (--threshold %d; a compactd of yours needs --compact-threshold chat=N); lower it or raise --steps", k+1, s.cfg.Threshold)
		}
		s.extra += compacted - 1 // a round the policy compacted more than once
		facts = append(facts, round.Facts...)
		roundDone()
		if !slices.Contains(s.cfg.Checkpoints, k+1) {
			continue
		}
		raw := rawLogText(history)
		for _, f := range facts {
			q := append(slices.Clip(history), js(map[string]any{"role": "user", "content": f.Question}))
			s.armTap()
			out, c, err := s.postChat(ctx, q)
			turn := s.disarmTap()
			if err != nil {
				return nil, fmt.Errorf("after %s, asking %q: %w", english.Count(k+1, "compaction"), f.Question, err)
			}
			if c {
				s.asking++
				if s.meter != nil {
					s.meter.compacted()
				}
			}
			got := gjson.GetBytes(out, "choices.0.message.content").Str
			asked = append(asked, Asked{Session: s.index + 1, Shape: s.shape, Compactions: k + 1, Fact: f, Got: got,
				Correct: Correct(got, f.Answer)}.grepped(raw, turn))
		}
	}
	return asked, nil
}
