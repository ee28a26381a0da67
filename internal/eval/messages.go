package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/english"
)

// AnthropicVersion is the anthropic-version header the Messages sessions send (Claude Code's).
const AnthropicVersion = "2023-06-01"

// messagesUnavailable says why a configuration cannot be measured on the Messages route, or ""
// when it can. Only what compactd cannot do there belongs here, and today that is nothing: the
// facts ledger and the gap check ride in the summariser call and the sealed payload, which the
// Messages route shares with Responses, so (b) and (c) run and score whatever compactd's
// Messages compactions carry (against an older compactd whose Messages compactions carry no
// ledger they tie with (a)); and /v1/messages offers the recall tool over the archive as
// Responses does (hidden tool_use/tool_result rounds compactd answers itself), which the fake
// model calls there as on Responses, so (d) measures recall on both routes. The seam stays so
// that a configuration a route cannot run reads n/a in the report instead of silently
// measuring another configuration under its name.
func messagesUnavailable(Variant) string {
	return ""
}

// messagesTrigger is the compact_20260112 trigger of a round's last turn: the configured
// threshold, raised to the minimum compactd (like Anthropic) accepts.
func (c Config) messagesTrigger() int { return max(c.Threshold, api.MinCompactTrigger) }

// MessagesSteps is the agent steps per round of a Messages session. The trigger is at least
// api.MinCompactTrigger input tokens, far above a Responses round's threshold, so the steps are
// scaled by the same factor: a round holds as many tokens per trigger token on both routes.
func (c Config) MessagesSteps() int {
	c = c.withDefaults()
	t := c.messagesTrigger()
	return (c.Steps*t + c.Threshold - 1) / c.Threshold
}

// antMsg is one Messages message while the session builds its history: consecutive steps of
// one role share a message, the way Claude Code sends an assistant's text and tool_use together
// and a tool_result together with the user's next words.
type antMsg struct {
	Role    string            `json:"role"`
	Content []json.RawMessage `json:"content"`
}

// RenderMessages appends steps to a Messages history as a Claude Code session sends them:
// user and assistant text blocks, Read and Bash tool_use blocks in the assistant's message and
// their tool_result blocks in the next user message. callSeq numbers the tool_use ids.
func RenderMessages(history []antMsg, steps []Step, callSeq *int) []antMsg {
	add := func(role string, blocks ...json.RawMessage) {
		if n := len(history); n > 0 && history[n-1].Role == role {
			history[n-1].Content = append(history[n-1].Content, blocks...)
			return
		}
		history = append(history, antMsg{Role: role, Content: blocks})
	}
	for _, s := range steps {
		switch s.Role {
		case "user":
			add("user", js(map[string]any{"type": "text", "text": s.Text}))
		case "assistant":
			add("assistant", js(map[string]any{"type": "text", "text": s.Text}))
		case "tool":
			*callSeq++
			id := fmt.Sprintf("toolu_%05d", *callSeq)
			name, args, output := toolCall(ShapeClaudeCode, s, *callSeq)
			add("assistant", js(map[string]any{"type": "tool_use", "id": id, "name": name, "input": args}))
			result := map[string]any{"type": "tool_result", "tool_use_id": id, "content": output}
			if s.Exit != 0 {
				result["is_error"] = true
			}
			add("user", js(result))
		}
	}
	return history
}

// messagesTools are Claude Code's Read and Bash tools as a Messages request declares them.
func messagesTools() []any {
	var out []any
	for _, t := range agentTools(ShapeClaudeCode) {
		f := t.(map[string]any)
		out = append(out, map[string]any{"name": f["name"], "description": f["description"], "input_schema": f["parameters"]})
	}
	return out
}

const messagesSystem = "You are a coding agent working in the shopco/billing repository. Answer questions about this session with the exact value only."

func (s *session) messagesBody(history []antMsg, threshold bool) []byte {
	b := map[string]any{
		"model": s.cfg.Model, "max_tokens": 4096, "stream": false,
		"system":   []any{map[string]any{"type": "text", "text": messagesSystem}},
		"messages": history, "tools": messagesTools(),
		"metadata": map[string]any{"user_id": fmt.Sprintf("eval-%s-%d-%s", s.shape, s.seed, s.variant.Name)},
	}
	if threshold {
		b["context_management"] = map[string]any{"edits": []any{map[string]any{
			"type": api.EditCompact, "trigger": map[string]any{"type": "input_tokens", "value": s.cfg.messagesTrigger()}}}}
	}
	return js(b)
}

