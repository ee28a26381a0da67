// Package summarizer is compactd's client for the summariser LLM: it turns a rendered transcript
// into a dense handoff summary by calling any OpenAI-compatible server (OpenAI, vLLM, Ollama,
// LiteLLM) over the Responses API or Chat Completions, or an Anthropic-compatible one over the
// Messages API.
//
// It knows nothing of proxying, items or sealing: the input is a list of already rendered text
// entries, the output is the summary text with usage. Transcripts larger than the summariser's
// context window are summarised in order, chunk by chunk, each call folding in the previous
// call's summary, so a long session never fails for being long.
package summarizer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/compactd/compactd/internal/dialect"
)

// Auth carries the caller's credentials, forwarded when no API key is configured. A summariser
// reads only the field of its own wire API, so a credential meant for one provider never goes to
// the other's host.
type Auth struct {
	// Header is for the OpenAI wire APIs (responses, chat): the values of "Authorization" and/or
	// "api-key" / "OpenAI-Organization" / "OpenAI-Project" as received.
	Header http.Header
	// AnthropicHeader is for the Messages API: "X-Api-Key", or "Authorization" (a bearer token)
	// when there is no X-Api-Key; an "anthropic-beta" value is forwarded only for its oauth-*
	// flags, which Anthropic requires beside an OAuth bearer token.
	AnthropicHeader http.Header
}

// Request is one summarisation.
type Request struct {
	Model        string   // the request's own model; used unless Config.Model is set
	Entries      []string // transcript entries, oldest first ("[user] …", "[tool output] …")
	Instructions string   // replaces DefaultPrompt when non-empty (Anthropic's `instructions`)
	Previous     string   // an earlier summary to fold in (chained compactions)
	Auth         Auth
}

// Usage is token usage summed over every call a summarisation made.
type Usage struct {
	InputTokens, OutputTokens, TotalTokens, CachedTokens, ReasoningTokens int64
}

func (u *Usage) add(o Usage) {
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.TotalTokens += o.TotalTokens
	u.CachedTokens += o.CachedTokens
	u.ReasoningTokens += o.ReasoningTokens
}

// Result is a finished summarisation.
type Result struct {
	Summary string
	Model   string // the model the summariser reported (the requested one if it reported none)
	Usage   Usage
	Calls   int // LLM calls made: one per chunk, plus any retried after a context overflow
}

// Summarizer compresses a transcript into a summary. Implementations are safe for concurrent
// use.
//
// Summarize returns one of: a Result; ErrNothingToSummarize; the caller's context error when ctx
// ends; or an *Error (which matches ErrUnavailable) for every other failure. On error the Result
// still carries Calls and Usage of the calls made, for accounting.
type Summarizer interface {
	Summarize(ctx context.Context, req Request) (Result, error)
}

// AnthropicVersion is the anthropic-version header of Messages API calls. The SDK's own default
// is a newer version; 2023-06-01 is the one Claude Code sends and every Anthropic-compatible
// server (gateways, LiteLLM, Bedrock and Vertex proxies) accepts, and the fields the summariser
// sends and reads (model, max_tokens, system, messages; text blocks, stop_reason, usage) are the
// same in both.
const AnthropicVersion = "2023-06-01"

// Defaults applied by New to zero Config fields.
const (
	DefaultContextTokens   = 128000
	DefaultMaxOutputTokens = 8192
	DefaultTimeout         = 120 * time.Second
)

// Config configures the summariser client.
type Config struct {
	// BaseURL is required and includes /v1: "https://api.openai.com/v1",
	// "http://127.0.0.1:8000/v1", "https://api.anthropic.com/v1". For the messages API a URL
	// without the /v1 (as ANTHROPIC_BASE_URL is written) gets one: calls go to BaseURL/messages.
	BaseURL string
	APIKey  string // if empty, forward req.Auth headers instead (x-api-key for messages)
	Model   string // if empty, use req.Model
	// API is the summariser's wire API: dialect.Responses (the default, POST /responses),
	// dialect.Chat (POST /chat/completions) or dialect.Messages (Anthropic's POST /messages,
	// x-api-key).
	API             dialect.Name
	ContextTokens   int              // summariser's context window; default 128000
	MaxOutputTokens int              // default 8192
	Timeout         time.Duration    // per call; default 120s
	HTTPClient      *http.Client     // optional; default http.DefaultClient
	CountTokens     func(string) int // optional exact counter; default EstimateTokens
}

