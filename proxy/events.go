package proxy

import (
	"log/slog"
	"net/http"
)

// compacted records one compaction event: one log line with the figures an operator needs, never
// the summary or any prompt content.
func (s *Server) compacted(r *http.Request, trigger string, c *compaction) {
	attrs := []any{
		slog.String("trigger", trigger),
		slog.String("item", c.id),
		slog.Int("tokens_before", c.payload.TokensBefore),
		slog.Int("tokens_after", c.payload.TokensAfter),
		slog.Int("items_replaced", c.payload.ItemsReplaced),
		slog.Int64("summariser_input_tokens", c.usage.InputTokens),
		slog.Int64("summariser_output_tokens", c.usage.OutputTokens),
	}
	attrs = append(attrs, clientTurnFrom(r.Header).LogAttrs()...)
	s.log.Info("compacted", attrs...)
}
