package proxy

import (
	"context"

	"github.com/go-chi/chi/v5"

	"github.com/compactd/compactd/internal/eventlog"
)

// The event log (internal/eventlog): what the operator console shows of a conversation, written
// into the archive's database from the few places every compaction, memo application and recall
// search passes (events.go, compaction.go markApplied, recall.go recallSearch), never slowing a
// turn.

// EventSink is where the Server writes its event log (Config.Events). *archive.EventLog is one.
type EventSink = eventlog.Sink

// eventSource is what an event row says of the request of ctx: its tenant, owner and route,
// and the client kind and API given.
func (s *Server) eventSource(ctx context.Context, client, api string) eventlog.Source {
	src := eventlog.Source{Tenant: s.tenantOf(ctx), Owner: s.ownerOf(ctx), Client: client, API: api}
	if rc := chi.RouteContext(ctx); rc != nil {
		src.Route = rc.RoutePattern()
	}
	return src
}

// turnConversation is the archive conversation the request's compaction ran under (compactCore
// notes it), "" outside a compaction.
func turnConversation(ctx context.Context) string {
	if st := stateFrom(ctx); st != nil {
		return st.conversation
	}
	return ""
}
