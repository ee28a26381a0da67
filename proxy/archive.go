package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact"
)

// Compaction is lossy; the archive is not. Every compaction stores the exact raw items it
// replaced, sealed, under a conversation id, and the sealed payload points at that segment (and
// each segment at the one before), so a conversation's whole history can be walked back and
// searched — by operators, and by the model through the recall tool.

// maxConversationID bounds a client-chosen conversation id.
const maxConversationID = 128

// conversationID names the archive conversation of a request: an explicit x-compactd-session
// header, Codex's session-id, the prompt_cache_key, the conversation of the compaction item the
// request carries (lineage), or a new id.
func conversationID(r *http.Request, promptCacheKey string, prev *opened) string {
	for _, c := range []string{r.Header.Get("X-Compactd-Session"), r.Header.Get("Session-Id"), promptCacheKey} {
		if id := cleanID(c); id != "" {
			return id
		}
	}
	if prev != nil && prev.payload.Archive != nil && prev.payload.Archive.Conversation != "" {
		return prev.payload.Archive.Conversation
	}
	return newID("conv_")
}

// cleanID keeps an id only if it is short and printable ASCII without spaces.
func cleanID(s string) string {
	if s == "" || len(s) > maxConversationID {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return ""
		}
	}
	return s
}

// archiveReplaced stores the raw items a compaction summarised (compactd's own handoff messages
// excepted: their originals are in the previous segment) and returns the reference to seal into
// the payload. With no archive configured it returns nil.
func (s *Server) archiveReplaced(ctx context.Context, conv, itemID, model string, items []api.Item, w compact.Window, prev *opened) (*compact.ArchiveRef, error) {
	if s.cfg.Archive == nil {
		return nil, nil
	}
	raw := make([]json.RawMessage, 0, len(w.Summarise))
	for _, i := range w.Summarise {
		if !items[i].Handoff {
			raw = append(raw, json.RawMessage(items[i].Raw))
		}
	}
	seg := archive.Segment{
		Tenant: s.tenantOf(ctx), Conversation: conv, Kind: archive.KindCompaction, Items: raw,
		Meta: map[string]string{"item": itemID, "model": model},
	}
	if prev != nil && prev.payload.Archive != nil {
		seg.Previous = prev.payload.Archive.ID
	}
	ref, err := s.cfg.Archive.Put(ctx, seg)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return &compact.ArchiveRef{ID: ref.ID, Hash: ref.Hash, Conversation: conv}, nil
}