// postMessages sends one Messages turn through compactd and returns the parsed reply.
func (s *session) postMessages(ctx context.Context, history []antMsg, threshold bool) (*anthropic.BetaMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/v1/messages", bytes.NewReader(s.messagesBody(history, threshold)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", AnthropicVersion)
	if threshold {
		req.Header.Set("anthropic-beta", api.BetaCompact)
	}
	if s.cfg.APIKey != "" {
		req.Header.Set("x-api-key", s.cfg.APIKey)
	}
	data, err := s.do(req)
	if err != nil {
		return nil, err
	}
	var msg anthropic.BetaMessage
	if err := json.Unmarshal(data, &msg); err != nil {
		return nil, fmt.Errorf("the response is not a Messages message: %w", err)
	}
	if msg.Type != "message" {
		return nil, errors.New("the response is not a Messages message")
	}
	return &msg, nil
}

// runMessages is run for a Messages session. The model's replies are not kept, as on the
// Responses route; a compaction block is carried back as the Anthropic SDK carries it
// (BetaCompactionBlock.ToParam) in an assistant message, and compactd drops what precedes it.
func (s *session) runMessages(ctx context.Context, roundDone func()) ([]Asked, error) {
	rounds := Session(s.seed, s.cfg.Checkpoints[len(s.cfg.Checkpoints)-1], s.cfg.MessagesSteps(), s.cfg.Facts, s.cfg.Turns)
	var history []antMsg
	var facts []Fact
	var asked []Asked
	seq := 0
	for k, round := range rounds {
		compacted := false
		for j, turn := range round.Turns {
			history = RenderMessages(history, turn, &seq)
			last := j == len(round.Turns)-1
			if !last && history[len(history)-1].Role == "assistant" {
				// A request ending in an assistant message asks Anthropic to continue it (a
				// prefill), which agents do not send and some models refuse: the assistant's
				// words go with the next turn instead. A round's last turn ends with the user.
				continue
			}
			out, err := s.postMessages(ctx, history, last)
			if err != nil {
				return nil, fmt.Errorf("round %d turn %d: %w", k+1, j+1, err)
			}
			for _, c := range out.Content {
				if c.Type != "compaction" {
					continue
				}
				block := c.AsCompaction()
				raw, err := json.Marshal(block.ToParam())
				if err != nil {
					return nil, err
				}
				history = append(history, antMsg{Role: "assistant", Content: []json.RawMessage{raw}})
				if !block.JSON.Content.Valid() { // content null: a failed compaction, a no-op
					continue
				}
				if !compacted && s.meter != nil {
					s.meter.compacted()
				}
				compacted = true
			}
		}
		if !compacted {
			return nil, fmt.Errorf("round %d did not compact: its history stayed under the Messages trigger of %d input tokens; raise --steps", k+1, s.cfg.messagesTrigger())
		}
		facts = append(facts, round.Facts...)
		roundDone()
		if !slices.Contains(s.cfg.Checkpoints, k+1) {
			continue
		}
		raw := rawLogText(history)
		for _, f := range facts {
			q := append(slices.Clip(history), antMsg{Role: "user", Content: []json.RawMessage{js(map[string]any{"type": "text", "text": f.Question})}})
			s.armTap()
			out, err := s.postMessages(ctx, q, false)
			turn := s.disarmTap()
			if err != nil {
				return nil, fmt.Errorf("after %s, asking %q: %w", english.Count(k+1, "compaction"), f.Question, err)
			}
			var got strings.Builder
			for _, c := range out.Content {
				if c.Type == "text" {
					got.WriteString(c.Text)
				}
			}
			asked = append(asked, Asked{Session: s.index + 1, Shape: s.shape, Compactions: k + 1, Fact: f, Got: got.String(),
				Correct: Correct(got.String(), f.Answer)}.grepped(raw, turn))
		}
	}
	return asked, nil
}
