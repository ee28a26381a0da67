package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/compactd/compactd/internal/dialect"
)

// Which summariser each route uses. By default every route summarises with the backend it
// forwards to, over that backend's own API and with the credentials its clients send: the
// Responses API at --upstream's /v1 for the Responses and Chat routes, the Messages API at
// --anthropic-upstream for the Messages route (an Anthropic-only deployment has no OpenAI
// backend to ask). --summarizer-url, --summarizer-api or --summarizer-key configure one
// summariser for every route instead. The models (--summarizer-model, --agent-summarizer-model)
// apply either way, to every route or per route.

// summariserPlan is the summariser of one or more routes. Routes with equal plans share one
// summariser (one retry budget, breaker and concurrency cap).
type summariserPlan struct {
	api               dialect.Name // the summariser's wire API
	url               string
	model, agentModel string // "": the request's own model; for agentModel, as model
}

// summariserPlans maps each route (every dialect.All) to its plan.
func (c *serveConfig) summariserPlans() map[dialect.Name]summariserPlan {
	openAI := summariserPlan{api: dialect.Responses, url: strings.TrimRight(c.upstream, "/") + "/v1"}
	messages := summariserPlan{api: dialect.Messages, url: strings.TrimRight(c.anthropicUpstream, "/") + "/v1"}
	if c.summarizerURL != "" || c.summarizerAPI != "" || c.summarizerKey != "" {
		// One summariser for every route, as configured; what is not configured is the
		// Responses route's default.
		if c.summarizerURL != "" {
			openAI.url = c.summarizerURL
		}
		if c.summarizerAPI != "" {
			openAI.api = dialect.Name(c.summarizerAPI)
		}
		messages = openAI
	}
	openAI.model, messages.model = c.summarizerModel.forRoute(dialect.Responses), c.summarizerModel.forRoute(dialect.Messages)
	openAI.agentModel = c.agentSummarizerModel.forRoute(dialect.Responses)
	messages.agentModel = c.agentSummarizerModel.forRoute(dialect.Messages)
	return map[dialect.Name]summariserPlan{dialect.Responses: openAI, dialect.Chat: openAI, dialect.Messages: messages}
}

// logAttrs describes the plan for the start log: API, base URL without credentials, models, and
// where the credentials come from. keyed: --summarizer-key is set; tenants: proxy authentication
// is on (the tenant's own provider key replaces the client's).
func (p summariserPlan) logAttrs(route dialect.Name, keyed, tenants bool) []any {
	model := p.model
	if model == "" {
		model = "the request's model"
	}
	agent := p.agentModel
	if agent == "" {
		agent = model
	}
	var creds string
	switch {
	case keyed:
		creds = "the configured key (--summarizer-key)"
	case tenants && p.api == dialect.Messages:
		creds = "the tenant's Anthropic key"
	case tenants:
		creds = "the tenant's OpenAI key"
	case p.api == dialect.Messages:
		creds = "the client's (x-api-key, or Authorization: Bearer)"
	default:
		creds = "the client's (Authorization, api-key)"
	}
	u := p.url
	if pu, err := url.Parse(p.url); err == nil {
		pu.User = nil // a password in the URL is a credential
		u = pu.String()
	}
	return []any{"route", string(route), "api", string(p.api), "url", u, "model", model, "agent_model", agent, "credentials", creds}
}

// routeModel is --summarizer-model and --agent-summarizer-model: a model for every route, or
// responses=M1,messages=M2 (the Chat route follows responses; a route left out gets "", the
// default).
type routeModel struct {
	text                string
	responses, messages string
}

func (m *routeModel) String() string {
	if m == nil {
		return ""
	}
	return m.text
}

func (m *routeModel) Set(s string) error {
	out := routeModel{text: s}
	if !strings.Contains(s, "=") {
		out.responses, out.messages = s, s
		*m = out
		return nil
	}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return fmt.Errorf("%q: want a model, or responses=MODEL,messages=MODEL", part)
		}
		switch d, _ := dialect.Parse(k); d {
		case dialect.Responses:
			out.responses = v
		case dialect.Messages:
			out.messages = v
		default:
			return fmt.Errorf("route %q: want responses or messages (chat follows responses)", k)
		}
	}
	*m = out
	return nil
}

// forRoute is the model of a route ("": the request's own model).
func (m routeModel) forRoute(route dialect.Name) string {
	if route == dialect.Messages {
		return m.messages
	}
	return m.responses
}

// responsesModel is the responses part of a --summarizer-model value (the whole value when it
// names one model, or does not parse): the model of the commands that share COMPACTD_SUMMARIZER_MODEL
// with serve and whose gap check speaks the Responses API (hooks run, handoff).
func responsesModel(s string) string {
	var m routeModel
	if m.Set(s) != nil {
		return s
	}
	return m.forRoute(dialect.Responses)
}
