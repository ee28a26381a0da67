package recallbench

import (
	"context"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/archive"
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
		b.WriteString(itemText(raw))
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// itemText is the searchable text of a raw item: its string and number values, one per line,
// without the structural fields (type, id, call_id, status) and ciphertext.
func itemText(raw []byte) string {
	var b strings.Builder
	var walk func(v gjson.Result)
	walk = func(v gjson.Result) {
		switch {
		case v.Type == gjson.String || v.Type == gjson.Number:
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(v.String())
		case v.IsArray():
			v.ForEach(func(_, e gjson.Result) bool { walk(e); return true })
		case v.IsObject():
			v.ForEach(func(k, e gjson.Result) bool {
				switch k.Str {
				case "type", "id", "call_id", "status", "encrypted_content":
				default:
					walk(e)
				}
				return true
			})
		}
	}
	walk(gjson.ParseBytes(raw))
	return b.String()
}
