package proxy

import (
	"log/slog"
	"net/http"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/jsonx"
	"github.com/compactd/compactd/internal/metrics"
)

// clientTurn is what a client tells about a turn in its own headers. Codex CLI sends
// x-codex-turn-metadata (JSON; request_kind "compaction" and a compaction object on compaction
// turns) and session-id. Phase, Reason and Trigger are safe as metric labels (bounded, sanitised);
// Session is for logs only, never a label.
type clientTurn struct {
	Session string
	Kind    string // request_kind
	Phase   string // compaction.phase: pre_turn, post_turn, …
	Reason  string // compaction.reason: context_limit, user_requested, …
	Trigger string // compaction.trigger: auto, manual, …
}

func clientTurnFrom(h http.Header) clientTurn {
	ct := clientTurn{Session: h.Get("Session-Id")}
	md := h.Get("X-Codex-Turn-Metadata")
	// The header is client bytes: bound its depth before gjson reads it.
	if md == "" || jsonx.ValidString(md) != nil {
		return ct
	}
	m := gjson.Parse(md)
	if ct.Session == "" {
		ct.Session = m.Get("session_id").Str
	}
	ct.Kind = metrics.Label(m.Get("request_kind").Str)
	ct.Phase = metrics.Label(m.Get("compaction.phase").Str)
	ct.Reason = metrics.Label(m.Get("compaction.reason").Str)
	ct.Trigger = metrics.Label(m.Get("compaction.trigger").Str)
	return ct
}

// appendLogAttrs appends the turn's client labels to a, omitting what is absent: LogAttrs for
// the access log, which builds its record from a slice on the stack.
func (ct clientTurn) appendLogAttrs(a []slog.Attr) []slog.Attr {
	for _, kv := range [...][2]string{{"session", ct.Session}, {"client_phase", ct.Phase},
		{"client_reason", ct.Reason}, {"client_trigger", ct.Trigger}} {
		if kv[1] != "" {
			a = append(a, slog.String(kv[0], kv[1]))
		}
	}
	return a
}

// LogAttrs renders the turn's client labels for a log line, omitting what is absent.
func (ct clientTurn) LogAttrs() []any {
	var a []any
	add := func(k, v string) {
		if v != "" {
			a = append(a, slog.String(k, v))
		}
	}
	add("session", ct.Session)
	add("client_phase", ct.Phase)
	add("client_reason", ct.Reason)
	add("client_trigger", ct.Trigger)
	return a
}