// forwardedHeaders are the caller credentials copied onto OpenAI-API summariser calls when no
// APIKey is configured. Nothing else of the caller's request is forwarded.
var forwardedHeaders = []string{"Authorization", "Api-Key", "OpenAI-Organization", "OpenAI-Project"}

const (
	// callOverhead covers per-message framing tokens (roles, separators) that counting the
	// texts alone misses.
	callOverhead = 32
	// minChunkTokens is the smallest transcript budget worth a call; below it the context
	// window is misconfigured (or the instructions or previous summary fill it).
	minChunkTokens = 64
	// maxOverflowSplits bounds how often one summarisation re-splits a chunk the server said
	// was over its context window (the token estimate was too low).
	maxOverflowSplits = 4
)

type client struct {
	cfg       Config
	count     func(string) int
	responses responses.ResponseService
	chat      openai.ChatCompletionService
	messages  anthropic.MessageService
}

// New validates cfg, applies defaults, and returns a Summarizer. It reads no environment
// variables: the SDKs' OPENAI_API_KEY / OPENAI_BASE_URL and ANTHROPIC_API_KEY /
// ANTHROPIC_BASE_URL defaults would otherwise override the forwarded caller credentials or send
// them to the wrong host.
func New(cfg Config) (Summarizer, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("summarizer: BaseURL must be an absolute http(s) URL, got %q", cfg.BaseURL)
	}
	if cfg.API == "" {
		cfg.API = dialect.Responses
	} else if !cfg.API.Valid() {
		return nil, fmt.Errorf("summarizer: API must be %q, %q or %q, got %q", dialect.Responses, dialect.Chat, dialect.Messages, cfg.API)
	}
	if cfg.ContextTokens == 0 {
		cfg.ContextTokens = DefaultContextTokens
	}
	if cfg.MaxOutputTokens == 0 {
		cfg.MaxOutputTokens = DefaultMaxOutputTokens
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.ContextTokens < 0 || cfg.MaxOutputTokens < 0 || cfg.Timeout < 0 {
		return nil, errors.New("summarizer: ContextTokens, MaxOutputTokens and Timeout must not be negative")
	}
	if cfg.MaxOutputTokens >= cfg.ContextTokens {
		return nil, fmt.Errorf("summarizer: MaxOutputTokens (%d) must be below ContextTokens (%d)", cfg.MaxOutputTokens, cfg.ContextTokens)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	c := &client{cfg: cfg, count: cfg.CountTokens}
	if c.count == nil {
		c.count = EstimateTokens
	}
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithHTTPClient(cfg.HTTPClient),
		// The proxy owns retry policy; SDK retries would multiply its attempts and hide 429s.
		option.WithMaxRetries(0),
		option.WithMiddleware(limitAnswer(maxAnswerBytes(cfg.MaxOutputTokens))),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.API == dialect.Messages {
		c.messages = anthropic.NewMessageService(anthropicOptions(cfg)...)
		return c, nil
	}
	c.responses = responses.NewResponseService(opts...)
	c.chat = openai.NewChatCompletionService(opts...)
	return c, nil
}

// anthropicOptions are the Messages service's options. NewMessageService, unlike
// anthropic.NewClient, reads nothing from the environment or a profile on disk.
func anthropicOptions(cfg Config) []antoption.RequestOption {
	base := strings.TrimRight(cfg.BaseURL, "/")
	base = strings.TrimSuffix(base, "/v1") // the SDK posts to v1/messages under its base
	opts := []antoption.RequestOption{
		antoption.WithBaseURL(base + "/"),
		antoption.WithHTTPClient(cfg.HTTPClient),
		antoption.WithMaxRetries(0), // the proxy owns retry policy, as for the OpenAI APIs
		antoption.WithHeader("anthropic-version", AnthropicVersion),
		// The per-call timeout is compactd's; set here, it also keeps the SDK from refusing a
		// large max_tokens as "streaming is required" by its own estimate.
		antoption.WithRequestTimeout(cfg.Timeout),
		antoption.WithMiddleware(limitAnswerAnthropic(maxAnswerBytes(cfg.MaxOutputTokens))),
	}
	if cfg.APIKey != "" {
		// As x-api-key, the header every Anthropic-compatible server reads (Claude Code sends
		// it); this SDK's WithAPIKey would send it as a bearer token.
		opts = append(opts, antoption.WithHeader("X-Api-Key", cfg.APIKey))
	}
	return opts
}

// APIOf reports the wire API of a Summarizer made by New, seen through NewResilient: "responses",
// "chat" or "messages"; "" for any other implementation.
func APIOf(s Summarizer) dialect.Name {
	if a, ok := s.(interface{ api() dialect.Name }); ok {
		return a.api()
	}
	return ""
}

func (c *client) api() dialect.Name { return c.cfg.API }

// Summarize implements Summarizer.
func (c *client) Summarize(ctx context.Context, req Request) (Result, error) {
	model := c.cfg.Model
	if model == "" {
		model = req.Model
	}
	if model == "" {
		return Result{}, &Error{Err: errors.New("no model: set Config.Model or Request.Model")}
	}
	entries := make([]string, 0, len(req.Entries))
	for _, e := range req.Entries {
		if strings.TrimSpace(e) != "" {
			entries = append(entries, e)
		}
	}
	if len(entries) == 0 {
		return Result{}, ErrNothingToSummarize
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	chunks, err := c.plan(req, entries)
	if err != nil {
		return Result{}, err
	}

	creds := c.credentials(req.Auth)
	res := Result{Model: model}
	prev, splits := req.Previous, 0
	for i := 0; i < len(chunks); i++ {
		out, err := c.call(ctx, model, instructionsFor(req.Instructions, prev != ""), userMessage(prev, chunks[i]), creds)
		res.Calls++
		res.Usage.add(out.usage)
		if err != nil {
			if isContextOverflow(err) && splits < maxOverflowSplits {
				if sub := c.split(chunks[i]); sub != nil {
					splits++
					chunks = slices.Replace(chunks, i, i+1, sub...)
					i--
					continue
				}
			}
			return res, err
		}
		prev = out.text
		if out.model != "" {
			res.Model = out.model
		}
	}
	res.Summary = prev
	return res, nil
}

// plan decides the calls: one if everything fits the summariser's window, else chunks sized so
// that every call — the first carrying req.Previous, later ones the previous chunk's summary,
// which the output limit bounds — fits with room for the output.
func (c *client) plan(req Request, entries []string) ([][]string, error) {
	counts := make([]int, len(entries))
	sep := c.count(entrySeparator)
	total := 0
	for i, e := range entries {
		counts[i] = c.count(e)
		total += counts[i] + sep
	}
	fixed := c.cfg.MaxOutputTokens + callOverhead
	single := fixed + c.count(instructionsFor(req.Instructions, req.Previous != "")) +
		c.count(userMessage(req.Previous, nil)) + total
	if single <= c.cfg.ContextTokens {
		return [][]string{entries}, nil
	}
	reserve := max(c.cfg.MaxOutputTokens, c.count(req.Previous))
	budget := c.cfg.ContextTokens - fixed - reserve -
		c.count(instructionsFor(req.Instructions, true)) - c.count(userMessage(" ", nil))
	if budget < minChunkTokens {
		return nil, &Error{Err: fmt.Errorf("context window of %d tokens leaves %d for the transcript after instructions, previous summary and output", c.cfg.ContextTokens, budget)}
	}
	return chunkCounted(entries, counts, budget, c.count), nil
}

// split re-chunks a chunk the server rejected as too long into pieces of half its estimated
// size (truncating further if it is a single entry), or returns nil if that would fall below
// minChunkTokens.
func (c *client) split(chunk []string) [][]string {
	total := 0
	for _, e := range chunk {
		total += c.count(e)
	}
	half := total / 2
	if half < minChunkTokens {
		return nil
	}
	return Chunk(chunk, half, c.count)
}

// credentials returns the caller's credential headers to set on each call, or nil when an API
// key is configured: the configured key must never be mixed with a caller's. Each API reads only
// its own field of Auth.
func (c *client) credentials(a Auth) http.Header {
	if c.cfg.APIKey != "" {
		return nil
	}
	out := http.Header{}
	if c.cfg.API == dialect.Messages {
		h := a.AnthropicHeader
		switch {
		case h.Get("X-Api-Key") != "":
			out.Set("X-Api-Key", h.Get("X-Api-Key"))
		case h.Get("Authorization") != "":
			out.Set("Authorization", h.Get("Authorization"))
			if beta := oauthBetas(h.Values("Anthropic-Beta")); beta != "" {
				out.Set("Anthropic-Beta", beta)
			}
		}
		return out
	}
	for _, k := range forwardedHeaders {
		if v := a.Header.Get(k); v != "" {
			out.Set(k, v)
		}
	}
	return out
}

// oauthBetas keeps the oauth-* flags of anthropic-beta values (several lines or one
// comma-joined line): the other flags of the caller's request change what the Messages API
// accepts and mean nothing to a summarisation.
func oauthBetas(values []string) string {
	var keep []string
	for _, v := range values {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); strings.HasPrefix(f, "oauth-") && len(keep) < 8 {
				keep = append(keep, f)
			}
		}
	}
	return strings.Join(keep, ",")
}

