package proxy

import (
	"context"

	"github.com/compactd/compactd/internal/compact/summarizer"
)

// Upgrading an agent's own compaction (Codex's local compaction turn, Claude Code's /compact):
// the route's adapter recognises the turn (turn.AgentCompaction), the pipeline compacts it with
// compactd's summariser, ledger, gap check and archive (pipe.agent), and the adapter answers in
// exactly the shape the agent parses.

// agentTrigger is the compaction trigger of upgraded agent compactions in logs and metrics.
const agentTrigger = "agent"

// agentCompactionHeader tells a client (and a test) that compactd answered the request itself.
const agentCompactionHeader = "X-Compactd-Agent-Compaction"

// The agent summariser: Config.AgentSummarizer writes the summaries (and gap checks) of upgraded
// agent compactions. compactCore calls s.cfg.Summarizer; New routes that through agentRouting,
// which picks the agent summariser for calls made under withAgentSummariser's context.

type agentSummariserKey struct{}

func withAgentSummariser(ctx context.Context) context.Context {
	return context.WithValue(ctx, agentSummariserKey{}, true)
}

type agentRouting struct{ main, agent summarizer.Summarizer }

func (a agentRouting) Summarize(ctx context.Context, req summarizer.Request) (summarizer.Result, error) {
	if on, _ := ctx.Value(agentSummariserKey{}).(bool); on {
		return a.agent.Summarize(ctx, req)
	}
	return a.main.Summarize(ctx, req)
}
