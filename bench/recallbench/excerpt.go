package recallbench

import (
	"context"
	"fmt"
	"strings"

	"github.com/compactd/compactd/internal/archive"
)

// Excerpt strategies for the recall step.
const (
	// ExcerptArchive (the default) uses the excerpts archive.Search cuts, exactly what the
	// proxy's recall tool hands the model. The archive focuses them itself: stop words dropped,
	// whole-token matches above camelCase/path-part matches, ties to the item repeating the query
	// words, the window centred on the longest whole-token match (archive/excerpt.go).
	ExcerptArchive = "archive"
	// ExcerptFocused is the name of the bench-side re-cut that this package used to do after
	// archive.Search. That logic now lives in the archive, so the name is an alias of
	// ExcerptArchive, kept so that `recall-bench -excerpts focused` (the command's default) still
	// measures what the proxy gets.
	ExcerptFocused = "focused"
	// ExcerptSegment is an upper bound for diagnosis, not a strategy: a hit counts when the answer
	// is anywhere in its decrypted segment, as if the excerpt were perfect. The gap between it
	// and ExcerptArchive is what excerpting loses; the rest is lost by search ranking.
	ExcerptSegment = "segment"
)

func validExcerpts(s string) error {
	switch s {
	case ExcerptArchive, ExcerptFocused, ExcerptSegment:
		return nil
	}
	return fmt.Errorf("recallbench: excerpts %q: want %s or %s", s, ExcerptArchive, ExcerptSegment)
}

// hitText is the text a hit contributes under the configured strategy.
func hitText(ctx context.Context, store archive.Store, h archive.Hit, strategy string) (string, error) {
	if strategy != ExcerptSegment {
		return h.Excerpt, nil
	}
	seg, err := store.Get(ctx, archive.DefaultTenant, h.SegmentID)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, raw := range seg.Items {
		b.WriteString(archive.ItemText(raw))
		b.WriteByte('\n')
	}
	return b.String(), nil
}
