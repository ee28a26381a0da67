package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
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

// foreign is Env.Foreign: n foreign compactions at where. Under reject it counts and logs them
// and reports true (the adapter answers the 400); under drop it says so in a warning header, a
// metric and a warn log line (locations and counts only, never content).
func (s *Server) foreign(w http.ResponseWriter, d dialect, n int, where string) bool {
	if s.cfg.ForeignItems == ForeignReject {
		s.metrics.ForeignItems(apiName(d), "rejected", n)
		s.log.Warn("rejected a request holding foreign compaction items (--foreign-items reject)", "api", apiName(d), "items", n)
		return true
	}
	w.Header().Add("X-Compactd-Warning", "dropped "+strconv.Itoa(n)+" foreign compaction item(s) at "+where+
		": not issued by compactd, so never opened; whatever they summarised is no longer in the model's view (--foreign-items reject refuses such requests instead)")
	s.metrics.ForeignItems(apiName(d), "dropped", n)
	s.log.Warn("dropped foreign compaction items: the history they replaced is gone from the model's view",
		"api", apiName(d), "items", n, "at", where)
	return false
}
