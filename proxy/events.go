package proxy

import (
	"log/slog"

	"github.com/compactd/compactd/internal/engine"
	"github.com/compactd/compactd/internal/eventlog"
	"github.com/compactd/compactd/internal/metrics"
)

// compacted records the turn's compaction: one log line with the figures an
// operator needs, never the summary or any prompt content, and the event log's row
// (internal/eventlog), whose content is sealed.
func (p *pipe) compacted(trigger string, c *compaction) {
	s, r, d := p.s, p.r, p.a
	attrs := []any{
		slog.String("api", apiName(d)),
		slog.String("trigger", trigger),
		slog.String("item", c.ID),
		slog.Int("tokens_before", c.Payload.TokensBefore),
		slog.Int("tokens_after", c.Payload.TokensAfter),
		slog.Int("items_replaced", c.Payload.ItemsReplaced),
		slog.Int64("summariser_input_tokens", c.Usage.InputTokens),
		slog.Int64("summariser_output_tokens", c.Usage.OutputTokens),
	}
	ct := clientTurnFrom(r.Header)
	attrs = append(attrs, ct.LogAttrs()...)
	s.log.InfoContext(r.Context(), "compacted", attrs...)
	s.metrics.ClientCompaction(apiName(d), ct.Phase, ct.Reason)
	s.metrics.Compaction(metrics.CompactionEvent{API: apiName(d), Trigger: trigger, Outcome: "ok", Model: c.Payload.Model,
		TokensBefore: c.Payload.TokensBefore, TokensAfter: c.Payload.TokensAfter})
	if s.events != nil {
		s.events.Compaction(s.eventSource(r.Context(), eventlog.ClientKind(r.Header), apiName(d)), turnConversation(r.Context()), trigger, c.Compaction, c.took)
	}
}

// compactionFailed records a compaction that could not be completed (the turn was answered with
// an error, or forwarded uncompacted, and nothing was changed).
func (p *pipe) compactionFailed(trigger, model string, err error) {
	s, r, d := p.s, p.r, p.a
	attrs := append([]any{slog.String("api", apiName(d)), slog.String("trigger", trigger), slog.Any("err", err)}, clientTurnFrom(r.Header).LogAttrs()...)
	s.log.WarnContext(r.Context(), "compaction failed", attrs...)
	s.metrics.Compaction(metrics.CompactionEvent{API: apiName(d), Trigger: trigger, Outcome: "failed", Model: model})
	if s.events != nil {
		s.events.CompactionFailed(s.eventSource(r.Context(), eventlog.ClientKind(r.Header), apiName(d)), turnConversation(r.Context()), trigger, model,
			s.cfg.FailurePolicies.For(d.Name()), err)
	}
}

// compactionSkipped records a compaction the engine did not make because it could not make the
// request meaningfully smaller (engine.SkipReason): a debug line with the figures, never content,
// and the skip counters. The turn goes on uncompacted.
func (p *pipe) compactionSkipped(trigger string, err error) {
	s, r, d := p.s, p.r, p.a
	reason := engine.SkipReason(err)
	s.log.DebugContext(r.Context(), "compaction skipped", slog.String("api", apiName(d)), slog.String("trigger", trigger),
		slog.String("reason", reason), slog.String("detail", err.Error()))
	s.metrics.Skipped(apiName(d), trigger, reason)
}

// compactionNotMade records a compaction that was not made: skipped (engine.SkipReason) or failed.
func (p *pipe) compactionNotMade(trigger, model string, err error) {
	if engine.SkipReason(err) != "" {
		p.compactionSkipped(trigger, err)
		return
	}
	p.compactionFailed(trigger, model, err)
}