// callOutput is the result of one LLM call.
type callOutput struct {
	text  string
	model string
	usage Usage
	cut   bool // the output limit stopped generation
}

// call makes one summariser call under the per-call timeout and maps its outcome onto the
// package's error contract.
func (c *client) call(ctx context.Context, model, instructions, input string, creds http.Header) (callOutput, error) {
	cctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var resp *http.Response
	var (
		out callOutput
		err error
	)
	switch c.cfg.API {
	case dialect.Messages:
		opts := []antoption.RequestOption{antoption.WithResponseInto(&resp)}
		for k := range creds {
			opts = append(opts, antoption.WithHeader(k, creds.Get(k)))
		}
		out, err = c.callMessages(cctx, model, instructions, input, opts)
	default:
		opts := []option.RequestOption{option.WithResponseInto(&resp)}
		for k := range creds {
			opts = append(opts, option.WithHeader(k, creds.Get(k)))
		}
		if c.cfg.API == dialect.Chat {
			out, err = c.callChat(cctx, model, instructions, input, opts)
		} else {
			out, err = c.callResponses(cctx, model, instructions, input, opts)
		}
	}
	if err != nil {
		return callOutput{}, classify(ctx, resp, err)
	}
	out.text = cleanSummary(out.text)
	if out.text == "" {
		status := http.StatusOK
		if resp != nil {
			status = resp.StatusCode
		}
		// Cut off by the output limit, a retry would stop at the same place.
		return out, &Error{Status: status, Retryable: !out.cut, Err: ErrEmptySummary}
	}
	return out, nil
}

