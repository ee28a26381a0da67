// Package dialect holds what compactd knows of the APIs it serves, its "dialects": OpenAI
// Responses, Anthropic Messages and OpenAI Chat Completions.
package dialect

import (
	"fmt"
	"strings"
)

// Name is the one spelling of a dialect. Routes (--compact-threshold, --failure-policy), the
// conversation memo (its hash seed and stored records), the summariser's wire API
// (--summarizer-api), the failure policies, the metrics' api label, the logs' "api" attribute,
// the console's API filter, the fake upstream and the eval harness all name a dialect by it, and
// by no other word. It is not a provider: "openai" and "anthropic" name who serves a model
// (OpenTelemetry's gen_ai.provider.name, the upstream label), and the seal kinds bound into
// compaction items are separate constants that must never change.
type Name string

const (
	// Responses is the OpenAI Responses API: POST /v1/responses (and /v1/responses/compact).
	Responses Name = "responses"
	// Messages is the Anthropic Messages API: POST /v1/messages (and count_tokens).
	Messages Name = "messages"
	// Chat is the OpenAI Chat Completions API: POST /v1/chat/completions.
	Chat Name = "chat"
)

// All lists every dialect, in the order compactd documents them.
var All = []Name{Responses, Messages, Chat}

// Valid reports whether n is one of All.
func (n Name) Valid() bool { return n == Responses || n == Messages || n == Chat }

// Parse reads a dialect's name as an operator writes it (surrounding spaces are ignored; the
// name is case-sensitive, as everywhere else it is printed). Anything else is an error that
// lists the names it accepts.
func Parse(s string) (Name, error) {
	if n := Name(strings.TrimSpace(s)); n.Valid() {
		return n, nil
	}
	return "", fmt.Errorf("unknown API %q: want responses, messages or chat", strings.TrimSpace(s))
}
