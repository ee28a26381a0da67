package session

import (
	"context"
	"errors"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// OpenAIGapChecker is a GapChecker over any OpenAI-compatible Responses endpoint (OpenAI itself,
// or compactd's own proxy in front of another backend).
type OpenAIGapChecker struct {
	client responses.ResponseService
	model  string
	// MaxOutputTokens bounds each answer (default 1200).
	MaxOutputTokens int64
}

// NewOpenAIGapChecker builds a checker. baseURL may be "" for the SDK default; the key is sent as
// a bearer token and never logged.
func NewOpenAIGapChecker(baseURL, apiKey, model string, opts ...option.RequestOption) *OpenAIGapChecker {
	o := []option.RequestOption{option.WithAPIKey(apiKey), option.WithMaxRetries(2)}
	if baseURL != "" {
		o = append(o, option.WithBaseURL(baseURL))
	}
	o = append(o, opts...)
	c := openai.NewClient(o...)
	return &OpenAIGapChecker{client: c.Responses, model: model, MaxOutputTokens: 1200}
}

// gapCheckInstructions is fixed per category, so every excerpt of a category shares a cacheable
// prefix at the summariser.
func gapCheckInstructions(category string) string {
	return `You are a gap checker for a session handover between coding agents.
The input is an excerpt of a coding agent's raw session log: user messages, reasoning, tool calls
and their outputs. A separate extraction already keeps the user messages verbatim, reasoning
excerpts, the list of modified files and each command with its exit code. Your job is to find
what that extraction misses in one category only: ` + category + `.

Rules:
- One finding per line, each starting with "- ". No headings, no preamble, no closing remarks.
- Each finding must stand alone: name the file, function, command, value or error it is about,
  and quote exact strings (paths, flags, numbers, error messages) rather than paraphrasing them.
- Report only what the excerpt shows; do not guess or give advice.
- If nothing in the excerpt belongs to the category, answer exactly "- none".`
}

// Check asks the model for findings of one category in one excerpt.
func (c *OpenAIGapChecker) Check(ctx context.Context, category, rawExcerpt string) ([]string, error) {
	resp, err := c.client.New(ctx, responses.ResponseNewParams{
		Model:           c.model,
		Instructions:    openai.String(gapCheckInstructions(category)),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String(rawExcerpt)},
		MaxOutputTokens: openai.Int(c.MaxOutputTokens),
		Store:           openai.Bool(false),
	})
	if err != nil {
		return nil, err
	}
	text := resp.OutputText()
	if strings.TrimSpace(text) == "" {
		return nil, errors.New("summariser returned no text")
	}
	return ParseFindingLines(text), nil
}