func (c *client) callResponses(ctx context.Context, model, instructions, input string, opts []option.RequestOption) (callOutput, error) {
	r, err := c.responses.New(ctx, responses.ResponseNewParams{
		Model:        model,
		Instructions: openai.String(instructions),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage(input, responses.EasyInputMessageRoleUser),
		}},
		// The transcript is private to this compaction; nothing should outlive the call.
		Store:           openai.Bool(false),
		MaxOutputTokens: openai.Int(int64(c.cfg.MaxOutputTokens)),
	}, opts...)
	if err != nil {
		return callOutput{}, err
	}
	u := r.Usage
	return callOutput{
		text:  r.OutputText(),
		model: r.Model,
		cut:   r.IncompleteDetails.Reason == "max_output_tokens",
		usage: Usage{
			InputTokens:     u.InputTokens,
			OutputTokens:    u.OutputTokens,
			TotalTokens:     u.TotalTokens,
			CachedTokens:    u.InputTokensDetails.CachedTokens,
			ReasoningTokens: u.OutputTokensDetails.ReasoningTokens,
		},
	}, nil
}

func (c *client) callChat(ctx context.Context, model, instructions, input string, opts []option.RequestOption) (callOutput, error) {
	r, err := c.chat.New(ctx, openai.ChatCompletionNewParams{
		Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage(instructions),
			openai.UserMessage(input),
		},
		// max_completion_tokens, not the deprecated max_tokens: OpenAI's reasoning models
		// reject the latter, and vLLM and LiteLLM accept both.
		MaxCompletionTokens: openai.Int(int64(c.cfg.MaxOutputTokens)),
	}, opts...)
	if err != nil {
		return callOutput{}, err
	}
	out := callOutput{
		model: r.Model,
		usage: Usage{
			InputTokens:     r.Usage.PromptTokens,
			OutputTokens:    r.Usage.CompletionTokens,
			TotalTokens:     r.Usage.TotalTokens,
			CachedTokens:    r.Usage.PromptTokensDetails.CachedTokens,
			ReasoningTokens: r.Usage.CompletionTokensDetails.ReasoningTokens,
		},
	}
	if len(r.Choices) > 0 {
		out.text = r.Choices[0].Message.Content
		out.cut = r.Choices[0].FinishReason == "length"
	}
	return out, nil
}

