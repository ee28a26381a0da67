package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/compactd/compactd/internal/fault"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/api"
)

// Foreign compaction items.
//
// A client that talked to OpenAI (or Anthropic) directly, and is then pointed at compactd, still
// holds the compaction items that service issued: Codex replays OpenAI's own
// {"type":"compaction","encrypted_content":"gAAAA…"} items on resume after a provider switch
// (openai/codex#45401), and an Anthropic SDK client holds Anthropic's compaction blocks. compactd
// cannot open them (they are sealed under someone else's key), and must not forward them (the
// upstream behind compactd is often not the service that issued them, and the upstream never
// sees a compaction item compactd did not open).
//
// Foreign, precisely: a Responses input item of type compaction or compaction_summary, or a
// Messages content block of type compaction with non-null content, whose encrypted_content is
// a non-empty JSON string that does not start with compactd's "cmp_" id prefix. compactd's own
// encrypted_content is always "cmp_<id>.<sealed>", so one that starts with "cmp_" claims to be
// compactd's: if it fails to open (tampered, truncated, another tenant's, an unknown key) that
// is still a 400, never a silent drop, so a damaged item of compactd's is not mistaken for
// someone else's. A compaction item without encrypted_content is not valid-looking either
// (every issuer sets it) and stays a 400.
//
// What the history before a foreign item holds is the client's business: a client that
// followed the issuer's contract already dropped what the item superseded, so once the item
// is dropped that part of the conversation is simply gone from the model's view. compactd says
// so in X-Compactd-Warning, a warn log line and compactd_foreign_items_total. A dropped item is
// never opened or decoded, so dropping one implies no trust in it.

// ForeignItems is what compactd does with a foreign compaction item or block.
type ForeignItems string

const (
	// ForeignDrop (the default) removes foreign items before forwarding, with a warning.
	ForeignDrop ForeignItems = "drop"
	// ForeignReject answers a request holding one with a 400 that names the item.
	ForeignReject ForeignItems = "reject"
)

// ParseForeignItems parses --foreign-items: drop or reject ("" is drop).
func ParseForeignItems(s string) (ForeignItems, error) {
	switch ForeignItems(strings.TrimSpace(s)) {
	case "", ForeignDrop:
		return ForeignDrop, nil
	case ForeignReject:
		return ForeignReject, nil
	}
	return "", fmt.Errorf("%q is not a foreign-items policy: use drop or reject", s)
}

// foreignMessages applies the foreign-items policy to the compaction blocks of a Messages
// request: under drop it returns a shallow copy of req whose messages lack them (a message left
// empty is removed, as with compactd's own consumed blocks) and true; with none it returns req
// and false. Under reject it returns the 400.
func (s *Server) foreignMessages(w http.ResponseWriter, req *api.MessagesRequest) (*api.MessagesRequest, bool, *fault.Fault) {
	var foreign []api.BlockRef
	for _, ref := range req.Blocks {
		b := gjson.ParseBytes(req.Messages[ref.Message].Blocks[ref.Block].Raw)
		if c := b.Get("content"); !c.Exists() || c.Type == gjson.Null {
			continue // a no-op block, removed like compactd's own
		}
		if api.IsForeign(b.Get("encrypted_content")) {
			foreign = append(foreign, ref)
		}
	}
	if len(foreign) == 0 {
		return req, false, nil
	}
	where := make([]string, len(foreign))
	for i, ref := range foreign {
		where[i] = ref.Path()
	}
	if s.cfg.ForeignItems == ForeignReject {
		s.foreignRejected(dialectAnthropic, len(foreign))
		return nil, false, &fault.Fault{Code: "foreign_compaction_block", Message: fmt.Sprintf(
			"%s: a compaction block compactd did not issue (its encrypted_content is not in compactd's cmp_… format; it was most likely issued by Anthropic's server-side compaction before this conversation was routed through compactd), so compactd cannot open it. Remove it from messages, or run compactd with --foreign-items drop (COMPACTD_FOREIGN_ITEMS=drop) to drop such blocks and continue without the history they replaced.",
			strings.Join(where, ", "))}
	}
	drop := make(map[api.BlockRef]bool, len(foreign))
	for _, ref := range foreign {
		drop[ref] = true
	}
	out := *req
	out.Messages = make([]api.Message, 0, len(req.Messages))
	out.Blocks = nil
	for i, m := range req.Messages {
		kept := make([]api.Block, 0, len(m.Blocks))
		for j, b := range m.Blocks {
			if !drop[api.BlockRef{Message: i, Block: j}] {
				kept = append(kept, b)
			}
		}
		switch {
		case len(kept) == len(m.Blocks):
		case len(kept) == 0:
			continue
		default:
			m = m.WithBlocks(kept)
		}
		for j, b := range m.Blocks {
			if b.Type == api.BlockCompaction {
				out.Blocks = append(out.Blocks, api.BlockRef{Message: len(out.Messages), Block: j})
			}
		}
		out.Messages = append(out.Messages, m)
	}
	s.foreignDropped(w, dialectAnthropic, len(foreign), strings.Join(where, ","))
	return &out, true, nil
}

// foreign is Env.Foreign: n foreign compactions at where, counted and reported; it reports
// whether the policy rejects them.
func (s *Server) foreign(w http.ResponseWriter, d dialect, n int, where string) bool {
	if s.cfg.ForeignItems == ForeignReject {
		s.foreignRejected(d, n)
		return true
	}
	s.foreignDropped(w, d, n, where)
	return false
}

// foreignDropped says that n foreign items were dropped: the warning header, the metric and a
// warn log line. Locations and counts only, never content.
func (s *Server) foreignDropped(w http.ResponseWriter, d dialect, n int, where string) {
	w.Header().Add("X-Compactd-Warning", "dropped "+strconv.Itoa(n)+" foreign compaction item(s) at "+where+
		": not issued by compactd, so never opened; whatever they summarised is no longer in the model's view (--foreign-items reject refuses such requests instead)")
	s.metrics.ForeignItems(apiName(d), "dropped", n)
	s.log.Warn("dropped foreign compaction items: the history they replaced is gone from the model's view",
		"api", apiName(d), "items", n, "at", where)
}

func (s *Server) foreignRejected(d dialect, n int) {
	s.metrics.ForeignItems(apiName(d), "rejected", n)
	s.log.Warn("rejected a request holding foreign compaction items (--foreign-items reject)", "api", apiName(d), "items", n)
}

// resolveBlocksForeign is resolveBlocks after the foreign-items policy: foreign blocks are
// dropped (or refused) first, so only compactd's own blocks are opened.
func (s *Server) resolveBlocksForeign(ctx context.Context, w http.ResponseWriter, req *api.MessagesRequest) (msgView, *fault.Fault) {
	req, dropped, e := s.foreignMessages(w, req)
	if e != nil {
		return msgView{}, e
	}
	view, e := s.resolveBlocks(ctx, req)
	view.changed = view.changed || dropped
	return view, e
}
