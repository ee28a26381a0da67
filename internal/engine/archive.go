package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/compactd/compactd/internal/api"
	"github.com/compactd/compactd/internal/archive"
	"github.com/compactd/compactd/internal/compact"
)

// Compaction is lossy; the archive is not. Every compaction stores the exact raw items it
// replaced, sealed, under a conversation id, and the sealed payload points at that segment (and
// each segment at the one before), so a conversation's whole history can be walked back and
// searched — by operators, and by the model through the recall tool.

// archiveReplaced stores the raw items a compaction summarised (compactd's own handoff messages
// excepted: their originals are in the previous segment) and returns the reference to seal into
// the payload. With no archive configured it returns nil.
func (e *Engine) archiveReplaced(ctx context.Context, in Request, model string, items []api.Item, w compact.Window) (*compact.ArchiveRef, error) {
	if e.cfg.Archive == nil {
		return nil, nil
	}
	raw := make([]json.RawMessage, 0, len(w.Summarise))
	for _, i := range w.Summarise {
		if !items[i].Handoff {
			raw = append(raw, json.RawMessage(items[i].Raw))
		}
	}
	seg := archive.Segment{
		Tenant: in.Tenant, Conversation: in.Conversation, Owner: in.Owner, Kind: archive.KindCompaction, Items: raw,
		Meta: map[string]string{"item": in.ID, "model": model},
	}
	if in.Prev != nil && in.Prev.Payload.Archive != nil {
		seg.Previous = in.Prev.Payload.Archive.ID
	}
	ref, err := e.cfg.Archive.Put(ctx, seg)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return &compact.ArchiveRef{ID: ref.ID, Hash: ref.Hash, Conversation: in.Conversation, Owner: in.Owner}, nil
}