// callMessages is one Messages API call: the prompt as the system text, the transcript as the
// one user message, max_tokens the output limit. The summary is the answer's text blocks
// (thinking and any other blocks are skipped). Usage follows the OpenAI convention of this
// package: InputTokens counts every prompt token, cache reads and writes included (Anthropic's
// input_tokens does not), CachedTokens the cache reads.
func (c *client) callMessages(ctx context.Context, model, instructions, input string, opts []antoption.RequestOption) (callOutput, error) {
	r, err := c.messages.New(ctx, anthropic.MessageNewParams{
		Model:     anthropic.Model(model),
		MaxTokens: int64(c.cfg.MaxOutputTokens),
		System:    []anthropic.TextBlockParam{{Text: instructions}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(input))},
	}, opts...)
	if err != nil {
		return callOutput{}, err
	}
	var text strings.Builder
	for _, b := range r.Content {
		if b.Type == "text" {
			text.WriteString(b.Text)
		}
	}
	u := r.Usage
	in := u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
	return callOutput{
		text:  text.String(),
		model: string(r.Model),
		cut:   r.StopReason == anthropic.StopReasonMaxTokens,
		usage: Usage{
			InputTokens:     in,
			OutputTokens:    u.OutputTokens,
			TotalTokens:     in + u.OutputTokens,
			CachedTokens:    u.CacheReadInputTokens,
			ReasoningTokens: u.OutputTokensDetails.ThinkingTokens,
		},
	}, nil
}

// cleanSummary trims the text and drops a leading <think>…</think> block, which open reasoning
// models served without a reasoning parser put in the content. An unclosed block means the
// model ran out of tokens while thinking: there is no summary.
func cleanSummary(s string) string {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, "<think>"); ok {
		_, after, closed := strings.Cut(rest, "</think>")
		if !closed {
			return ""
		}
		s = strings.TrimSpace(after)
	}
	return s
}

// ErrAnswerTooLarge is the cause of an *Error when the summariser's answer is larger than any
// summary within its output budget can be (maxAnswerBytes): a server that ignores
// max_output_tokens. The answer is not read past the bound, and the call is not retried.
var ErrAnswerTooLarge = errors.New("summarizer: answer larger than its output budget allows")

// maxAnswerBytes bounds the body of one summariser answer: 64 bytes per output token (a token is
// a few bytes of text, JSON escaping can multiply that by six) plus 1 MiB for the envelope.
func maxAnswerBytes(maxOutputTokens int) int64 { return 1<<20 + 64*int64(maxOutputTokens) }

// limitAnswer is the openai-go middleware that stops reading an answer body past limit bytes:
// the read fails with ErrAnswerTooLarge, so a runaway answer never sits in memory whole.
func limitAnswer(limit int64) option.Middleware {
	return func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		return limitResponse(limit)(next(req))
	}
}

// limitAnswerAnthropic is limitAnswer for anthropic-sdk-go.
func limitAnswerAnthropic(limit int64) antoption.Middleware {
	return func(req *http.Request, next antoption.MiddlewareNext) (*http.Response, error) {
		return limitResponse(limit)(next(req))
	}
}

// limitResponse bounds a response's body to limit bytes (limitedBody).
func limitResponse(limit int64) func(*http.Response, error) (*http.Response, error) {
	return func(resp *http.Response, err error) (*http.Response, error) {
		if err == nil && resp != nil && resp.Body != nil {
			resp.Body = &limitedBody{rc: resp.Body, left: limit}
		}
		return resp, err
	}
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the limit from a longer one.
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			return 0, ErrAnswerTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
